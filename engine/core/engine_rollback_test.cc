// Truncate, Fork and partial Appends against control sessions that never saw the dropped
// tokens / were never forked: the same K/V bits, the same next-token logits bit for bit, the
// same greedy tokens, and exact block accounting. Synthetic model, CPU.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/support/engine_test_util.h"

namespace streamd::testing {
namespace {

// Keeps the logits rows of the last step (one session per step in these tests: row 0).
class LogitsRecorder : public ForwardingBackend {
 public:
  explicit LogitsRecorder(std::unique_ptr<ModelBackend> inner)
      : ForwardingBackend(std::move(inner)) {}
  Status Execute(const StepPlan& plan, float* logits) override {
    Status st = inner().Execute(plan, logits);
    std::lock_guard<std::mutex> lock(mu_);
    last_.assign(logits, logits + config().vocab_size);
    return st;
  }
  std::vector<float> last() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }

 private:
  std::mutex mu_;
  std::vector<float> last_;
};

std::unique_ptr<Engine> MakeRecordingEngine(LogitsRecorder** recorder) {
  auto model = MakeSyntheticModel(TinyModel());
  EXPECT_TRUE(model.ok());
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  EXPECT_TRUE(vocab.ok());
  auto wrapped = std::make_unique<LogitsRecorder>(std::move(model).value());
  *recorder = wrapped.get();
  EngineConfig config;
  config.pool_bytes = 64 << 20;
  config.max_chunk = 64;
  config.threads = 2;
  config.planner = {128, 64};
  auto engine = Engine::Create(std::move(wrapped), std::move(vocab).value(), config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

class RollbackTest : public ::testing::Test {
 protected:
  void SetUp() override { engine_ = MakeRecordingEngine(&recorder_); }

  GenerateOptions Gen(int32_t n, const std::string& request_id = "r") {
    GenerateOptions g = UpTo(n);
    g.request_id = request_id;
    return g;
  }
  // Opens a session with `prompt` and runs one generation of n tokens to its end.
  SessionId WithGeneration(const std::vector<int32_t>& prompt, int32_t n) {
    SessionId id = *engine_->Open(Greedy());
    EXPECT_TRUE(engine_->Append(id, prompt).ok());
    Generate(id, n);
    return id;
  }
  // Appends and waits until the idle prefill is done (all but the held-back token): every
  // session's prompt then runs in the same chunks, whatever the timing.
  void AppendAndPrefill(SessionId id, const std::vector<int32_t>& tokens) {
    ASSERT_TRUE(engine_->Append(id, tokens).ok());
    while (engine_->Get(id)->pending_tokens > 1) std::this_thread::sleep_for(1ms);
  }
  std::vector<int32_t> Generate(SessionId id, int32_t n, const std::string& request_id = "r") {
    while (engine_->Get(id)->pending_tokens > 1) std::this_thread::sleep_for(1ms);
    const size_t before = events_.Tokens(id).size();
    EXPECT_TRUE(engine_->Generate(id, Gen(n, request_id), events_.Sink()).ok());
    events_.WaitDone(id);
    std::vector<int32_t> all = events_.Tokens(id);
    return std::vector<int32_t>(all.begin() + static_cast<ptrdiff_t>(before), all.end());
  }
  // The logits of the next token (a one-token generation, alone in its steps).
  std::vector<float> NextLogits(SessionId id) {
    Generate(id, 1, "probe");
    return recorder_->last();
  }
  void ExpectSameState(SessionId a, SessionId b) {
    auto sa = engine_->Capture(a);
    auto sb = engine_->Capture(b);
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_EQ(sa->tokens_seen, sb->tokens_seen);
    EXPECT_EQ(sa->cached_tokens, sb->cached_tokens);
    EXPECT_EQ(sa->pending, sb->pending);
    ASSERT_EQ(sa->kv.data.size(), sb->kv.data.size());
    EXPECT_EQ(0, std::memcmp(sa->kv.data.data(), sb->kv.data.data(), sa->kv.data.size() * 2))
        << "K/V differ";
  }
  static bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  }

  LogitsRecorder* recorder_ = nullptr;
  std::unique_ptr<Engine> engine_;
  Collector events_;
};

// Prompt lengths 30 (nothing evicted) and 60 (the window has slid: window 40, sinks 4).
TEST_F(RollbackTest, TruncatedEqualsNeverHavingProducedTheTail) {
  for (size_t prompt_len : {30u, 60u}) {
    for (int64_t keep : {0, 5, 11, 12}) {
      SCOPED_TRACE(::testing::Message() << "prompt " << prompt_len << " keep " << keep);
      const std::vector<int32_t> prompt = RandomTokens(prompt_len, 7);
      SessionId a = WithGeneration(prompt, 12);
      auto info = engine_->Truncate(a, "r", keep);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      // The control generated only the tokens that stay, computed the same way (one per step).
      SessionId b = *engine_->Open(Greedy());
      AppendAndPrefill(b, prompt);
      if (keep > 0) Generate(b, static_cast<int32_t>(keep));
      auto binfo = engine_->Get(b);
      EXPECT_EQ(info->tokens_seen, binfo->tokens_seen);
      EXPECT_EQ(info->tokens_cached, binfo->tokens_cached);
      EXPECT_EQ(info->tokens_evicted, binfo->tokens_evicted);
      EXPECT_EQ(info->pending_tokens, binfo->pending_tokens);
      EXPECT_EQ(info->blocks_held, binfo->blocks_held);
      ExpectSameState(a, b);
      EXPECT_TRUE(SameBits(NextLogits(a), NextLogits(b))) << "next-token logits differ";
      EXPECT_EQ(Generate(a, 6), Generate(b, 6));
      ASSERT_TRUE(engine_->Close(a).ok());
      ASSERT_TRUE(engine_->Close(b).ok());
    }
  }
  EXPECT_EQ(engine_->Stats().blocks_used, 0);
}

TEST_F(RollbackTest, TruncateRefusesBadInputNamingTheFieldAndChangesNothing) {
  SessionId a = WithGeneration(RandomTokens(30, 3), 12);
  const SessionInfo before = *engine_->Get(a);
  auto over = engine_->Truncate(a, "r", 13);
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("truncate.keep_tokens = 13 is outside [0, 12]"),
            std::string::npos)
      << over.status().message();
  EXPECT_EQ(engine_->Truncate(a, "r", -1).status().code(), StatusCode::kInvalidArgument);
  auto wrong = engine_->Truncate(a, "other", 0);
  EXPECT_EQ(wrong.status().code(), StatusCode::kNotFound);
  EXPECT_NE(wrong.status().message().find("truncate.request_id"), std::string::npos);
  EXPECT_EQ(engine_->Truncate(SessionId::Random(), "r", 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->Get(a)->tokens_seen, before.tokens_seen);
  // keep = all changes nothing but is fine.
  ASSERT_TRUE(engine_->Truncate(a, "r", 12).ok());
  EXPECT_EQ(engine_->Get(a)->tokens_seen, before.tokens_seen);
  // Input after the generation: it is no longer the tail.
  ASSERT_TRUE(engine_->Append(a, RandomTokens(3, 4)).ok());
  EXPECT_EQ(engine_->Truncate(a, "r", 0).status().code(), StatusCode::kFailedPrecondition);
  // A session that never generated.
  SessionId fresh = *engine_->Open(Greedy());
  EXPECT_EQ(engine_->Truncate(fresh, "", 0).status().code(), StatusCode::kNotFound);
}

TEST_F(RollbackTest, TruncatePastEvictedRowsIsRefusedNamingTheLimit) {
  SessionId a = WithGeneration(RandomTokens(60, 5), 30);  // window 40: the early output is gone
  const SessionInfo before = *engine_->Get(a);
  auto refused = engine_->Truncate(a, "r", 0);
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("at most"), std::string::npos)
      << refused.status().message();
  const SessionInfo after = *engine_->Get(a);
  EXPECT_EQ(after.tokens_seen, before.tokens_seen);
  EXPECT_EQ(after.blocks_held, before.blocks_held);
  ASSERT_TRUE(engine_->Truncate(a, "r", 28).ok());  // 2 tokens are still in reach
  EXPECT_EQ(engine_->Get(a)->tokens_seen, before.tokens_seen - 2);
}

TEST_F(RollbackTest, TruncateCancelsARunningGenerationFirst) {
  const std::vector<int32_t> prompt = RandomTokens(30, 9);
  // A window the running generation cannot slide past before the truncation lands.
  SessionId a = *engine_->Open(Greedy(4000));
  AppendAndPrefill(a, prompt);
  ASSERT_TRUE(engine_->Generate(a, Gen(3900), events_.Sink()).ok());
  while (events_.Tokens(a).size() < 3) std::this_thread::sleep_for(1ms);
  auto info = engine_->Truncate(a, "r", 2);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(events_.WaitDone(a).reason, FinishReason::kCancelled);
  EXPECT_EQ(info->tokens_seen, static_cast<int64_t>(prompt.size()) + 2);
  SessionId b = *engine_->Open(Greedy(4000));
  AppendAndPrefill(b, prompt);
  Generate(b, 2);
  ExpectSameState(a, b);
}

TEST_F(RollbackTest, TruncatedSessionSurvivesCaptureAndRestore) {
  const std::vector<int32_t> prompt = RandomTokens(40, 11);
  SessionId a = WithGeneration(prompt, 10);
  ASSERT_TRUE(engine_->Truncate(a, "r", 4).ok());
  auto state = engine_->Capture(a);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(engine_->Close(a).ok());
  ASSERT_TRUE(engine_->Restore(*state).ok());
  SessionId b = *engine_->Open(Greedy());
  ASSERT_TRUE(engine_->Append(b, prompt).ok());
  Generate(b, 4);
  ExpectSameState(a, b);
  EXPECT_EQ(Generate(a, 8), Generate(b, 8));
}

TEST_F(RollbackTest, ForkContinuesAsTheParentWouldAndBothDivergeIndependently) {
  const std::vector<int32_t> prompt = RandomTokens(50, 13);
  SessionId parent = WithGeneration(prompt, 6);
  const int32_t used = engine_->Stats().blocks_used;
  const int32_t reserved = engine_->Stats().blocks_reserved;
  auto fork = engine_->Fork(parent);
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  EXPECT_NE(*fork, parent);
  EXPECT_EQ(engine_->Stats().blocks_used, used);  // shares every block
  EXPECT_EQ(engine_->Stats().blocks_reserved, reserved + engine_->Get(parent)->max_blocks);
  ExpectSameState(*fork, parent);
  // Controls that were never forked, with the same history.
  SessionId control_p = WithGeneration(prompt, 6);
  SessionId control_f = WithGeneration(prompt, 6);

  const std::vector<int32_t> f1 = Generate(*fork, 10);
  EXPECT_EQ(f1, Generate(control_f, 10));
  EXPECT_EQ(Generate(parent, 10), f1);  // greedy: the parent would have said the same
  Generate(control_p, 10);
  // Now apart: different input into each.
  ASSERT_TRUE(engine_->Append(parent, RandomTokens(20, 1)).ok());
  ASSERT_TRUE(engine_->Append(control_p, RandomTokens(20, 1)).ok());
  ASSERT_TRUE(engine_->Append(*fork, RandomTokens(33, 2)).ok());
  ASSERT_TRUE(engine_->Append(control_f, RandomTokens(33, 2)).ok());
  EXPECT_EQ(Generate(parent, 12), Generate(control_p, 12));
  EXPECT_EQ(Generate(*fork, 12), Generate(control_f, 12));
  ExpectSameState(parent, control_p);
  ExpectSameState(*fork, control_f);
}

TEST_F(RollbackTest, ForkBlockAccountingForkOfForkAndParentClosedFirst) {
  const std::vector<int32_t> prompt = RandomTokens(37, 17);  // the last block is partly filled
  SessionId parent = WithGeneration(prompt, 3);
  const int32_t used = engine_->Stats().blocks_used;
  SessionId fork = *engine_->Fork(parent);
  SessionId grandchild = *engine_->Fork(fork);
  EXPECT_EQ(engine_->Stats().blocks_used, used);
  Generate(fork, 1);  // writes into the shared last block: one copy
  EXPECT_EQ(engine_->Stats().blocks_used, used + 1);
  ASSERT_TRUE(engine_->Close(parent).ok());
  EXPECT_EQ(engine_->Stats().blocks_used, used + 1);  // the fork and grandchild still hold them
  SessionId control = WithGeneration(prompt, 3);
  Generate(control, 1);
  EXPECT_EQ(Generate(fork, 20), Generate(control, 20));
  ExpectSameState(fork, control);
  // A snapshot of a fork restores as any session.
  auto state = engine_->Capture(grandchild);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(engine_->Close(grandchild).ok());
  ASSERT_TRUE(engine_->Restore(*state).ok());
  SessionId control2 = WithGeneration(prompt, 3);
  EXPECT_EQ(Generate(grandchild, 9), Generate(control2, 9));
  for (SessionId id : {fork, grandchild, control, control2}) ASSERT_TRUE(engine_->Close(id).ok());
  EXPECT_EQ(engine_->Stats().blocks_used, 0);
  EXPECT_EQ(engine_->Stats().blocks_reserved, 0);
  EXPECT_EQ(engine_->Fork(parent).status().code(), StatusCode::kNotFound);
}

TEST_F(RollbackTest, ForkRefusedWhileGenerating) {
  SessionId a = *engine_->Open(Greedy());
  ASSERT_TRUE(engine_->Append(a, RandomTokens(10, 1)).ok());
  ASSERT_TRUE(engine_->Generate(a, Gen(100000), events_.Sink()).ok());
  EXPECT_EQ(engine_->Fork(a).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine_->Cancel(a).ok());
  events_.WaitDone(a);
}

TEST_F(RollbackTest, PartialAppendIsReplacedKeepingTheCommonPrefix) {
  const std::vector<int32_t> head = RandomTokens(20, 21);
  std::vector<int32_t> partial = RandomTokens(12, 22);
  std::vector<int32_t> final_input(partial.begin(), partial.begin() + 7);
  for (int32_t t : RandomTokens(9, 23)) final_input.push_back(t);
  SessionId a = *engine_->Open(Greedy());
  ASSERT_TRUE(engine_->Append(a, head).ok());
  ASSERT_TRUE(engine_->Append(a, partial, {}, Engine::AppendMode::kPartial).ok());
  Generate(a, 8, "spec");  // a speculative answer to the partial input
  ASSERT_TRUE(engine_->Append(a, final_input).ok());
  SessionId b = *engine_->Open(Greedy());
  ASSERT_TRUE(engine_->Append(b, head).ok());
  ASSERT_TRUE(engine_->Append(b, final_input).ok());
  EXPECT_EQ(engine_->Get(a)->tokens_seen, engine_->Get(b)->tokens_seen);
  EXPECT_EQ(Generate(a, 12), Generate(b, 12));
  // After a final Append, the next Append is plain input again.
  ASSERT_TRUE(engine_->Append(a, std::vector<int32_t>{5, 6}).ok());
  EXPECT_EQ(engine_->Get(a)->tokens_seen, engine_->Get(b)->tokens_seen + 2);
}

TEST_F(RollbackTest, GenerationOnAPartialIsCancelledOnlyWhenTheInputChanges) {
  const std::vector<int32_t> partial = RandomTokens(15, 31);
  SessionId a = *engine_->Open(Greedy());
  ASSERT_TRUE(engine_->Append(a, partial, {}, Engine::AppendMode::kPartial).ok());
  // The same input, now final, while a speculative generation runs: it goes on.
  ASSERT_TRUE(engine_->Generate(a, Gen(15, "spec"), events_.Sink()).ok());
  ASSERT_TRUE(engine_->Append(a, partial).ok());
  EXPECT_EQ(events_.WaitDone(a).reason, FinishReason::kLength);
  // A partial replaced by different input while generating: cancelled and rolled back.
  // A window the speculative generation cannot slide past before the replacement lands.
  SessionId c = *engine_->Open(Greedy(4000));
  ASSERT_TRUE(engine_->Append(c, partial, {}, Engine::AppendMode::kPartial).ok());
  ASSERT_TRUE(engine_->Generate(c, Gen(3900, "spec"), events_.Sink()).ok());
  while (events_.Tokens(c).size() < 2) std::this_thread::sleep_for(1ms);
  std::vector<int32_t> changed = partial;
  changed.back() = (changed.back() + 1) % 256;
  ASSERT_TRUE(engine_->Append(c, changed).ok());
  EXPECT_EQ(events_.WaitDone(c).reason, FinishReason::kCancelled);
  SessionId d = *engine_->Open(Greedy(4000));
  ASSERT_TRUE(engine_->Append(d, changed).ok());
  EXPECT_EQ(engine_->Get(c)->tokens_seen, engine_->Get(d)->tokens_seen);
  EXPECT_EQ(Generate(c, 10), Generate(d, 10));
}

// Holds every step in the backend until the test releases it.
class HeldSteps : public ForwardingBackend {
 public:
  explicit HeldSteps(std::unique_ptr<ModelBackend> inner) : ForwardingBackend(std::move(inner)) {}
  Status Execute(const StepPlan& plan, float* logits) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      in_step_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
    }
    return inner().Execute(plan, logits);
  }
  void WaitForAStep() {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, 60s, [&] { return in_step_; }));
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool in_step_ = false;
  bool released_ = false;
};

