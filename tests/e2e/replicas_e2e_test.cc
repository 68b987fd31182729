// End-to-end: two replicas behind HAProxy (deploy/haproxy/haproxy.cfg, as shipped) sharing one
// snapshot directory. 20 sessions are opened through the proxy (balanced round-robin: an Open
// has no affinity key), each with its own context; each then resumes on the replica that holds
// it (the proxy learnt the place from the Open's answer). Then replica A is drained (SIGTERM):
// every session resumes through the proxy by its `x-streamd-session` key, A's on B, with caches
// intact (its greedy continuation equals that of a control session with the same history on a
// daemon of its own). Then a rolling
// restart: A comes back, B is drained, and again every session resumes, now on A, intact.
// TLS on both sides, as the config demands: the replicas serve certificates of a test CA (made
// by openssl, tests/certs) that HAProxy verifies, and the test connects to HAProxy over TLS.
// Loopback only; HAProxy must be installed (scripts/install-deps.sh does).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/certs/test_certs.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"

extern char** environ;

namespace streamd::e2e {
namespace {

using namespace std::chrono_literals;

constexpr char kHaproxy[] = "/usr/sbin/haproxy";
constexpr int kSessions = 20;
constexpr int32_t kTokensPerTurn = 4;

// A free loopback port (bound, then released: the replica that takes it next is started at
// once, so nothing else on a test machine grabs it meanwhile in practice).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 0;
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Client credentials trusting the test CA: what the test and its daemons' helpers connect with.
std::shared_ptr<grpc::ChannelCredentials> Trusting(const streamd::testing::TestCerts& certs) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadAll(certs.Cert("ca"));
  return grpc::SslCredentials(o);
}

// HAProxy in the foreground (-db) with the shipped config, and its addresses and TLS files in
// the environment: its certificate "proxy", the replicas' CA "ca" and their name "localhost".
class Proxy {
 public:
  Proxy(int port, const std::vector<int>& replicas, const streamd::testing::TestCerts& certs)
      : port_(port), credentials_(Trusting(certs)) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back("STREAMD_PROXY_BIND=127.0.0.1:" + std::to_string(port));
    env.push_back("STREAMD_PROXY_CERT=" + certs.Cert("proxy"));  // its key: proxy.pem.key
    env.push_back("STREAMD_REPLICA_CA=" + certs.Cert("ca"));
    env.push_back("STREAMD_REPLICA_NAME=localhost");
    for (size_t i = 0; i < replicas.size(); ++i) {
      env.push_back("STREAMD_REPLICA_" + std::to_string(i) +
                    "=127.0.0.1:" + std::to_string(replicas[i]));
    }
    const std::string config = std::string(STREAMD_SOURCE_DIR) + "/deploy/haproxy/haproxy.cfg";
    std::vector<std::string> args = {kHaproxy, "-db", "-f", config};
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (posix_spawn(&pid_, kHaproxy, nullptr, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
  }
  ~Proxy() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), credentials_);
  }

 private:
  int port_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  pid_t pid_ = -1;
};

// A session behind the proxy, and its control: a session with the same history on a daemon of
// its own that never stops, whose stream stays attached. A session that moved between replicas
// must go on exactly as its control (snapshots keep the K/V bit for bit), which a fresh session
// of the same tokens would not promise: a prefill computes K/V in other kernels than the decode
// steps that made them.
struct Tracked {
  std::string id;
  std::unique_ptr<RawStream> control;
};

class ReplicasE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(kHaproxy, X_OK), 0) << kHaproxy
                                         << " is missing: install the Debian package haproxy "
                                            "(scripts/install-deps.sh does)";
    char tmpl[] = "/tmp/streamd-replicas-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directory(dir_ + "/certs");
    certs_ = std::make_unique<streamd::testing::TestCerts>(dir_ + "/certs");
    using streamd::testing::LeafKind;
    for (const Status& s :
         {certs_->MakeCa("ca"), certs_->MakeLeaf("replica", "ca", LeafKind::kServer),
          certs_->MakeLeaf("proxy", "ca", LeafKind::kServer)}) {
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    // HAProxy finds a certificate's key in the file of the same name + ".key".
    std::filesystem::copy_file(certs_->Key("proxy"), certs_->Cert("proxy") + ".key");
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // A replica on `port` with the shared snapshot directory, serving TLS.
  std::unique_ptr<DaemonProcess> StartReplica(int port, bool shared = true) {
    auto d =
        DaemonProcess::Start({"--server.listen_address=127.0.0.1:" + std::to_string(port),
                              "--server.tls.cert_file=" + certs_->Cert("replica"),
                              "--server.tls.key_file=" + certs_->Key("replica"),
                              "--sessions.snapshot_dir=" + dir_ + (shared ? "/shared" : "/own"),
                              "--sessions.default_window=128", "--engine.kv_pool=256MiB",
                              // Behind a proxy every stream comes from the proxy's address: without
                              // API keys (tenants) all sessions are one "client", whose detached
                              // share would offload them (OPERATIONS.md).
                              "--sessions.max_detached_share=1"});
    if (d != nullptr) d->UseCredentials(Trusting(*certs_));
    return d;
  }

  // Resumes `s` through the proxy by its affinity key and generates one greedy turn; retried
  // while the proxy has not yet noticed a replica leaving (UNAVAILABLE) or the session is
  // still detaching on its old replica. Returns the tokens, or nothing.
  static std::optional<Generation> ResumeAndGenerate(const Proxy& proxy, const Tracked& s) {
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < end) {
      RawStream stream(proxy.Channel(), 60s, "", s.id);
      if (stream.Write(ResumeMsg(s.id))) {
        std::optional<v1::ServerMessage> m = stream.Read();
        if (m && m->has_opened()) {
          EXPECT_TRUE(m->opened().resumed());
          Generation g = GenerateOn(stream, kTokensPerTurn);
          stream.WritesDone();  // detached, not closed: it must survive what comes next
          stream.Finish();
          if (g.ended) return g;
        }
      }
      std::this_thread::sleep_for(200ms);
    }
    return std::nullopt;
  }

  // Every session resumes through the proxy and continues exactly as its control does.
  void ExpectAllResumeIntact(const Proxy& proxy, std::vector<Tracked>& sessions,
                             const std::string& when) {
    for (Tracked& s : sessions) {
      const Generation expected = GenerateOn(*s.control, kTokensPerTurn);
      std::optional<Generation> got = ResumeAndGenerate(proxy, s);
      ASSERT_TRUE(got) << when << ": session " << s.id << " did not resume through the proxy";
      EXPECT_EQ(got->ids, expected.ids) << when << ": session " << s.id << " lost its cache";
    }
  }

  std::string dir_;
  std::unique_ptr<streamd::testing::TestCerts> certs_;
};

