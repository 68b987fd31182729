// End-to-end: the shipped deployments start the daemon as written, and their probes pass. For
// the Kubernetes pod (kubernetes/streamd.yaml read through deployment.yaml's args), the
// container image (the Containerfile's CMD) and the systemd unit (its ExecStart), the daemon is
// started with that command line, only the host's paths and addresses swapped for the test's
// own (deploy_manifest.h). What each supervisor provides is made here: the Secrets' or the
// mounted directories' or the credentials' TLS files (a CA and a certificate for the name the
// probes check, by openssl) and a keys file. Each must serve TLS with API keys (plaintext
// refused, no key UNAUTHENTICATED, a key admitted), every probe it ships (deployment.yaml's
// three exec probes, the image's HEALTHCHECK) must exit 0 within its own timeout when run as
// written, and the daemon must drain on SIGTERM. The pod's readiness probe must fail while its
// KV pool has no room for a new session, while liveness still passes, and recover after.
// (deploy/check.py checks that the files agree with each other.)
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/certs/test_certs.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/deploy_manifest.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using grpc::health::v1::HealthCheckResponse;
using namespace std::chrono_literals;
using Swaps = std::vector<std::pair<std::string, std::string>>;

constexpr char kApiKey[] = "deploy-e2e-key-3f9a";

