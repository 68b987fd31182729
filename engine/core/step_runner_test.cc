// StepRunner, the one step driver: its phases leave the caches as the step plan's contract says
// (committed, partly committed, or given back), and its greedy steps pick each row's argmax
// whether the backend picks ids on the device or not.
#include "engine/core/step_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/model/forwarding_backend.h"
#include "tests/support/engine_test_util.h"

namespace streamd {
namespace {

using testing::IdsOnDevice;
using testing::TinyModel;

// A backend whose next Execute fails, once.
class FailsOnce final : public ForwardingBackend {
 public:
  explicit FailsOnce(std::unique_ptr<ModelBackend> inner) : ForwardingBackend(std::move(inner)) {}
  Status Execute(const StepPlan& plan, float* logits) override {
    if (fail_next) {
      fail_next = false;
      return InternalError("injected fault");
    }
    return inner().Execute(plan, logits);
  }
  bool fail_next = true;
};

struct Fixture {
  std::unique_ptr<ModelBackend> model;
  std::unique_ptr<BlockPool> pool;
  std::vector<std::unique_ptr<SessionCache>> caches;

  explicit Fixture(int n_caches, bool ids_on_device = false, bool fails_once = false) {
    auto m = MakeSyntheticModel(TinyModel());
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    model = std::move(m).value();
    if (ids_on_device) model = std::make_unique<IdsOnDevice>(std::move(model));
    if (fails_once) model = std::make_unique<FailsOnce>(std::move(model));
    auto p = model->CreatePool(model->CacheShape(), 16, 8 << 20);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    pool = std::move(p).value();
    for (int i = 0; i < n_caches; ++i) {
      auto c = SessionCache::Create(pool.get(), {CacheMode::kSink, 4, 60, 32},
                                    model->config().context_length);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      caches.push_back(std::move(c).value());
    }
  }
  ~Fixture() { caches.clear(); }
  size_t vocab() const { return static_cast<size_t>(model->config().vocab_size); }
};

std::vector<int32_t> Tokens(size_t n, int32_t seed) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 31 + i * 7) % 250);
  return t;
}

TEST(StepRunnerTest, RunCommitsEveryChunk) {
  Fixture f(2);
  StepRunner step(*f.model);
  const std::vector<int32_t> tokens = Tokens(12, 1);
  const std::vector<SequenceInput> seqs = {{f.caches[0].get(), 5, LogitsMode::kAll},
                                           {f.caches[1].get(), 7, LogitsMode::kLast}};
  std::vector<float> logits(6 * f.vocab());
  ASSERT_TRUE(step.Run(tokens, seqs, logits.data()).ok());
  EXPECT_FALSE(step.planned());
  EXPECT_EQ(f.caches[0]->tokens_seen(), 5);
  EXPECT_EQ(f.caches[1]->tokens_seen(), 7);
}

TEST(StepRunnerTest, PhasesCommitWhatTheCallerKeeps) {
  Fixture f(2);
  StepRunner step(*f.model);
  const std::vector<int32_t> tokens = Tokens(9, 2);
  const std::vector<SequenceInput> seqs = {{f.caches[0].get(), 4, LogitsMode::kLast},
                                           {f.caches[1].get(), 5, LogitsMode::kLast}};
  ASSERT_TRUE(step.Plan(tokens, seqs).ok());
  ASSERT_TRUE(step.planned());
  EXPECT_EQ(step.plan().n_tokens(), 9);
  EXPECT_EQ(step.Plan(tokens, seqs).code(), StatusCode::kFailedPrecondition)
      << "a second plan before the first is committed";
  std::vector<float> logits(2 * f.vocab());
  ASSERT_TRUE(step.Execute(logits.data()).ok());
  const std::vector<int32_t> kept = {4, 3};
  step.Commit(kept);
  EXPECT_EQ(f.caches[0]->tokens_seen(), 4);
  EXPECT_EQ(f.caches[1]->tokens_seen(), 3);
}

