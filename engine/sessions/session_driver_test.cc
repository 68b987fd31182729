// SessionDriver on a synthetic model: the order of a barge-in, a repeated partial, a cancel with
// a reason, a truncate of the running generation, and the work queued for a generation's end.
#include "engine/sessions/session_driver.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/session_registry_test_util.h"

namespace streamd {
namespace {

using namespace std::chrono_literals;
using namespace registry_testing;  // NOLINT: the registry tests' helpers

// What happened, in the order it happened, from any thread.
class Log {
 public:
  void Add(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(std::move(what));
  }
  std::vector<std::string> entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> entries_;
};

class SessionDriverTest : public ::testing::Test {
 protected:
  SessionDriverTest()
      : e_(MakeEngine()),
        registry_(*e_.engine, Timeouts(0ms, 0ms)),
        template_(tokenizer::ChatTemplate::FromTemplateText("", "", "")),
        chat_(template_, e_.engine->tokenizer()),
        driver_(*e_.engine, registry_, chat_, tasks_) {}

  std::shared_ptr<SessionRecord> Open() {
    auto s = registry_.Open(Small(), owner_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return *s;
  }
  // Appends tokens and waits for the answer.
  StatusOr<int64_t> AppendTokens(const std::shared_ptr<SessionRecord>& s,
                                 std::vector<int32_t> tokens, bool partial = false) {
    SessionInput in;
    in.kind = SessionInput::Kind::kTokens;
    in.tokens = std::move(tokens);
    in.partial = partial;
    std::promise<StatusOr<int64_t>> answer;
    driver_.Append(s, in, [&](StatusOr<int64_t> n, bool) { answer.set_value(std::move(n)); });
    auto f = answer.get_future();
    EXPECT_EQ(f.wait_for(30s), std::future_status::ready);
    return f.get();
  }
  // A generation whose events go to log_; `done` is set by its GenerationDone.
  Status Generate(const std::shared_ptr<SessionRecord>& s, const std::string& request_id,
                  int32_t max_tokens, std::function<void(const GenerationEvent&)> on_token = {}) {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.request_id = request_id;
    o.ignore_end_of_generation = true;
    return driver_.Generate(
        s, o,
        {.on_event =
             [this, on_token](GenerationEvent&& e) {
               if (e.kind == GenerationEvent::Kind::kToken) {
                 ++tokens_;
                 if (on_token) on_token(e);
                 return;
               }
               log_.Add(std::string("done ") + FinishReasonName(e.reason));
               done_status_ = e.status;
             },
         // The generation's last word (its Done was delivered before): once it has run, neither
         // the scheduler nor the task thread touches this fixture for this generation again.
         .on_ended =
             [this](int64_t n) {
               log_.Add("ended " + std::to_string(n));
               done_.set_value();
             }});
  }
  void WaitDone() { ASSERT_EQ(done_.get_future().wait_for(30s), std::future_status::ready); }
  int64_t Seen(const SessionRecord& s) { return e_.engine->Get(s.id)->tokens_seen; }

  TestEngine e_;
  SessionRegistry registry_;
  tokenizer::ChatTemplate template_;
  ChatFormatter chat_;
  SessionDriver driver_;
  std::shared_ptr<FakeOwner> owner_ = std::make_shared<FakeOwner>();
  Log log_;
  std::atomic<int64_t> tokens_{0};
  std::promise<void> done_;
  Status done_status_;
  // Last: destroyed first, it runs the tasks still queued while what they use is there.
  TaskRunner tasks_;
};

TEST_F(SessionDriverTest, BargeInCancelsTheGenerationAndAppendsAfterItsEnd) {
  auto s = Open();
  ASSERT_TRUE(AppendTokens(s, Bytes(20, 1)).ok());
  std::promise<void> first_token;
  std::once_flag once;
  ASSERT_TRUE(Generate(s, "r1", 10000, [&](const GenerationEvent&) {
                std::call_once(once, [&] { first_token.set_value(); });
              }).ok());
  ASSERT_EQ(first_token.get_future().wait_for(30s), std::future_status::ready);
  SessionInput in;
  in.kind = SessionInput::Kind::kTokens;
  in.tokens = Bytes(5, 2);
  std::promise<StatusOr<int64_t>> appended;
  const bool later = driver_.Append(s, in, [&](StatusOr<int64_t> n, bool deferred) {
    log_.Add(deferred ? "appended later" : "appended now");
    appended.set_value(std::move(n));
  });
  EXPECT_TRUE(later);
  auto f = appended.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  ASSERT_EQ(f.get().value(), 5);
  WaitDone();
  const std::vector<std::string> log = log_.entries();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0], "done cancelled");
  EXPECT_EQ(log[1], "ended " + std::to_string(tokens_.load()));
  EXPECT_EQ(log[2], "appended later");  // never under the generation
  EXPECT_FALSE(driver_.Generating(*s));
  EXPECT_EQ(Seen(*s), 20 + tokens_.load() + 5);
}

TEST_F(SessionDriverTest, RepeatingTheOpenPartialLetsTheGenerationGoOn) {
  auto s = Open();
  ASSERT_TRUE(AppendTokens(s, Bytes(8, 3)).ok());
  ASSERT_TRUE(AppendTokens(s, Bytes(6, 4), /*partial=*/true).ok());
  ASSERT_TRUE(Generate(s, "r1", 12).ok());
  // The final version of the partial equals it: nothing changes, nothing is cancelled.
  SessionInput in;
  in.kind = SessionInput::Kind::kTokens;
  in.tokens = Bytes(6, 4);
  bool answered_inline = false;
  EXPECT_FALSE(driver_.Append(
      s, in, [&](StatusOr<int64_t> n, bool later) { answered_inline = n.ok() && !later; }));
  EXPECT_TRUE(answered_inline);
  WaitDone();
  EXPECT_EQ(log_.entries().front(), "done length");
  EXPECT_EQ(tokens_.load(), 12);
  EXPECT_EQ(Seen(*s), 8 + 6 + 12);
}

TEST_F(SessionDriverTest, ASecondGenerateIsRefusedNamingTheRunningOne) {
  auto s = Open();
  ASSERT_TRUE(AppendTokens(s, Bytes(8, 5)).ok());
  ASSERT_TRUE(Generate(s, "first", 10000).ok());
  GenerateOptions o;
  o.request_id = "second";
  const Status refused = driver_.Generate(s, o, {.on_event = [](GenerationEvent&&) {}});
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("\"first\""), std::string::npos) << refused.message();
  EXPECT_EQ(driver_.Cancel(s, "other").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(driver_.Cancel(s, "first").ok());
  WaitDone();
  EXPECT_EQ(log_.entries().front(), "done cancelled");
  EXPECT_TRUE(done_status_.ok());  // cancelled by its client: no reason to report
}

TEST_F(SessionDriverTest, ACancelFromTheSinkCarriesItsReasonToTheDone) {
  auto s = Open();
  ASSERT_TRUE(AppendTokens(s, Bytes(8, 6)).ok());
  ASSERT_TRUE(Generate(s, "r1", 10000, [&](const GenerationEvent& e) {
                if (e.index == 2) driver_.CancelFromSink(s, ResourceExhaustedError("too slow"));
              }).ok());
  WaitDone();
  EXPECT_EQ(log_.entries().front(), "done cancelled");
  EXPECT_EQ(done_status_.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(done_status_.message(), "too slow");
}

TEST_F(SessionDriverTest, TruncatingTheRunningGenerationCancelsItFirst) {
  auto s = Open();
  ASSERT_TRUE(AppendTokens(s, Bytes(10, 7)).ok());
  std::promise<void> fourth;
  // A slow client (2 ms a token) keeps the generation running, within the window, until the
  // Truncate arrives.
  ASSERT_TRUE(Generate(s, "r1", 10000, [&](const GenerationEvent& e) {
                std::this_thread::sleep_for(2ms);
                if (e.index == 3) fourth.set_value();
              }).ok());
  ASSERT_EQ(fourth.get_future().wait_for(30s), std::future_status::ready);
  std::promise<StatusOr<SessionInfo>> truncated;
  driver_.Truncate(s, "r1", 2, [&](StatusOr<SessionInfo> info) {
    log_.Add("truncated");
    truncated.set_value(std::move(info));
  });
  auto f = truncated.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  const StatusOr<SessionInfo> info = f.get();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->tokens_seen, 10 + 2);
  const std::vector<std::string> log = log_.entries();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0], "done cancelled");
  EXPECT_EQ(log[2], "truncated");
  // A truncate of a generation that is not the last one names the field.
  std::promise<StatusOr<SessionInfo>> wrong;
  driver_.Truncate(s, "nope", 0, [&](StatusOr<SessionInfo> i) { wrong.set_value(std::move(i)); });
  EXPECT_EQ(wrong.get_future().get().status().code(), StatusCode::kNotFound);
}

TEST_F(SessionDriverTest, WorkQueuedForTheEndRunsOnlyWhileAGenerationRuns) {
  auto s = Open();
  ASSERT_TRUE(AppendTokens(s, Bytes(8, 8)).ok());
  EXPECT_FALSE(driver_.WhenIdle(s, [] { ADD_FAILURE() << "ran with no generation"; }));
  EXPECT_FALSE(driver_.CancelThen(s, OkStatus(), [] { ADD_FAILURE() << "ran"; }));
  ASSERT_TRUE(Generate(s, "r1", 6).ok());
  std::promise<void> ran;
  if (driver_.WhenIdle(s, [&] {
        log_.Add("idle");
        ran.set_value();
      })) {
    ASSERT_EQ(ran.get_future().wait_for(30s), std::future_status::ready);
    const std::vector<std::string> log = log_.entries();
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(log[0], "done length");  // not cancelled: it ran to its end
    EXPECT_EQ(log[2], "idle");
  } else {
    WaitDone();  // the six tokens were faster than this thread
  }
}

}  // namespace
}  // namespace streamd
