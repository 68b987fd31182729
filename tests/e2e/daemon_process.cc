#include "tests/e2e/daemon_process.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace streamd::e2e {
namespace {

std::string MakeTempDir() {
  char tmpl[] = "/tmp/streamd_e2e_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  return dir != nullptr ? dir : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// fork + exec with stdout/stderr redirected to files in `dir`.
pid_t Spawn(const std::vector<std::string>& args, const std::string& dir) {
  // The child's freopen would otherwise write out what this process has buffered, again.
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(127);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

}  // namespace

std::string StreamdBinary() { return STREAMD_BINARY; }

std::string ModelPath() {
  const char* env = std::getenv("STREAMD_MODEL");
  return env != nullptr ? env : "";
}

std::unique_ptr<DaemonProcess> DaemonProcess::Start(const std::vector<std::string>& overrides,
                                                    const std::vector<std::string>& wrap) {
  if (ModelPath().empty()) {
    ADD_FAILURE() << "STREAMD_MODEL is not set: run the tests with `make test`, or set "
                     "STREAMD_MODEL=$(scripts/fetch-model.sh)";
    return nullptr;
  }
  auto d = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  d->dir_ = MakeTempDir();
  std::vector<std::string> args = wrap;
  const std::vector<std::string> serve = {
      StreamdBinary(), "serve", "--port-file=" + d->dir_ + "/port", "--model.path=" + ModelPath(),
      "--server.listen_address=127.0.0.1:0", "--server.metrics_address=127.0.0.1:0",
      "--engine.kv_pool=96MiB", "--engine.threads=2",
      // Its own snapshots: never another test daemon's (tests
      // that restart a daemon pass one directory to both).
      "--sessions.snapshot_dir=" + d->dir_ + "/sessions", "--logging.level=warn"};
  args.insert(args.end(), serve.begin(), serve.end());
  args.insert(args.end(), overrides.begin(), overrides.end());
  d->pid_ = Spawn(args, d->dir_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string port = ReadFile(d->dir_ + "/port");
    if (!port.empty()) {
      d->port_ = std::atoi(port.c_str());
      return d;
    }
    int status = 0;
    if (waitpid(d->pid_, &status, WNOHANG) == d->pid_) {
      d->pid_ = -1;
      ADD_FAILURE() << "streamd serve exited before listening: " << d->Stderr();
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "streamd serve did not listen within 120 s: " << d->Stderr();
  return nullptr;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (dir_.rfind("/tmp/streamd_e2e_", 0) == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::shared_ptr<grpc::Channel> DaemonProcess::Channel(const grpc::ChannelArguments& args) const {
  return grpc::CreateCustomChannel(address(), credentials_, args);
}

std::shared_ptr<grpc::Channel> DaemonProcess::Channel(
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    grpc::ChannelArguments args) const {
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address(), credentials, args);
}

void DaemonProcess::Terminate() const {
  if (pid_ > 0) kill(pid_, SIGTERM);
}

void DaemonProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int DaemonProcess::Wait(std::chrono::seconds timeout) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string DaemonProcess::Stderr() const { return ReadFile(dir_ + "/stderr"); }
std::string DaemonProcess::Stdout() const { return ReadFile(dir_ + "/stdout"); }

int DaemonProcess::MetricsPort() const {
  const std::string out = Stdout();
  const std::string marker = "(metrics http://";
  const size_t at = out.find(marker);
  if (at == std::string::npos) return 0;
  const size_t end = out.find("/metrics)", at);
  const size_t colon = out.rfind(':', end);
  if (end == std::string::npos || colon == std::string::npos || colon < at) return 0;
  return std::atoi(out.substr(colon + 1, end - colon - 1).c_str());
}

int DaemonProcess::HttpPort() const {
  const std::string out = Stdout();
  const std::string marker = "OpenAI-compatible HTTP API on http";
  const size_t at = out.find(marker);
  if (at == std::string::npos) return 0;
  const size_t end = out.find("/v1", at);
  const size_t colon = out.rfind(':', end);
  if (end == std::string::npos || colon == std::string::npos || colon < at) return 0;
  return std::atoi(out.substr(colon + 1, end - colon - 1).c_str());
}

std::string DaemonProcess::ScrapeMetrics() const {
  const int port = MetricsPort();
  if (port <= 0) return "";
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10);  // a daemon that stops answering fails the test, not hangs it
  client.set_read_timeout(10);
  const httplib::Result res = client.Get("/metrics");
  if (!res || res->status != 200) return "";
  return res->body;
}

double MetricValue(const std::string& body, const std::string& series) {
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return -1;
}

RunResult RunStreamd(const std::vector<std::string>& args) {
  std::vector<std::string> full = {StreamdBinary()};
  full.insert(full.end(), args.begin(), args.end());
  return RunProgram(full);
}

std::string Sha256Hex(const std::string& text) {
  return RunProgram({"/bin/sh", "-c", "printf %s '" + text + "' | sha256sum"}).out.substr(0, 64);
}

RunResult RunProgram(const std::vector<std::string>& argv) {
  const std::string dir = MakeTempDir();
  const pid_t pid = Spawn(argv, dir);
  int status = 0;
  waitpid(pid, &status, 0);
  RunResult r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(dir + "/stdout"),
              ReadFile(dir + "/stderr")};
  std::remove((dir + "/stdout").c_str());
  std::remove((dir + "/stderr").c_str());
  rmdir(dir.c_str());
  return r;
}

}  // namespace streamd::e2e