std::string Source(const std::string& relative) {
  return std::string(STREAMD_SOURCE_DIR) + "/" + relative;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Dirname(const std::string& path) { return path.substr(0, path.rfind('/')); }

// What the supervisors provide, made once: tls/{tls.crt,tls.key,ca.crt} (a Secret of type
// kubernetes.io/tls with its ca.crt) for `name`, and keys/keys.yaml with kApiKey's hash.
struct Secrets {
  std::string tls_dir, keys_dir, name;
};

// How a target starts the daemon and what probes it, as written.
enum class Target { kPod, kImage, kUnit };
const char* TargetName(Target t) {
  return t == Target::kPod     ? "KubernetesPod"
         : t == Target::kImage ? "ContainerImage"
                               : "SystemdUnit";
}
void PrintTo(Target t, std::ostream* out) { *out << TargetName(t); }
struct Launch {
  std::vector<std::string> flags;  // for DaemonProcess::Start
  std::vector<Probe> probes;       // as written
  Swaps swaps;                     // host paths -> the test's
  std::string written_address;     // the address the probes name ("127.0.0.1:50051")
  bool json_log = false;           // the config it reads logs JSON
};

// Each of `keys` that `config` sets, as an override with its host paths swapped.
Status OverridePaths(const std::string& config, const std::vector<std::string>& keys,
                     const Swaps& swaps, std::vector<std::string>* flags) {
  for (const std::string& key : keys) {
    STREAMD_ASSIGN_OR_RETURN(const std::string value, YamlValue(config, key));
    if (!value.empty()) flags->push_back("--" + key + "=" + Rewrite({value}, swaps)[0]);
  }
  return OkStatus();
}

StatusOr<Launch> LaunchOf(Target target, const Secrets& s, const std::string& scratch) {
  Launch l;
  l.flags = {"--logging.level=info"};  // info: the effective config is logged (json or text)
  if (target == Target::kPod) {
    STREAMD_ASSIGN_OR_RETURN(PodManifest pod,
                             ReadPodManifest(Source("deploy/kubernetes/deployment.yaml")));
    for (const auto& [mount, secret] : pod.secret_mounts) {
      if (secret == "streamd-tls") l.swaps.emplace_back(mount, s.tls_dir);
      if (secret == "streamd-keys") l.swaps.emplace_back(mount, s.keys_dir);
    }
    // The ConfigMap, mounted where the args read it.
    const std::string config = Source("deploy/kubernetes/streamd.yaml");
    l.swaps.emplace_back("/etc/streamd/streamd.yaml", config);
    const std::vector<std::string> args = Rewrite(pod.args, l.swaps);
    l.flags.insert(l.flags.end(), args.begin(), args.end());
    STREAMD_RETURN_IF_ERROR(
        OverridePaths(config, {"server.tls.cert_file", "server.tls.key_file", "auth.keys_file"},
                      l.swaps, &l.flags));
    l.probes = pod.probes;
    l.written_address = "127.0.0.1:" + std::to_string(pod.grpc_port);
    l.json_log = true;
  } else if (target == Target::kImage) {
    STREAMD_ASSIGN_OR_RETURN(ImageManifest image,
                             ReadImageManifest(Source("deploy/container/Containerfile")));
    // The mounted directories, the image's config (deploy/streamd.yaml) and its addresses.
    l.swaps = {{Dirname(FlagValue(image.cmd, "server.tls.cert_file")), s.tls_dir},
               {Dirname(FlagValue(image.cmd, "auth.keys_file")), s.keys_dir},
               {"/etc/streamd/streamd.yaml", Source("deploy/streamd.yaml")},
               {FlagValue(image.cmd, "server.listen_address"), "127.0.0.1:0"},
               {FlagValue(image.cmd, "server.metrics_address"), "127.0.0.1:0"}};
    const std::vector<std::string> cmd = Rewrite(image.cmd, l.swaps);
    l.flags.insert(l.flags.end(), cmd.begin(), cmd.end());
    l.probes = {image.healthcheck};
    const std::string listen = FlagValue(image.cmd, "server.listen_address");
    l.written_address = "127.0.0.1:" + listen.substr(listen.rfind(':') + 1);
  } else {
    STREAMD_ASSIGN_OR_RETURN(UnitManifest unit,
                             ReadUnitManifest(Source("deploy/systemd/streamd.service")));
    // $CREDENTIALS_DIRECTORY: each credential a copy of the file it names, as systemd makes.
    const std::string credentials = scratch + "/credentials";
    std::filesystem::create_directories(credentials);
    for (const auto& [name, source] : unit.credentials) {
      const std::string base = source.substr(source.rfind('/') + 1);
      const std::string from = std::filesystem::exists(s.tls_dir + "/" + base)
                                   ? s.tls_dir + "/" + base
                                   : s.keys_dir + "/" + base;
      std::filesystem::copy_file(from, credentials + "/" + name,
                                 std::filesystem::copy_options::overwrite_existing);
    }
    l.swaps = {{"%d", credentials},
               {"/etc/streamd/streamd.yaml", Source("deploy/streamd.yaml")},
               {FlagValue(unit.serve_args, "server.listen_address"), "127.0.0.1:0"}};
    const std::vector<std::string> args = Rewrite(unit.serve_args, l.swaps);
    l.flags.insert(l.flags.end(), args.begin(), args.end());
  }
  return l;
}

class DeployConfigE2eTest : public ::testing::TestWithParam<Target> {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/streamd_deploy_e2e_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The certificate names what the probes check: a name the pod's probes and the image's
    // HEALTHCHECK disagree on fails one of them.
    auto pod = ReadPodManifest(Source("deploy/kubernetes/deployment.yaml"));
    ASSERT_TRUE(pod.ok()) << pod.status().ToString();
    secrets_.name = FlagValue(pod->probes.at(1).argv, "tls-server-name");
    ASSERT_FALSE(secrets_.name.empty()) << "the readiness probe names no certificate name";
    streamd::testing::TestCerts certs(dir_);
    for (const Status& s :
         {certs.MakeCa("ca"),
          certs.MakeLeaf("server", "ca", streamd::testing::LeafKind::kServer, {secrets_.name})}) {
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    secrets_.tls_dir = dir_ + "/tls";
    secrets_.keys_dir = dir_ + "/keys";
    std::filesystem::create_directories(secrets_.tls_dir);
    std::filesystem::create_directories(secrets_.keys_dir);
    std::filesystem::copy_file(certs.Cert("server"), secrets_.tls_dir + "/tls.crt");
    std::filesystem::copy_file(certs.Key("server"), secrets_.tls_dir + "/tls.key");
    std::filesystem::copy_file(certs.Cert("ca"), secrets_.tls_dir + "/ca.crt");
    std::ofstream(secrets_.keys_dir + "/keys.yaml")
        << "keys:\n  - {tenant: deploy-e2e, role: user, sha256: " << Sha256Hex(kApiKey) << "}\n";
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // A TLS channel trusting the CA and checking the certificate's name, as the probes do.
  static std::shared_ptr<grpc::Channel> TlsChannel(const DaemonProcess& d) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ReadAll(secrets_.tls_dir + "/ca.crt");
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(secrets_.name);
    return d.Channel(grpc::SslCredentials(o), args);
  }
  static grpc::Status Health(const std::shared_ptr<grpc::Channel>& channel) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    HealthCheckResponse health;
    return grpc::health::v1::Health::NewStub(channel)->Check(&ctx, {}, &health);
  }
  static grpc::Status List(const std::shared_ptr<grpc::Channel>& channel, const std::string& key) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
    v1::ListSessionsResponse out;
    return v1::Streamd::NewStub(channel)->ListSessions(&ctx, {}, &out);
  }

  // Runs `probe` as written against `d`: streamctl is the one built here, and the launch's
  // paths and written address are swapped. The run; `elapsed` its wall time.
  static RunResult RunProbe(const Launch& l, const DaemonProcess& d, const Probe& probe,
                            std::chrono::milliseconds* elapsed = nullptr) {
    Swaps swaps = l.swaps;
    swaps.emplace_back(l.written_address, d.address());
    std::vector<std::string> argv = Rewrite(probe.argv, swaps);
    EXPECT_EQ(argv.at(0), "streamctl") << probe.name;
    argv[0] = STREAMCTL_BINARY;
    const auto start = std::chrono::steady_clock::now();
    RunResult r = RunProgram(argv);
    if (elapsed != nullptr) {
      *elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
    }
    return r;
  }

  inline static std::string dir_;
  inline static Secrets secrets_;
};