// Found by client_message_fuzz (ASan: heap-use-after-free): Fork, Truncate, Capture and the
// replacement of a partial Append wait for the session's step in flight; a Close meanwhile
// marks the session, the step's end destroys it, and the waiter then read the freed session.
// Now they find it gone: NOT_FOUND. (Without ASan the old code read freed memory quietly:
// `make sanitize` runs this test under ASan.)
TEST(RollbackWaitTest, AWaitingForkOrTruncateOfASessionClosedMeanwhileIsNotFound) {
  for (const bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "truncate" : "fork");
    auto model = MakeSyntheticModel(TinyModel());
    ASSERT_TRUE(model.ok());
    auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
    ASSERT_TRUE(vocab.ok());
    auto held = std::make_unique<HeldSteps>(std::move(model).value());
    HeldSteps* steps = held.get();
    EngineConfig config;
    config.pool_bytes = 16 << 20;
    config.threads = 1;
    auto engine = Engine::Create(std::move(held), std::move(vocab).value(), config);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto id = (*engine)->Open(Greedy());
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*engine)->Append(*id, RandomTokens(20, 7)).ok());
    GenerateOptions g = UpTo(4);
    g.request_id = "r";
    Collector events;
    if (truncate) {
      ASSERT_TRUE((*engine)->Generate(*id, g, events.Sink()).ok());
    }
    steps->WaitForAStep();  // the session is in the step, which waits for Release
    Status waited;
    std::thread waiter([&] {
      waited = truncate ? (*engine)->Truncate(*id, "r", 0).status() : (*engine)->Fork(*id).status();
    });
    std::this_thread::sleep_for(100ms);  // it waits for the step now
    ASSERT_TRUE((*engine)->Close(*id).ok());
    steps->Release();  // the step ends and destroys the closed session
    waiter.join();
    EXPECT_EQ(waited.code(), StatusCode::kNotFound) << waited.ToString();
    EXPECT_EQ((*engine)->Stats().sessions, 0);
  }
}

}  // namespace
}  // namespace streamd::testing