TEST_F(ReplicasE2eTest, SessionsFollowTheirKeyThroughDrainsAndARollingRestart) {
  const int port_a = FreePort(), port_b = FreePort(), port_proxy = FreePort();
  auto a = StartReplica(port_a);
  auto b = StartReplica(port_b);
  auto control = StartReplica(FreePort(), /*shared=*/false);  // same settings
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(control, nullptr);
  Proxy proxy(port_proxy, {port_a, port_b}, *certs_);
  // Up once its health checks see both replicas.
  ASSERT_TRUE(WaitFor([&] {
    if (!proxy.running()) return true;  // failed below
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + 2s);
    v1::ModelInfo info;
    return v1::Streamd::NewStub(proxy.Channel())->GetModelInfo(&c, {}, &info).ok();
  })) << "HAProxy did not come up";
  ASSERT_TRUE(proxy.running()) << "HAProxy exited (its messages are above)";

  // 20 sessions through the proxy, each with a context of its own and one turn generated, and
  // their controls.
  std::vector<Tracked> sessions;
  for (int i = 0; i < kSessions; ++i) {
    RawStream s(proxy.Channel());
    auto opened = s.Open(OpenMsg().open());
    ASSERT_TRUE(opened);
    Tracked t{opened->session_id(), std::make_unique<RawStream>(control->Channel(), 600s)};
    ASSERT_TRUE(t.control->Open());
    std::vector<int32_t> context;
    for (int k = 0; k < 12; ++k) context.push_back(300 + 97 * i + 13 * k);
    ASSERT_FALSE(s.Append(TokensMsg(context).append()));
    ASSERT_FALSE(t.control->Append(TokensMsg(context).append()));
    Generation g = GenerateOn(s, kTokensPerTurn);
    ASSERT_TRUE(g.ended);
    EXPECT_EQ(g.ids, GenerateOn(*t.control, kTokensPerTurn).ids);
    s.WritesDone();  // detached: resumable
    s.Finish();
    sessions.push_back(std::move(t));
  }
  // Round-robin spread them over both replicas.
  const size_t on_a = ListSessions(*a).size(), on_b = ListSessions(*b).size();
  EXPECT_EQ(on_a + on_b, static_cast<size_t>(kSessions));
  EXPECT_GT(on_a, 0u);
  EXPECT_GT(on_b, 0u);
  // Steady state: every Resume reaches the replica that holds its session (the proxy learnt it
  // from the Open's answer), so no replica reads another's session from the shared directory.
  ExpectAllResumeIntact(proxy, sessions, "with both replicas up");
  for (const DaemonProcess* d : {a.get(), b.get()}) {
    EXPECT_EQ(MetricValue(d->ScrapeMetrics(), "streamd_snapshot_loads_total"), 0)
        << "a Resume reached a replica that did not hold its session";
  }
  EXPECT_EQ(ListSessions(*a).size(), on_a);
  EXPECT_EQ(ListSessions(*b).size(), on_b);

  // Drain A: it writes every session and exits; its sessions resume on B.
  a->Terminate();
  ASSERT_EQ(a->Wait(60s), 0) << a->Stderr();
  a.reset();
  ExpectAllResumeIntact(proxy, sessions, "after draining A");
  EXPECT_EQ(ListSessions(*b).size(), static_cast<size_t>(kSessions));

  // Rolling restart: A again (same port), then B drained: all of them resume on A.
  a = StartReplica(port_a);
  ASSERT_NE(a, nullptr);
  b->Terminate();
  ASSERT_EQ(b->Wait(60s), 0) << b->Stderr();
  b.reset();
  ExpectAllResumeIntact(proxy, sessions, "after the rolling restart");
  EXPECT_TRUE(proxy.running());
}

}  // namespace
}  // namespace streamd::e2e