TEST_P(DeployConfigE2eTest, ServesTlsWithKeysProbesPassAndDrains) {
  auto launch = LaunchOf(GetParam(), secrets_, dir_);
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  auto d = DaemonProcess::Start(launch->flags);
  ASSERT_NE(d, nullptr);
  // TLS, verified by the name the probes check; plaintext is refused.
  const grpc::Status tls = Health(TlsChannel(*d));
  EXPECT_TRUE(tls.ok()) << tls.error_message();
  EXPECT_FALSE(Health(d->Channel()).ok()) << "the port answers plaintext";
  // API keys: none or a wrong one is UNAUTHENTICATED, the Secret's is admitted.
  EXPECT_EQ(List(TlsChannel(*d), "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(List(TlsChannel(*d), "not-a-key").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status listed = List(TlsChannel(*d), kApiKey);
  EXPECT_TRUE(listed.ok()) << listed.error_message();
  // Every probe as written: SERVING, exit 0, within the timeout its runner gives it.
  for (const Probe& probe : launch->probes) {
    std::chrono::milliseconds elapsed{};
    const RunResult r = RunProbe(*launch, *d, probe, &elapsed);
    EXPECT_EQ(r.exit_code, 0) << probe.name << ": " << r.out << r.err;
    EXPECT_EQ(r.out, "SERVING\n") << probe.name;
    EXPECT_LT(elapsed.count(), probe.timeout_s * 1000) << probe.name << " is too slow";
  }
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
  // The file was read, not just named: the pod's sets logging.format json, which no flag
  // overrides, so its log lines are JSON objects; deploy/streamd.yaml keeps text.
  const std::string log = d->Stderr();
  EXPECT_EQ(log.rfind("{\"ts\":", 0) == 0, launch->json_log) << "logging.format not applied:\n"
                                                             << log;
}

INSTANTIATE_TEST_SUITE_P(Shipped, DeployConfigE2eTest,
                         ::testing::Values(Target::kPod, Target::kImage, Target::kUnit),
                         [](const ::testing::TestParamInfo<Target>& param) {
                           return std::string(TargetName(param.param));
                         });

// The pod's readiness probe, as written, turns the pod away while a new session would not fit
// (its liveness does not: the pod is fine), and lets it back when room is made.
using DeployPodE2eTest = DeployConfigE2eTest;

TEST_F(DeployPodE2eTest, ReadinessProbeFailsWhileThePoolIsFullAndLivenessPasses) {
  auto launch = LaunchOf(Target::kPod, secrets_, dir_);
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  // Room for one session with the default cache (4 sinks + a window of 1020 and a chunk of 256
  // being written: 82 blocks of 16 tokens, ~29 MiB of SmolLM2 K/V), not two; overrides the
  // config's pool, as DaemonProcess's own settings do.
  launch->flags.push_back("--engine.kv_pool=48MiB");
  auto d = DaemonProcess::Start(launch->flags);
  ASSERT_NE(d, nullptr);
  const auto probe = [&](const char* name) {
    for (const Probe& p : launch->probes) {
      if (p.name == name) return RunProbe(*launch, *d, p);
    }
    ADD_FAILURE() << "deployment.yaml has no " << name;
    return RunResult{};
  };
  // Readiness is re-read every 500 ms: wait (bounded) for the answer `exit_code`.
  const auto readiness_becomes = [&](int exit_code) {
    RunResult r;
    for (int i = 0; i < 20; ++i) {
      r = probe("readinessProbe");
      if (r.exit_code == exit_code) break;
      std::this_thread::sleep_for(250ms);
    }
    return r;
  };
  ASSERT_EQ(probe("readinessProbe").exit_code, 0) << "not ready with an empty pool";
  // Sessions (attached: their blocks stay reserved) until a default one no longer fits.
  std::vector<std::unique_ptr<RawStream>> sessions;
  RunResult ready;
  for (int i = 0; i < 8; ++i) {
    sessions.push_back(std::make_unique<RawStream>(TlsChannel(*d), 120s, kApiKey));
    ASSERT_TRUE(sessions.back()->Open()) << "session " << i;
    ready = readiness_becomes(1);
    if (ready.exit_code == 1) break;
  }
  EXPECT_EQ(ready.exit_code, 1) << "still ready with " << sessions.size() << " sessions";
  EXPECT_EQ(ready.out, "NOT_SERVING\n");
  for (const char* name : {"livenessProbe", "startupProbe"}) {
    const RunResult r = probe(name);
    EXPECT_EQ(r.exit_code, 0) << name << " failed with a full pool: " << r.out << r.err;
  }
  // Room again: ready again.
  for (auto& s : sessions) {
    s->Write(CloseMsg());
    s->WritesDone();
    s->Finish();
  }
  EXPECT_EQ(readiness_becomes(0).exit_code, 0) << "not ready after the sessions closed";
}

}  // namespace
}  // namespace streamd::e2e
