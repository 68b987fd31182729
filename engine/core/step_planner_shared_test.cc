// StepPlanner with PlannerConfig::shared_step_tokens: a step with work of more than one tenant
// runs at most that many tokens; a step with one tenant's work is not capped.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "engine/core/step_planner.h"
#include "tests/support/step_planner_test_util.h"

namespace streamd {
namespace {

using planner_test::NewSeed;
using planner_test::Population;
using planner_test::Tokens;

// shared_step_tokens: while the flood and B both decode, every step runs at most that many
// tokens, B's among them; once B is done the flood has whole steps again. Fairness off (one
// tenant) never caps.
TEST(StepPlannerTenantTest, SharedStepTokensCapStepsOnlyWhileTenantsShare) {
  for (bool fair : {true, false}) {
    PlannerConfig config{4096, 16, fair};
    config.shared_step_tokens = 3;
    StepPlanner planner(config);
    std::vector<SessionWork> work;
    for (uint64_t id = 1; id <= 100; ++id) work.push_back({id, 1, true, 64, {}, 1});
    work.push_back({500, 1, true, 64, {}, 2});
    for (int step = 0; step < 20; ++step) {
      const auto plan = planner.Plan(work);
      if (!fair) {
        ASSERT_EQ(plan.size(), 16u) << "fair_tenants off: one tenant, no cap";
        continue;
      }
      ASSERT_EQ(plan.size(), 3u) << "step " << step;
      ASSERT_TRUE(
          std::any_of(plan.begin(), plan.end(), [](const PlannedChunk& c) { return c.id == 500; }))
          << "step " << step;
    }
    work.pop_back();  // B's generation ended
    EXPECT_EQ(planner.Plan(work).size(), 16u);
  }
}

// Random mixes with a shared cap: a step with work of two tenants or more never runs more
// tokens or sessions than the cap, one with a single tenant's work is not capped, and every
// step with work makes progress.
TEST(StepPlannerTenantTest, SharedStepTokensBoundEverySharedStep) {
  const uint32_t seed = NewSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  int shared_steps = 0, single_steps_over_cap = 0;
  for (int trial = 0; trial < 40; ++trial) {
    PlannerConfig config{64 + static_cast<int32_t>(rng() % 600),
                         8 + static_cast<int32_t>(rng() % 40)};
    config.shared_step_tokens = 1 + static_cast<int32_t>(rng() % 8);
    StepPlanner planner(config);
    Population pop{&rng, 1 + static_cast<int>(rng() % 4), 30, 100};
    for (int step = 0; step < 200; ++step) {
      pop.Arrive();
      const std::vector<SessionWork> work = pop.Work();
      std::set<uint32_t> tenants;
      for (const SessionWork& w : work) tenants.insert(w.tenant);
      const auto plan = planner.Plan(work);
      if (!work.empty()) {
        ASSERT_FALSE(plan.empty()) << "trial " << trial << " step " << step;
      }
      if (tenants.size() > 1) {
        ++shared_steps;
        ASSERT_LE(Tokens(plan), config.shared_step_tokens) << "trial " << trial;
        ASSERT_LE(plan.size(), static_cast<size_t>(config.shared_step_tokens));
      } else {
        single_steps_over_cap += Tokens(plan) > config.shared_step_tokens;
      }
      pop.Consume(plan);
    }
  }
  EXPECT_GT(shared_steps, 100);
  EXPECT_GT(single_steps_over_cap, 10) << "steps of one tenant should run past the cap";
}

// With the cap at least the number of decoding tenants, each of them decodes in every step.
TEST(StepPlannerTenantTest, EveryDecodingTenantGetsASlotInEveryCappedStep) {
  PlannerConfig config{4096, 64};
  config.shared_step_tokens = 4;
  StepPlanner planner(config);
  std::vector<SessionWork> work;
  uint64_t id = 1;
  for (uint32_t tenant = 1; tenant <= 3; ++tenant) {
    for (int k = 0; k < 30; ++k) work.push_back({id++, 1, true, 64, {}, tenant});
  }
  for (int step = 0; step < 30; ++step) {
    const auto plan = planner.Plan(work);
    ASSERT_EQ(plan.size(), 4u);
    std::set<uint32_t> served;
    for (const PlannedChunk& c : plan) served.insert(work[c.work_index].tenant);
    ASSERT_EQ(served.size(), 3u) << "step " << step;
  }
}

}  // namespace
}  // namespace streamd
