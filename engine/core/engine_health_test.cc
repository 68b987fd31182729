// What the engine tells its operators: the step observer, the token totals in EngineStats, and
// BackendHealth after a backend fault (engine/backends/fault_injection.h breaks a real backend).
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/backends/fault_injection.h"
#include "engine/core/engine.h"
#include "tests/support/engine_test_util.h"

namespace streamd {
namespace {

using namespace streamd::testing;

// The synthetic model, optionally broken after `fault_after` steps, with `observer`.
std::unique_ptr<Engine> MakeObservedEngine(std::function<void(const StepReport&)> observer,
                                           int64_t fault_after = -1) {
  auto model = MakeSyntheticModel(TinyModel());
  EXPECT_TRUE(model.ok());
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  EXPECT_TRUE(vocab.ok());
  EngineConfig config;
  config.pool_bytes = 64 << 20;
  config.max_chunk = 64;
  config.threads = 2;
  config.planner = {128, 64};
  config.step_observer = std::move(observer);
  std::unique_ptr<ModelBackend> backend = std::move(model).value();
  if (fault_after >= 0) backend = InjectFaultAfterSteps(std::move(backend), fault_after);
  auto engine = Engine::Create(std::move(backend), std::move(vocab).value(), config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

struct Steps {
  std::mutex mu;
  std::vector<StepReport> reports;
  std::function<void(const StepReport&)> Observer() {
    return [this](const StepReport& r) {
      std::lock_guard<std::mutex> lock(mu);
      reports.push_back(r);
    };
  }
};

TEST(EngineHealthTest, EveryStepIsReportedWithItsTokens) {
  Steps steps;
  auto engine = MakeObservedEngine(steps.Observer());
  Collector events;
  auto id = engine->Open(Greedy(/*window=*/16));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->Append(*id, RandomTokens(100, 7)).ok());
  ASSERT_TRUE(engine->Generate(*id, UpTo(10), events.Sink()).ok());
  events.WaitDone(*id);
  const EngineStats st = engine->Stats();
  std::lock_guard<std::mutex> lock(steps.mu);
  EXPECT_EQ(static_cast<int64_t>(steps.reports.size()), st.steps);
  int64_t tokens = 0;
  for (const StepReport& r : steps.reports) {
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.sequences, 1);
    EXPECT_GT(r.tokens, 0);
    EXPECT_GE(r.seconds, 0);
    tokens += r.tokens;
  }
  EXPECT_EQ(tokens, st.tokens_in);     // what the steps ran is what was run through the caches
  EXPECT_EQ(st.tokens_appended, 100);  // the prompt only, not the fed-back tokens
  EXPECT_EQ(st.tokens_out, 10);
  // 4 sinks + 16 recent tokens are kept of the 109 run through the cache (the 10th sampled
  // token is pending, not yet in it).
  EXPECT_EQ(st.tokens_evicted, engine->Get(*id)->tokens_evicted);
  EXPECT_EQ(st.tokens_evicted, 109 - 20);
  EXPECT_TRUE(engine->BackendHealth().ok());
}

TEST(EngineHealthTest, ABrokenBackendIsReportedAndRefusesNewWork) {
  Steps steps;
  auto engine = MakeObservedEngine(steps.Observer(), /*fault_after=*/3);
  Collector events;
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE(engine->CanAdmit(Greedy()));
  ASSERT_TRUE(engine->Append(*id, RandomTokens(10, 3)).ok());
  ASSERT_TRUE(engine->Generate(*id, UpTo(20), events.Sink()).ok());
  const GenerationEvent done = events.WaitDone(*id);
  EXPECT_EQ(done.reason, FinishReason::kError);
  EXPECT_LT(done.output_tokens, 20);
  const Status health = engine->BackendHealth();
  ASSERT_FALSE(health.ok());
  EXPECT_NE(health.message().find("injected device fault"), std::string::npos);
  EXPECT_FALSE(engine->CanAdmit(Greedy()));
  EXPECT_EQ(engine->Open(Greedy()).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(engine->Generate(*id, UpTo(5), events.Sink()).code(), StatusCode::kUnavailable);
  // Its sessions can still be closed (their blocks go back to the pool).
  EXPECT_TRUE(engine->Close(*id).ok());
  std::lock_guard<std::mutex> lock(steps.mu);
  ASSERT_FALSE(steps.reports.empty());
  EXPECT_FALSE(steps.reports.back().ok);
}

TEST(EngineHealthTest, InjectedFaultSettingIsParsedStrictly) {
  EXPECT_FALSE(ParseInjectedFault("")->has_value());
  EXPECT_EQ(ParseInjectedFault("after_steps:0")->value(), 0);
  EXPECT_EQ(ParseInjectedFault("after_steps:12")->value(), 12);
  for (const char* bad : {"after_steps:", "after_steps:-1", "after_steps:3x", "steps:3", "3"}) {
    auto r = ParseInjectedFault(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(kInjectBackendFaultEnv), std::string::npos);
  }
}

}  // namespace
}  // namespace streamd
