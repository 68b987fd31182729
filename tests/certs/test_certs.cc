#include "tests/certs/test_certs.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace streamd::testing {
namespace {

// A random serial: two certificates of one CA with equal serials confuse verifiers.
std::string Serial() {
  std::random_device rd;
  return std::to_string(1 + (static_cast<uint64_t>(rd()) << 20 ^ rd()) % 1'000'000'000'000ULL);
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  return out ? OkStatus() : InternalError("cannot write " + path);
}

}  // namespace

Status RunOpenssl(const std::vector<std::string>& args) {
  char tmpl[] = "/tmp/streamd_openssl_XXXXXX";
  const int err_fd = mkstemp(tmpl);
  if (err_fd < 0) return InternalError("mkstemp failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(err_fd, STDERR_FILENO);
    dup2(err_fd, STDOUT_FILENO);
    std::vector<char*> argv;
    static char openssl[] = "openssl";
    argv.push_back(openssl);
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp("openssl", argv.data());
    _exit(127);
  }
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  close(err_fd);
  std::ifstream in(tmpl);
  std::stringstream err;
  err << in.rdbuf();
  std::remove(tmpl);
  if (pid < 0) return InternalError("fork failed");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return OkStatus();
  std::string command = "openssl";
  for (const std::string& a : args) command += " " + a;
  return InternalError(command + " failed (exit " +
                       std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                       (WIFEXITED(status) && WEXITSTATUS(status) == 127
                            ? ", is openssl installed? apt-get install openssl"
                            : "") +
                       "): " + err.str());
}

namespace {

// `openssl req` reads its extensions from a config file; -subj gives the name.
constexpr char kReqConfig[] =
    "[req]\n"
    "distinguished_name = dn\n"
    "[dn]\n"
    "[ca]\n"
    "basicConstraints = critical, CA:TRUE\n"
    "keyUsage = critical, keyCertSign, cRLSign\n"
    "subjectKeyIdentifier = hash\n";

// `openssl req` arguments that make a new unencrypted P-256 key into `key_file`.
std::vector<std::string> NewKey(const std::string& key_file) {
  return {"-newkey", "ec",      "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes",  "-keyout", key_file};
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

Status TestCerts::MakeCa(const std::string& name) {
  const std::string config = dir_ + "/req.cnf";
  STREAMD_RETURN_IF_ERROR(WriteFile(config, kReqConfig));
  return RunOpenssl(
      Concat({"req", "-x509", "-days", "2", "-set_serial", Serial()},
             Concat(NewKey(Key(name)), {"-subj", "/CN=streamd test CA " + name, "-config", config,
                                        "-extensions", "ca", "-out", Cert(name)})));
}

Status TestCerts::MakeLeaf(const std::string& name, const std::string& ca, LeafKind kind,
                           const std::vector<std::string>& dns_names) {
  const bool server = kind == LeafKind::kServer;
  std::string names = "DNS:localhost, IP:127.0.0.1";
  for (const std::string& n : dns_names) names += ", DNS:" + n;
  const std::string config = dir_ + "/req.cnf";
  const std::string csr = dir_ + "/" + name + ".csr", ext = dir_ + "/" + name + ".ext";
  STREAMD_RETURN_IF_ERROR(WriteFile(config, kReqConfig));
  STREAMD_RETURN_IF_ERROR(
      WriteFile(ext, std::string("basicConstraints = critical, CA:FALSE\n"
                                 "keyUsage = critical, digitalSignature\n") +
                         (server ? "extendedKeyUsage = serverAuth\nsubjectAltName = " + names + "\n"
                                 : std::string("extendedKeyUsage = clientAuth\n"))));
  const std::string subject = server ? "/CN=localhost" : "/CN=streamd test client " + name;
  STREAMD_RETURN_IF_ERROR(RunOpenssl(
      Concat({"req", "-new"},
             Concat(NewKey(Key(name)), {"-subj", subject, "-config", config, "-out", csr}))));
  return RunOpenssl({"x509", "-req", "-in", csr, "-CA", Cert(ca), "-CAkey", Key(ca), "-set_serial",
                     Serial(), "-days", "1", "-extfile", ext, "-out", Cert(name)});
}

}  // namespace streamd::testing
