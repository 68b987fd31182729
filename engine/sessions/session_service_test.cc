// The engine's session API (SessionService over a synthetic model): Open's options checked
// naming the field, a session driven through api::Session only (input, a generation heard
// through its observer, detach and resume), a tenant's quota and visibility, and a session
// closed elsewhere telling its holder.
#include "engine/sessions/session_service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/session_registry_test_util.h"

namespace streamd {
namespace {

using namespace std::chrono_literals;
using namespace registry_testing;  // NOLINT: the registry tests' helpers

// What a failed Status names (its message up to the first space, '=' or ':').
std::string FieldOf(const Status& s) {
  const std::string& m = s.message();
  return m.substr(0, m.find_first_of(" =:"));
}

TEST(ResolveOpenOptionsTest, RejectsLimitsNamingTheField) {
  const EngineConfig engine;  // max_sinks 64, max_window 8192
  const int32_t context = 8192, vocab = 49152;
  api::OpenOptions open;
  auto o = ResolveOpenOptions(open, SessionOptions{}, engine, context, vocab);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->window, SessionOptions{}.window);
  open.mode = api::CacheMode::kSink;
  open.sinks = 65;
  o = ResolveOpenOptions(open, SessionOptions{}, engine, context, vocab);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(FieldOf(o.status()), "open.sinks");
  EXPECT_NE(o.status().message().find("[0, 64]"), std::string::npos);
  open.sinks = 4;
  open.window = 8190;  // context 8192 - 4 sinks = 8188
  o = ResolveOpenOptions(open, SessionOptions{}, engine, context, vocab);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(FieldOf(o.status()), "open.window");
  EXPECT_NE(o.status().message().find("[1, 8188]"), std::string::npos) << o.status().message();
  open.window = 100;
  open.sampling.top_p = 1.5f;
  o = ResolveOpenOptions(open, SessionOptions{}, engine, context, vocab);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(FieldOf(o.status()), "open.sampling.top_p");
  open.sampling = {};
  o = ResolveOpenOptions(open, SessionOptions{}, engine, context, vocab);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->sinks, 4);
  EXPECT_EQ(o->window, 100);
  api::OpenOptions dense;
  dense.mode = api::CacheMode::kDense;
  dense.sinks = 4;
  EXPECT_EQ(FieldOf(ResolveOpenOptions(dense, SessionOptions{}, engine, context, vocab).status()),
            "open.sinks");
}

class SessionServiceTest : public ::testing::Test {
 protected:
  SessionServiceTest()
      : e_(MakeEngine()),
        registry_(*e_.engine, Timeouts(0ms, 0ms)),
        template_(tokenizer::ChatTemplate::FromTemplateText("", "", "")),
        chat_(template_, e_.engine->tokenizer()),
        driver_(*e_.engine, registry_, chat_, tasks_),
        admission_(registry_, 8) {
    SessionServiceParts parts{*e_.engine, registry_, driver_,  admission_,
                              chat_,      budget_,   draining_};
    parts.session_defaults = ToApiDefaults(Small());
    parts.session_defaults.admission_timeout = 1s;
    parts.default_max_tokens = 4;
    parts.on_quota_refusal = [this](const Status&) { ++refusals_; };
    api_ = MakeSessionService(std::move(parts));
  }
  ~SessionServiceTest() override {
    for (const auto& s : registry_.All()) (void)registry_.Close(s->id, CancelledError("test end"));
  }

  StatusOr<std::unique_ptr<api::Session>> Open(const api::Caller& caller,
                                               api::OnClosedElsewhere closed = {}) {
    std::promise<StatusOr<std::unique_ptr<api::Session>>> answer;
    auto wanted = api_->Open(
        caller, {},
        [&](StatusOr<std::unique_ptr<api::Session>> s) { answer.set_value(std::move(s)); },
        std::move(closed));
    auto f = answer.get_future();
    EXPECT_EQ(f.wait_for(30s), std::future_status::ready);
    return f.get();
  }
  StatusOr<std::unique_ptr<api::Session>> Resume(const api::Caller& caller, const std::string& id) {
    std::promise<StatusOr<std::unique_ptr<api::Session>>> answer;
    api_->Resume(caller, id, [&](StatusOr<std::unique_ptr<api::Session>> s) {
      answer.set_value(std::move(s));
    });
    auto f = answer.get_future();
    EXPECT_EQ(f.wait_for(30s), std::future_status::ready);
    return f.get();
  }
  static StatusOr<int64_t> AppendTokens(api::Session& s, std::vector<int32_t> tokens) {
    api::AppendInput in;
    in.kind = api::AppendInput::Kind::kTokens;
    in.tokens = std::move(tokens);
    std::promise<StatusOr<int64_t>> answer;
    s.Append(std::move(in), [&](StatusOr<int64_t> n, bool) { answer.set_value(std::move(n)); });
    auto f = answer.get_future();
    EXPECT_EQ(f.wait_for(30s), std::future_status::ready);
    return f.get();
  }

