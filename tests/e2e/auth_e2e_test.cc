// End-to-end: API keys and tenants (auth.keys_file). No key, a wrong key and another tenant's
// key get the right codes and see nothing; a session belongs to the tenant that opened it, in
// memory and in its snapshot across a restart; admins see every session; quotas are refused
// naming the quota; the keys file is read again when it changes; health and reflection need no
// key unless auth.health_requires_key / auth.reflection_requires_key close them.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using namespace std::chrono_literals;

// Keys and their SHA-256 (`printf %s KEY | sha256sum`): computed outside the daemon.
constexpr char kAcmeKey[] = "acme-key-5f0c1d2e";
constexpr char kGlobexKey[] = "globex-key-77a1";
constexpr char kAdminKey[] = "admin-key-09b3";
constexpr char kInitechKey[] = "initech-key-4c2d";

class AuthE2eTest : public ::testing::Test {
 protected:
  static std::string Sha256(const std::string& key) { return Sha256Hex(key); }
  static std::string KeysYaml(bool with_new_key = false) {
    std::string y =
        "tenants:\n  globex: {max_sessions: 2, max_generations: 1}\n"
        "  initech: {max_kv_blocks: 100, tokens_per_second: 5}\nkeys:\n";
    y += "  - {tenant: initech, role: user, sha256: " + Sha256(kInitechKey) + "}\n";
    y += "  - {tenant: acme, role: user, sha256: " + Sha256(kAcmeKey) + "}\n";
    y += "  - {tenant: globex, role: user, sha256: " + Sha256(kGlobexKey) + "}\n";
    y += "  - {tenant: ops, role: admin, sha256: " + Sha256(kAdminKey) + "}\n";
    if (with_new_key) y += "  - {tenant: acme, role: user, sha256: " + Sha256("rotated") + "}\n";
    return y;
  }
  void StartDaemon(const std::string& snapshot_dir = "", std::vector<std::string> flags = {}) {
    keys_ = dir_ + "/keys.yaml";
    std::ofstream(keys_) << KeysYaml();
    flags.push_back("--auth.keys_file=" + keys_);
    if (!snapshot_dir.empty()) flags.push_back("--sessions.snapshot_dir=" + snapshot_dir);
    d_ = DaemonProcess::Start(flags);
    ASSERT_NE(d_, nullptr);
  }
  void SetUp() override {
    char tmpl[] = "/tmp/streamd-auth-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(Sha256("test"), "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
  }
  void TearDown() override {
    d_.reset();
    std::system(("rm -rf " + dir_).c_str());
  }

  // A unary call's context with `key` (none when empty).
  static void WithKey(grpc::ClientContext* c, const std::string& key) {
    if (!key.empty()) c->AddMetadata("authorization", "Bearer " + key);
    c->set_deadline(std::chrono::system_clock::now() + 30s);
  }
  grpc::Status List(const std::string& key, v1::ListSessionsResponse* out) {
    grpc::ClientContext c;
    WithKey(&c, key);
    return v1::Streamd::NewStub(d_->Channel())->ListSessions(&c, {}, out);
  }
  grpc::Status Get(const std::string& key, const std::string& id) {
    grpc::ClientContext c;
    WithKey(&c, key);
    v1::GetSessionRequest r;
    r.set_session_id(id);
    v1::SessionInfo info;
    return v1::Streamd::NewStub(d_->Channel())->GetSession(&c, r, &info);
  }
  grpc::Status Close(const std::string& key, const std::string& id) {
    grpc::ClientContext c;
    WithKey(&c, key);
    v1::CloseSessionRequest r;
    r.set_session_id(id);
    v1::CloseSessionResponse out;
    return v1::Streamd::NewStub(d_->Channel())->CloseSession(&c, r, &out);
  }
  static bool Lists(const v1::ListSessionsResponse& r, const std::string& id) {
    for (const auto& s : r.sessions()) {
      if (s.session_id() == id) return true;
    }
    return false;
  }
  // The status of a health Check, of a health Watch's first answer and of a reflection
  // list_services, each with `key` (none when empty); `answered` counts the answers that came.
  struct OpenCalls {
    grpc::Status check, watch, reflect;
    int answered = 0;
  };
  OpenCalls CallHealthAndReflection(const std::string& key) {
    OpenCalls out;
    auto health = grpc::health::v1::Health::NewStub(d_->Channel());
    grpc::health::v1::HealthCheckResponse r;
    {
      grpc::ClientContext c;
      WithKey(&c, key);
      out.check = health->Check(&c, {}, &r);
      out.answered += r.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    }
    {
      grpc::ClientContext c;
      WithKey(&c, key);
      auto watch = health->Watch(&c, {});
      if (watch->Read(&r)) {
        ++out.answered;
        c.TryCancel();  // a Watch never ends by itself: its first answer is enough
      }
      out.watch = watch->Finish();
      if (out.watch.error_code() == grpc::StatusCode::CANCELLED) out.watch = grpc::Status::OK;
    }
    {
      namespace reflection = grpc::reflection::v1alpha;
      grpc::ClientContext c;
      WithKey(&c, key);
      auto stream = reflection::ServerReflection::NewStub(d_->Channel())->ServerReflectionInfo(&c);
      reflection::ServerReflectionRequest list;
      list.set_list_services("");
      stream->Write(list);
      stream->WritesDone();
      reflection::ServerReflectionResponse response;
      while (stream->Read(&response)) out.answered += response.has_list_services_response();
      out.reflect = stream->Finish();
    }
    return out;
  }
  double AuthFailures(const std::string& reason) {
    return MetricValue(d_->ScrapeMetrics(),
                       "streamd_auth_failures_total{reason=\"" + reason + "\"}");
  }

