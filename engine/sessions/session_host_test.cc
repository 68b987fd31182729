// SessionHost (api::EngineHost over a synthetic engine): its stats and plain hooks follow the
// sessions driven through its session API; a session written at detach is found by the next
// host over the same snapshot directory; the tenants' limits refuse an Open in the admission
// queue; a snapshot directory without a snapshot context is refused naming the key.
#include "engine/sessions/session_host.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/session_registry_test_util.h"

namespace streamd {
namespace {

using namespace std::chrono_literals;
using namespace registry_testing;  // NOLINT: the registry tests' helpers

struct Counts {
  std::atomic<int> closed{0}, written{0}, refused{0};
};

api::HostOptions Options(const std::string& dir) {
  api::HostOptions o;
  o.session_defaults.window = 32;
  o.session_defaults.sampling.temperature = 0;
  o.session_defaults.admission_timeout = 1s;
  o.snapshot_dir = dir;
  o.snapshot_interval = 10ms;
  o.restore_on_start = false;
  return o;
}

api::HostHooks Hooks(Counts& c) {
  api::HostHooks h;
  h.on_close = [&c] { ++c.closed; };
  h.on_written = [&c](const std::string& id, int64_t bytes, double) {
    EXPECT_EQ(id.size(), 32u);
    EXPECT_GT(bytes, 0);
    ++c.written;
  };
  return h;
}

std::unique_ptr<api::EngineHost> MakeHost(TestEngine& e, const tokenizer::ChatTemplate& chat,
                                          const api::HostOptions& o, api::HostHooks hooks) {
  auto host = MakeSessionHost({*e.engine, chat, &e.context}, o, std::move(hooks));
  EXPECT_TRUE(host.ok()) << host.status().ToString();
  return host.ok() ? std::move(host).value() : nullptr;
}

StatusOr<std::unique_ptr<api::Session>> Open(api::Engine& api, const api::Caller& caller) {
  std::promise<StatusOr<std::unique_ptr<api::Session>>> answer;
  auto wanted = api.Open(caller, {}, [&](StatusOr<std::unique_ptr<api::Session>> s) {
    answer.set_value(std::move(s));
  });
  auto f = answer.get_future();
  EXPECT_EQ(f.wait_for(30s), std::future_status::ready);
  return f.get();
}

// The note of Start that counts the snapshots found.
std::string FoundNote(const std::vector<api::HostNote>& notes) {
  for (const api::HostNote& n : notes) {
    if (n.text.find("session snapshots found") != std::string::npos) return n.text;
  }
  return "";
}

TEST(SessionHostTest, StatsAndHooksFollowSessionsAndTheNextHostFindsThem) {
  const std::string dir = TempDir();
  const auto chat = tokenizer::ChatTemplate::FromTemplateText("", "", "");
  std::string id;
  {
    TestEngine e = MakeEngine();
    Counts counts;
    auto host = MakeHost(e, chat, Options(dir), Hooks(counts));
    ASSERT_NE(host, nullptr);
    EXPECT_EQ(host->info().model_fingerprint, e.context.model_fingerprint);
    EXPECT_NE(FoundNote(host->Start()).find(": 0 session snapshots found"), std::string::npos);
    api::Caller acme;
    acme.tenant = "acme";
    auto s = Open(host->sessions(), acme);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    id = (*s)->id();
    std::promise<void> appended;
    api::AppendInput in;
    in.kind = api::AppendInput::Kind::kTokens;
    in.tokens = {5, 6, 7};
    (*s)->Append(std::move(in), [&](StatusOr<int64_t>, bool) { appended.set_value(); });
    ASSERT_EQ(appended.get_future().wait_for(30s), std::future_status::ready);
    api::HostStats st = host->Stats();
    EXPECT_EQ(st.sessions, 1);
    EXPECT_EQ(st.attached, 1);
    EXPECT_EQ(st.tokens_appended, 3);
    EXPECT_GT(st.blocks_reserved, 0);
    EXPECT_GT(st.block_bytes, 0);
    EXPECT_EQ(host->UsageOf("acme").sessions, 1);
    EXPECT_GT(host->UsageOf("acme").blocks, 0);
    EXPECT_EQ(host->UsageOf("globex").sessions, 0);
    // Detached: written (the hook hears it), and still held by the host.
    std::promise<void> written;
    (*s)->Detach(CancelledError("test"), [&] { written.set_value(); });
    ASSERT_EQ(written.get_future().wait_for(30s), std::future_status::ready);
    s->reset();
    EXPECT_TRUE(host->PersistAll(std::chrono::steady_clock::now() + 10s));
    EXPECT_GE(counts.written.load(), 1);
    EXPECT_EQ(host->Stats().attached, 0);
    EXPECT_EQ(counts.closed.load(), 0);
    // A second session, closed: on_close, and it is gone from the stats.
    auto other = Open(host->sessions(), acme);
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    ASSERT_TRUE((*other)->Close(CancelledError("test")).ok());
    EXPECT_EQ(counts.closed.load(), 1);
    EXPECT_EQ(host->UsageOf("acme").sessions, 1);
    // As at shutdown: what is queued (here the closed session's deletion) is done first.
    EXPECT_TRUE(host->PersistAll(std::chrono::steady_clock::now() + 10s));
    host.reset();  // before its engine
  }
  // The next host over the same directory finds the detached session, on disk only.
  TestEngine e = MakeEngine();
  Counts counts;
  auto host = MakeHost(e, chat, Options(dir), Hooks(counts));
  ASSERT_NE(host, nullptr);
  EXPECT_NE(FoundNote(host->Start()).find(": 1 session snapshots found"), std::string::npos);
  EXPECT_EQ(host->Stats().offloaded, 1);
  EXPECT_EQ(host->Stats().sessions, 0);
  auto info = host->sessions().GetSession(api::Caller{}, id);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->offloaded);
  host.reset();
  std::filesystem::remove_all(dir);
}

TEST(SessionHostTest, TenantLimitsRefuseAnOpenInTheAdmissionQueue) {
  TestEngine e = MakeEngine();
  const auto chat = tokenizer::ChatTemplate::FromTemplateText("", "", "");
  Counts counts;
  auto host = MakeHost(e, chat, Options(""), Hooks(counts));
  ASSERT_NE(host, nullptr);
  std::vector<std::string> asked;
  host->SetTenantLimits(
      [&](const std::string& tenant) {
        asked.push_back(tenant);
        api::TenantLimits l;
        l.max_sessions = tenant == "acme" ? 1 : 0;
        return l;
      },
      [&](const Status&) { ++counts.refused; });
  EXPECT_EQ(FoundNote(host->Start()), "");  // no snapshot directory
  api::Caller acme;                         // not metered: only the host's limits apply
  acme.tenant = "acme";
  auto first = Open(host->sessions(), acme);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Open(host->sessions(), acme);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("max_sessions"), std::string::npos)
      << second.status().message();
  EXPECT_EQ(counts.refused.load(), 1);
  api::Caller globex = acme;
  globex.tenant = "globex";
  auto third = Open(host->sessions(), globex);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(asked, (std::vector<std::string>{"acme", "acme", "globex"}));
  EXPECT_TRUE(host->PersistAll(std::chrono::steady_clock::now()));  // memory only: nothing to do
  for (auto* s : {&first, &third}) (void)(**s)->Close(CancelledError("test end"));
}

TEST(SessionHostTest, ASnapshotDirectoryNeedsASnapshotContext) {
  TestEngine e = MakeEngine();
  const auto chat = tokenizer::ChatTemplate::FromTemplateText("", "", "");
  auto host = MakeSessionHost({*e.engine, chat}, Options("/tmp/streamd-unused"), {});
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(host.status().message().find("sessions.snapshot_dir"), std::string::npos);
}

}  // namespace
}  // namespace streamd