  TestEngine e_;
  SessionRegistry registry_;
  tokenizer::ChatTemplate template_;
  ChatFormatter chat_;
  TaskRunner tasks_;
  SessionDriver driver_;
  AdmissionQueue admission_;
  TokenBudget budget_;
  std::atomic<bool> draining_{false};
  std::atomic<int> refusals_{0};
  std::unique_ptr<api::Engine> api_;
};

TEST_F(SessionServiceTest, ASessionIsDrivenThroughTheApiAndResumedById) {
  auto s = Open(api::Caller{});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string id = (*s)->id();
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ((*s)->settings().window, Small().window);
  auto appended = AppendTokens(**s, {5, 6, 7});
  ASSERT_TRUE(appended.ok()) << appended.status().ToString();
  EXPECT_EQ(*appended, 3);

  std::atomic<int> tokens{0};
  std::promise<api::GenerationEnd> ended;
  std::promise<void> settled;
  api::GenerateRequest r;
  r.max_tokens = 3;
  r.request_id = "g1";
  r.sampling.temperature = 0.0f;
  api::GenerationObserver o;
  o.on_token = [&](api::TokenEvent&& t) {
    EXPECT_EQ(t.request_id, "g1");
    ++tokens;
  };
  o.on_end = [&](api::GenerationEnd&& end) { ended.set_value(std::move(end)); };
  o.on_settled = [&] { settled.set_value(); };
  ASSERT_TRUE((*s)->Generate(r, std::move(o)).ok());
  auto end_future = ended.get_future();
  ASSERT_EQ(end_future.wait_for(30s), std::future_status::ready);
  const api::GenerationEnd end = end_future.get();
  EXPECT_EQ(end.request_id, "g1");
  EXPECT_TRUE(end.status.ok()) << end.status.ToString();
  EXPECT_EQ(end.usage.output_tokens, tokens.load());
  EXPECT_GT(end.usage.output_tokens, 0);
  ASSERT_EQ(settled.get_future().wait_for(30s), std::future_status::ready);
  auto state = (*s)->State();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->tokens_seen, 3 + end.usage.output_tokens);

  // Let go (detached), then resumed by id with its context.
  std::promise<void> written;
  (*s)->Detach(CancelledError("test"), [&] { written.set_value(); });
  ASSERT_EQ(written.get_future().wait_for(30s), std::future_status::ready);
  s->reset();
  auto again = Resume(api::Caller{}, id);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto resumed_state = (*again)->State();
  ASSERT_TRUE(resumed_state.ok());
  EXPECT_EQ(resumed_state->tokens_seen, state->tokens_seen);
  auto info = api_->GetSession(api::Caller{}, id);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->attached);
  EXPECT_EQ(info->cache.tokens_seen, state->tokens_seen);
}

TEST_F(SessionServiceTest, ATenantsQuotaAndVisibilityAreTheEngines) {
  api::Caller acme;
  acme.tenant = "acme";
  acme.admin = false;
  acme.metered = true;
  acme.limits.max_sessions = 1;
  auto first = Open(acme);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Open(acme);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("max_sessions"), std::string::npos)
      << second.status().message();
  EXPECT_EQ(refusals_.load(), 1);

  api::Caller globex = acme;
  globex.tenant = "globex";
  const std::string id = (*first)->id();
  EXPECT_EQ(api_->GetSession(globex, id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(api_->CloseSession(globex, id, CancelledError("x")).code(), StatusCode::kNotFound);
  EXPECT_TRUE(api_->ListSessions(globex).empty());
  ASSERT_EQ(api_->ListSessions(acme).size(), 1u);
  EXPECT_EQ(api_->ListSessions(acme)[0].tenant, "acme");
  EXPECT_EQ(Resume(globex, id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(api_->GetSession(acme, "not an id").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SessionServiceTest, ASessionClosedElsewhereTellsItsHolder) {
  std::promise<Status> told;
  auto s = Open(api::Caller{}, [&](const Status& why) { told.set_value(why); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(api_->CloseSession(api::Caller{}, (*s)->id(), CancelledError("by an admin")).ok());
  auto f = told.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_NE(f.get().message().find("by an admin"), std::string::npos);
  EXPECT_TRUE((*s)->closed_elsewhere());
  EXPECT_EQ(AppendTokens(**s, {1}).status().code(), StatusCode::kAborted);
  EXPECT_EQ(api_->GetSession(api::Caller{}, (*s)->id()).status().code(), StatusCode::kNotFound);
}

TEST_F(SessionServiceTest, DrainingRefusesNewSessions) {
  EXPECT_TRUE(api_->Serving().ok());
  api_->Drain();
  EXPECT_TRUE(draining_.load());
  EXPECT_EQ(api_->Serving().code(), StatusCode::kUnavailable);
  EXPECT_EQ(Open(api::Caller{}).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace streamd