TEST(StepRunnerTest, AFailedStepGivesItsChunksBack) {
  Fixture f(1, /*ids_on_device=*/false, /*fails_once=*/true);
  StepRunner step(*f.model);
  const std::vector<int32_t> tokens = Tokens(6, 3);
  std::vector<float> failed(f.vocab()), again(f.vocab()), fresh(f.vocab());
  EXPECT_EQ(step.Run(tokens, *f.caches[0], LogitsMode::kLast, failed.data()).code(),
            StatusCode::kInternal);
  EXPECT_FALSE(step.planned());
  EXPECT_EQ(f.caches[0]->tokens_seen(), 0);
  // The same step again runs as if the failed one had never been planned.
  ASSERT_TRUE(step.Run(tokens, *f.caches[0], LogitsMode::kLast, again.data()).ok());
  Fixture g(1);
  ASSERT_TRUE(StepRunner(*g.model).Run(tokens, *g.caches[0], LogitsMode::kLast, fresh.data()).ok());
  EXPECT_EQ(again, fresh);
}

TEST(StepRunnerTest, AnUnfinishedStepIsAbortedWithItsRunner) {
  Fixture f(1);
  const std::vector<int32_t> tokens = Tokens(5, 4);
  {
    StepRunner step(*f.model);
    ASSERT_TRUE(step.Plan(tokens, std::vector<SequenceInput>{{f.caches[0].get(), 5}}).ok());
  }
  EXPECT_EQ(f.caches[0]->tokens_seen(), 0);
  std::vector<float> logits(f.vocab());
  EXPECT_TRUE(
      StepRunner(*f.model).Run(tokens, *f.caches[0], LogitsMode::kLast, logits.data()).ok());
  EXPECT_EQ(f.caches[0]->tokens_seen(), 5);
}

TEST(StepRunnerTest, PhasesOutOfOrderAreRefused) {
  Fixture f(1);
  StepRunner step(*f.model);
  std::vector<float> logits(f.vocab());
  std::vector<int32_t> ids(1);
  EXPECT_EQ(step.Execute(logits.data()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(step.ExecuteGreedy(ids.data()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(step.GreedyRow(0, logits.data()).code(), StatusCode::kInvalidArgument);
}

// Greedy steps equal the argmax of full steps on twin caches, and GreedyRow hands back the rows
// they picked from: on the host (the CPU backend) and "on the device" (IdsOnDevice).
void CheckGreedyEqualsArgmax(bool ids_on_device) {
  Fixture full(3), greedy(3, ids_on_device);
  StepRunner a(*full.model), b(*greedy.model);
  const size_t vocab = full.vocab();
  for (int round = 0; round < 4; ++round) {
    const int32_t n = round == 0 ? 9 : 1;  // a prefill chunk, then decode steps
    const std::vector<int32_t> tokens = Tokens(3 * static_cast<size_t>(n), round);
    std::vector<SequenceInput> sa, sb;
    for (int s = 0; s < 3; ++s) {
      sa.push_back({full.caches[s].get(), n, LogitsMode::kLast});
      sb.push_back({greedy.caches[s].get(), n, LogitsMode::kLast});
    }
    std::vector<float> logits(3 * vocab), row(vocab);
    std::vector<int32_t> ids(3, -1);
    ASSERT_TRUE(a.Run(tokens, sa, logits.data()).ok());
    ASSERT_TRUE(b.RunGreedy(tokens, sb, ids.data()).ok());
    for (size_t s = 0; s < 3; ++s) {
      const float* want = &logits[s * vocab];
      EXPECT_EQ(ids[s], std::max_element(want, want + vocab) - want) << "round " << round;
      ASSERT_TRUE(b.GreedyRow(static_cast<int64_t>(s), row.data()).ok());
      EXPECT_TRUE(std::equal(row.begin(), row.end(), want)) << "row " << s;
    }
    EXPECT_EQ(b.GreedyRow(3, row.data()).code(), StatusCode::kInvalidArgument) << "past the rows";
  }
  if (ids_on_device) {
    EXPECT_EQ(static_cast<IdsOnDevice&>(*greedy.model).ids_only_steps.load(), 4);
    EXPECT_EQ(static_cast<IdsOnDevice&>(*greedy.model).full_rows_steps.load(), 0);
  }
}

TEST(StepRunnerTest, GreedyStepsOnTheHostPickTheArgmax) { CheckGreedyEqualsArgmax(false); }

TEST(StepRunnerTest, GreedyStepsOnTheDevicePickTheArgmax) { CheckGreedyEqualsArgmax(true); }

}  // namespace
}  // namespace streamd
