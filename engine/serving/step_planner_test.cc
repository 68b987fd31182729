#include "engine/serving/step_planner.h"

#include <algorithm>
#include <map>
#include <random>

#include <gtest/gtest.h>

namespace streamd {
namespace {

int64_t Tokens(const std::vector<PlannedChunk>& plan) {
  int64_t n = 0;
  for (const PlannedChunk& c : plan) n += c.n_tokens;
  return n;
}

TEST(StepPlannerTest, DecodeGoesFirstAndAHugeAppendIsChunked) {
  StepPlanner planner({512, 256});
  std::vector<SessionWork> work;
  for (uint64_t id = 1; id <= 10; ++id) work.push_back({id, 1, true, 256});
  work.push_back({11, 100000, false, 256});
  const auto plan = planner.Plan(work);
  ASSERT_EQ(plan.size(), 11u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(plan[i].n_tokens, 1);
  EXPECT_EQ(plan[10].id, 11u);
  EXPECT_EQ(plan[10].n_tokens, 256);  // its cache's chunk limit, not the whole append
}

TEST(StepPlannerTest, ManyAppendsNeverCrowdOutADecoder) {
  StepPlanner planner({512, 256});
  std::vector<SessionWork> work;
  for (uint64_t id = 1; id <= 50; ++id) work.push_back({id, 5000, false, 512});
  work.push_back({77, 1, true, 512});
  for (int step = 0; step < 20; ++step) {
    const auto plan = planner.Plan(work);
    ASSERT_FALSE(plan.empty());
    EXPECT_EQ(plan[0].id, 77u);
    EXPECT_LE(Tokens(plan), 512);
  }
}

TEST(StepPlannerTest, DecodersOverTheSessionCapRotate) {
  StepPlanner planner({4096, 256});
  std::vector<SessionWork> work;
  for (uint64_t id = 1; id <= 300; ++id) work.push_back({id, 1, true, 64});
  std::map<uint64_t, int> served;
  for (int step = 0; step < 2; ++step) {
    const auto plan = planner.Plan(work);
    EXPECT_EQ(plan.size(), 256u);
    for (const PlannedChunk& c : plan) ++served[c.id];
  }
  EXPECT_EQ(served.size(), 300u) << "every decoder is served within two steps";
}

TEST(StepPlannerTest, PrefillsShareTheBudgetInTurn) {
  StepPlanner planner({512, 256});
  const std::vector<SessionWork> work = {{1, 10000, false, 512}, {2, 10000, false, 512},
                                         {3, 10000, false, 512}};
  std::map<uint64_t, int> served;
  for (int step = 0; step < 3; ++step) {
    const auto plan = planner.Plan(work);
    ASSERT_EQ(plan.size(), 1u);
    EXPECT_EQ(plan[0].n_tokens, 512);
    ++served[plan[0].id];
  }
  EXPECT_EQ(served.size(), 3u);
}

// Random adversarial mixes, simulated over many steps: limits always hold, every decoder that
// fits runs every step, and no session with work waits more than a bounded number of steps.
TEST(StepPlannerTest, RandomMixesRespectLimitsAndNobodyStarves) {
  std::mt19937 rng(std::random_device{}());
  const uint32_t seed = rng();
  SCOPED_TRACE("seed " + std::to_string(seed));
  rng.seed(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t budget = 1 + static_cast<int32_t>(rng() % 600);
    const int32_t cap = 1 + static_cast<int32_t>(rng() % 40);
    StepPlanner planner({budget, cap});
    std::map<uint64_t, SessionWork> live;
    std::map<uint64_t, int> waiting;  // steps since last served
    uint64_t next_id = 1;
    for (int step = 0; step < 400; ++step) {
      // Arrivals: decoders and appends of any size, including huge ones.
      while (rng() % 3 == 0 && live.size() < 60) {
        const bool decoding = rng() % 2 == 0;
        const int64_t pending = decoding ? 1 : 1 + static_cast<int64_t>(rng() % 3000);
        live[next_id] = {next_id, pending, decoding, 1 + static_cast<int32_t>(rng() % 300)};
        waiting[next_id] = 0;
        ++next_id;
      }
      std::vector<SessionWork> work;
      int32_t decoders = 0;
      bool prefills = false;
      for (const auto& [id, w] : live) {
        work.push_back(w);
        decoders += w.decoding;
        prefills = prefills || !w.decoding;
      }
      const auto [dcap, dbudget] = StepPlanner::DecodeLimits(cap, budget, prefills);
      const auto plan = planner.Plan(work);
      ASSERT_LE(Tokens(plan), budget);
      ASSERT_LE(static_cast<int32_t>(plan.size()), cap);
      int32_t planned_decoders = 0;
      for (const PlannedChunk& c : plan) {
        SessionWork& w = live.at(c.id);
        ASSERT_GE(c.n_tokens, 1);
        ASSERT_LE(c.n_tokens, std::min<int64_t>(w.pending, w.max_chunk));
        planned_decoders += w.decoding;
        w.pending -= c.n_tokens;
        waiting[c.id] = -1;
      }
      if (prefills && decoders > 0 && (dcap >= static_cast<size_t>(cap) || dbudget >= budget)) {
        ASSERT_EQ(plan.size(), 1u);  // no room to share: one session takes the step in turn
      } else {
        ASSERT_EQ(planned_decoders,
                  std::min<int64_t>({decoders, static_cast<int64_t>(dcap), dbudget}));
      }
      for (auto it = live.begin(); it != live.end();) {
        const uint64_t id = it->first;
        ++waiting[id];
        ASSERT_LE(waiting[id], 60) << "session " << id << " starved";
        if (it->second.pending == 0) {
          waiting.erase(id);
          it = live.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
}

}  // namespace
}  // namespace streamd