  // Opens a session as `key` with some context; its id.
  std::string OpenWithContext(const std::string& key) {
    RawStream s(d_->Channel(), 60s, key);
    const std::optional<v1::Opened> opened = s.Open();
    if (!opened) return "";
    EXPECT_FALSE(s.Append(TextMsg("The tenant's own context.").append()));
    s.WritesDone();
    EXPECT_TRUE(s.Finish().ok());
    return opened->session_id();
  }

  std::string dir_, keys_;
  std::unique_ptr<DaemonProcess> d_;
};

TEST_F(AuthE2eTest, NoKeyOrAWrongKeyIsUnauthenticatedAndSeesNothing) {
  StartDaemon();
  const std::string id = OpenWithContext(kAcmeKey);
  ASSERT_FALSE(id.empty());
  for (const std::string& key : {std::string(), std::string("not-a-key")}) {
    v1::ListSessionsResponse list;
    const grpc::Status listed = List(key, &list);
    EXPECT_EQ(listed.error_code(), grpc::StatusCode::UNAUTHENTICATED) << listed.error_message();
    EXPECT_EQ(list.sessions_size(), 0);
    EXPECT_EQ(Get(key, id).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(Close(key, id).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    RawStream s(d_->Channel(), 30s, key);
    s.Write(ResumeMsg(id));
    EXPECT_FALSE(s.Read());  // not a word before the status
    EXPECT_EQ(s.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext c;
    WithKey(&c, key);
    v1::ModelInfo info;
    EXPECT_EQ(v1::Streamd::NewStub(d_->Channel())->GetModelInfo(&c, {}, &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // Health needs no key (load balancers and probes have none).
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + 30s);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  EXPECT_TRUE(grpc::health::v1::Health::NewStub(d_->Channel())->Check(&c, req, &resp).ok());
  // Counted by reason.
  const std::string metrics = d_->ScrapeMetrics();
  EXPECT_GE(MetricValue(metrics, "streamd_auth_failures_total{reason=\"missing\"}"), 5);
  EXPECT_GE(MetricValue(metrics, "streamd_auth_failures_total{reason=\"unknown_key\"}"), 5);
}

TEST_F(AuthE2eTest, AnotherTenantsSessionDoesNotExistForItButAdminsSeeIt) {
  StartDaemon();
  const std::string id = OpenWithContext(kAcmeKey);
  ASSERT_FALSE(id.empty());
  // A well-formed id that names nothing: what another tenant must get, word for word.
  const std::string nobody = "0123456789abcdef0123456789abcdef";
  const grpc::Status missing = Get(kGlobexKey, nobody);
  ASSERT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  const auto same_as_missing = [&](const grpc::Status& s) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    std::string m = s.error_message();
    if (size_t at = m.find(id); at != std::string::npos) m.replace(at, id.size(), nobody);
    EXPECT_EQ(m, missing.error_message());
  };
  v1::ListSessionsResponse list;
  ASSERT_TRUE(List(kGlobexKey, &list).ok());
  EXPECT_FALSE(Lists(list, id));
  same_as_missing(Get(kGlobexKey, id));
  same_as_missing(Close(kGlobexKey, id));
  {
    RawStream s(d_->Channel(), 30s, kGlobexKey);
    ASSERT_TRUE(s.Write(ResumeMsg(id)));
    const v1::Error e = s.ExpectError();
    EXPECT_EQ(e.code(), grpc::StatusCode::NOT_FOUND) << e.message();
    RawStream t(d_->Channel(), 30s, kGlobexKey);
    ASSERT_TRUE(t.Write(ResumeMsg(nobody)));
    std::string m = e.message();
    m.replace(m.find(id), id.size(), nobody);
    EXPECT_EQ(m, t.ExpectError().message());
  }
  {
    grpc::ClientContext c;
    WithKey(&c, kGlobexKey);
    v1::ExportSessionRequest r;
    r.set_session_id(id);
    auto reader = v1::Streamd::NewStub(d_->Channel())->ExportSession(&c, r);
    v1::SnapshotChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    same_as_missing(reader->Finish());
  }
  // Import creates a session of whatever tenant its snapshot names: admins only.
  {
    grpc::ClientContext c;
    WithKey(&c, kGlobexKey);
    v1::ImportSessionResponse out;
    auto writer = v1::Streamd::NewStub(d_->Channel())->ImportSession(&c, &out);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // The owner and admins see it; the owner resumes it with its context.
  ASSERT_TRUE(List(kAcmeKey, &list).ok());
  EXPECT_TRUE(Lists(list, id));
  v1::ListSessionsResponse all;
  ASSERT_TRUE(List(kAdminKey, &all).ok());
  EXPECT_TRUE(Lists(all, id));
  EXPECT_TRUE(Get(kAdminKey, id).ok());
  RawStream s(d_->Channel(), 30s, kAcmeKey);
  ASSERT_TRUE(s.Write(ResumeMsg(id)));
  std::optional<v1::ServerMessage> resumed = s.Read();
  ASSERT_TRUE(resumed && resumed->has_opened()) << (resumed ? resumed->DebugString() : "");
  EXPECT_GT(resumed->opened().cache().tokens_seen(), 0);
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

// Opens that race: eight streams of a tenant with max_sessions 2 open at the same moment; the
// stream checks all pass together, but admission tries Opens one at a time and checks again.
TEST_F(AuthE2eTest, RacingOpensCannotExceedMaxSessions) {
  StartDaemon();
  constexpr int kStreams = 8;
  std::vector<std::unique_ptr<RawStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<RawStream>(d_->Channel(), 60s, kGlobexKey));
  }
  for (auto& s : streams) ASSERT_TRUE(s->Write(OpenMsg()));
  int opened = 0, refused = 0;
  for (auto& s : streams) {
    std::optional<v1::ServerMessage> m = s->Read();
    ASSERT_TRUE(m);
    if (m->has_opened()) {
      ++opened;
    } else {
      ASSERT_TRUE(m->has_error()) << m->DebugString();
      EXPECT_EQ(m->error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      EXPECT_NE(m->error().message().find("max_sessions = 2"), std::string::npos)
          << m->error().message();
      ++refused;
    }
  }
  EXPECT_EQ(opened, 2);
  EXPECT_EQ(refused, kStreams - 2);
  v1::ListSessionsResponse listed;
  ASSERT_TRUE(List(kGlobexKey, &listed).ok());
  EXPECT_EQ(listed.sessions_size(), 2);
}

TEST_F(AuthE2eTest, QuotasAreRefusedNamingTheQuota) {
  StartDaemon();
  RawStream first(d_->Channel(), 60s, kGlobexKey);
  RawStream second(d_->Channel(), 60s, kGlobexKey);
  ASSERT_TRUE(first.Open());
  ASSERT_TRUE(second.Open());
  ASSERT_FALSE(first.Append(TextMsg("Count slowly to one thousand:").append()));
  ASSERT_FALSE(second.Append(TextMsg("Name every river you know:").append()));
  // max_sessions: 2
  RawStream third(d_->Channel(), 60s, kGlobexKey);
  ASSERT_TRUE(third.Write(OpenMsg()));
  const v1::Error over = third.ExpectError();
  EXPECT_EQ(over.code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.message();
  EXPECT_NE(over.message().find("max_sessions = 2"), std::string::npos) << over.message();
  // Another tenant is not affected.
  RawStream acme(d_->Channel(), 60s, kAcmeKey);
  ASSERT_TRUE(acme.Open());
  // max_generations: 1 -- while one generation runs, one on the tenant's other session is
  // refused; the first streams on.
  // Once its first token is out (ReadGeneration reads the rest, however many come before the
  // Cancel lands).
  ASSERT_TRUE(first.Write(GenerateMsg(2000)));
  v1::Error busy;
  const Generation rest = ReadGeneration(first, [&] {
    ASSERT_TRUE(second.Write(GenerateMsg(4, true, "r2")));
    busy = second.ExpectError();
    ASSERT_TRUE(first.Write(CancelMsg()));
  });
  EXPECT_EQ(busy.code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << busy.message();
  EXPECT_NE(busy.message().find("max_generations = 1"), std::string::npos) << busy.message();
  EXPECT_EQ(busy.request_id(), "r2");
  EXPECT_TRUE(rest.ended);
  EXPECT_EQ(rest.done.reason(), v1::FINISH_REASON_CANCELLED) << rest.done.DebugString();
  // Once it has ended, the other may generate.
  ASSERT_TRUE(second.Write(GenerateMsg(4)));
  const Generation g = ReadGeneration(second);
  EXPECT_TRUE(g.ended);
  EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_LENGTH);
  for (RawStream* s : {&first, &second, &acme}) {
    ASSERT_TRUE(s->Write(CloseMsg()));
    EXPECT_TRUE(s->Finish().ok());
  }
}

TEST_F(AuthE2eTest, KvBlockAndTokenRateQuotasAreRefusedNamingTheQuota) {
  StartDaemon();
  // max_kv_blocks: 100; a session of the default window reserves 66 blocks.
  RawStream first(d_->Channel(), 60s, kInitechKey);
  const std::optional<v1::Opened> opened = first.Open();
  ASSERT_TRUE(opened);
  ASSERT_EQ(opened->settings().max_blocks(), 66) << "the test's arithmetic assumes it";
  RawStream second(d_->Channel(), 60s, kInitechKey);
  ASSERT_TRUE(second.Write(OpenMsg()));
  const v1::Error blocks = second.ExpectError();
  EXPECT_EQ(blocks.code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << blocks.message();
  EXPECT_NE(blocks.message().find("max_kv_blocks = 100"), std::string::npos) << blocks.message();
  // A smaller window fits: 100 - 66 leaves 34 blocks, enough for a window of 252 (18).
  ASSERT_TRUE(second.Open(OpenMsg(252).open()));
  // tokens_per_second: 5, a bucket of 50 tokens: an Append of more overdraws it, and the next
  // Append and Generate are refused until it has refilled.
  std::string text;
  for (int i = 0; i < 12; ++i) text += "The rain in Spain stays mainly in the plain. ";
  ASSERT_FALSE(first.Append(TextMsg(text).append()));
  ASSERT_TRUE(first.Write(TextMsg("More.")));
  const v1::Error rate = first.ExpectError();
  EXPECT_EQ(rate.code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << rate.message();
  EXPECT_NE(rate.message().find("tokens_per_second = 5"), std::string::npos) << rate.message();
  ASSERT_TRUE(second.Write(GenerateMsg(4)));  // the tenant's bucket, whichever session
  EXPECT_NE(second.ExpectError().message().find("tokens_per_second"), std::string::npos);
  // Per-tenant series, for the keys file's tenants only.
  const std::string metrics = d_->ScrapeMetrics();
  EXPECT_EQ(MetricValue(metrics, "streamd_tenant_sessions{tenant=\"initech\"}"), 2);
  EXPECT_EQ(MetricValue(metrics, "streamd_tenant_kv_blocks{tenant=\"initech\"}"), 66 + 18);
  EXPECT_EQ(MetricValue(metrics, "streamd_tenant_sessions{tenant=\"acme\"}"), 0);
  for (RawStream* s : {&first, &second}) {
    ASSERT_TRUE(s->Write(CloseMsg()));
    EXPECT_TRUE(s->Finish().ok());
  }
}

TEST_F(AuthE2eTest, TenantsSurviveARestartInTheirSnapshots) {
  const std::string snapshots = dir_ + "/sessions";
  StartDaemon(snapshots);
  const std::string id = OpenWithContext(kAcmeKey);
  ASSERT_FALSE(id.empty());
  d_->Terminate();
  ASSERT_EQ(d_->Wait(60s), 0) << d_->Stderr();
  d_.reset();
  StartDaemon(snapshots);
  v1::ListSessionsResponse list;
  ASSERT_TRUE(List(kGlobexKey, &list).ok());
  EXPECT_FALSE(Lists(list, id));
  EXPECT_EQ(Get(kGlobexKey, id).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(List(kAcmeKey, &list).ok());
  EXPECT_TRUE(Lists(list, id));
  EXPECT_TRUE(Get(kAcmeKey, id).ok());
}

TEST_F(AuthE2eTest, TheKeysFileIsReadAgainWhenItChanges) {
  StartDaemon();
  v1::ListSessionsResponse list;
  EXPECT_EQ(List("rotated", &list).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const std::string tmp = keys_ + ".new";
  std::ofstream(tmp) << KeysYaml(/*with_new_key=*/true);
  ASSERT_EQ(std::rename(tmp.c_str(), keys_.c_str()), 0);
  grpc::Status s;
  for (int i = 0; i < 100; ++i) {  // read again within a few seconds
    s = List("rotated", &list);
    if (s.ok()) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(AuthE2eTest, HealthAndReflectionNeedNoKeyByDefault) {
  StartDaemon();
  for (const std::string& key : {std::string(), std::string("not-a-key"), std::string(kAcmeKey)}) {
    const OpenCalls calls = CallHealthAndReflection(key);
    EXPECT_TRUE(calls.check.ok()) << key << ": " << calls.check.error_message();
    EXPECT_TRUE(calls.watch.ok()) << key << ": " << calls.watch.error_message();
    EXPECT_TRUE(calls.reflect.ok()) << key << ": " << calls.reflect.error_message();
    EXPECT_EQ(calls.answered, 3) << key;
  }
  // A key that is not one is not even looked at: nothing is refused.
  EXPECT_EQ(AuthFailures("missing"), 0);
  EXPECT_EQ(AuthFailures("unknown_key"), 0);
}

TEST_F(AuthE2eTest, HealthAndReflectionCanRequireAKey) {
  StartDaemon("", {"--auth.health_requires_key=true", "--auth.reflection_requires_key=true"});
  for (const std::string& key : {std::string(), std::string("not-a-key")}) {
    const OpenCalls calls = CallHealthAndReflection(key);
    for (const grpc::Status& s : {calls.check, calls.watch, calls.reflect}) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << key << ": " << s.error_message();
    }
    EXPECT_EQ(calls.answered, 0) << "answered without a valid key: " << key;
  }
  // Counted as every other refusal: three calls without a key, three with a wrong one.
  EXPECT_EQ(AuthFailures("missing"), 3);
  EXPECT_EQ(AuthFailures("unknown_key"), 3);
  // Any tenant's key will do, a user's as an admin's.
  for (const char* key : {kAcmeKey, kAdminKey}) {
    const OpenCalls calls = CallHealthAndReflection(key);
    EXPECT_TRUE(calls.check.ok() && calls.watch.ok() && calls.reflect.ok()) << key;
    EXPECT_EQ(calls.answered, 3) << key;
  }
  EXPECT_EQ(AuthFailures("missing"), 3);
}

TEST_F(AuthE2eTest, HealthAndReflectionAreClosedApart) {
  StartDaemon("", {"--auth.reflection_requires_key=true"});
  const OpenCalls calls = CallHealthAndReflection("");
  EXPECT_TRUE(calls.check.ok()) << calls.check.error_message();
  EXPECT_TRUE(calls.watch.ok()) << calls.watch.error_message();
  EXPECT_EQ(calls.reflect.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(calls.answered, 2);
}

}  // namespace
}  // namespace streamd::e2e
