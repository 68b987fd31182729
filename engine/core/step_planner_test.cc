#include "engine/core/step_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>

#include "tests/support/step_planner_test_util.h"

namespace streamd {
namespace {

using planner_test::Geometry;
using planner_test::NewSeed;
using planner_test::Population;
using planner_test::Tokens;

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
  const std::vector<SessionWork> work = {
      {1, 10000, false, 512}, {2, 10000, false, 512}, {3, 10000, false, 512}};
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

// ---------------------------------------------------------------------------------------------
// Tenants.

// The policy before tenants, kept verbatim as the reference: one tenant must plan exactly like
// it, and so must several tenants whenever a step is not over-subscribed.
class ReferencePlanner {
 public:
  explicit ReferencePlanner(PlannerConfig config) : config_(config) {}
  std::vector<PlannedChunk> Plan(const std::vector<SessionWork>& work, int32_t headroom_blocks) {
    ++step_;
    std::unordered_map<uint64_t, uint64_t> seen;
    std::vector<SessionWork> decoders, prefills;
    for (const SessionWork& w : work) {
      if (w.pending <= 0) continue;
      auto it = last_served_.find(w.id);
      seen[w.id] = it == last_served_.end() ? step_ : it->second;
      (w.decoding ? decoders : prefills).push_back(w);
    }
    last_served_ = std::move(seen);
    const auto longest_waiting = [&](const SessionWork& a, const SessionWork& b) {
      const uint64_t sa = last_served_.at(a.id), sb = last_served_.at(b.id);
      return sa != sb ? sa < sb : a.id < b.id;
    };
    std::sort(decoders.begin(), decoders.end(), longest_waiting);
    std::sort(prefills.begin(), prefills.end(), longest_waiting);
    std::vector<PlannedChunk> plan;
    int64_t budget = config_.max_batch_tokens;
    const size_t cap = static_cast<size_t>(std::max(1, config_.max_batch_sessions));
    const auto [decode_cap, decode_budget] =
        StepPlanner::DecodeLimits(cap, budget, !prefills.empty());
    if (!prefills.empty() && !decoders.empty() && (decode_cap >= cap || decode_budget >= budget)) {
      const SessionWork& w = longest_waiting(prefills[0], decoders[0]) ? prefills[0] : decoders[0];
      const int64_t n = std::min<int64_t>({w.pending, w.max_chunk, budget});
      plan.push_back({w.id, w.cache.LongestChunkWithin(static_cast<int32_t>(n), headroom_blocks)});
      last_served_[w.id] = step_ + 1;
      return plan;
    }
    for (const SessionWork& w : decoders) {
      if (plan.size() >= decode_cap || static_cast<int64_t>(plan.size()) >= decode_budget) break;
      plan.push_back({w.id, 1});
    }
    budget -= static_cast<int64_t>(plan.size());
    int32_t headroom = std::max(0, headroom_blocks);
    for (const SessionWork& w : prefills) {
      if (plan.size() >= cap || budget < 1) break;
      const int64_t wanted = std::min<int64_t>({w.pending, w.max_chunk, budget});
      const int32_t n = w.cache.LongestChunkWithin(static_cast<int32_t>(wanted), headroom);
      headroom -= w.cache.HeadroomForChunk(n);
      plan.push_back({w.id, n});
      budget -= n;
    }
    for (const PlannedChunk& c : plan) last_served_[c.id] = step_ + 1;
    return plan;
  }

 private:
  PlannerConfig config_;
  uint64_t step_ = 0;
  std::unordered_map<uint64_t, uint64_t> last_served_;
};

std::string Describe(const std::vector<PlannedChunk>& plan) {
  std::string out;
  for (const PlannedChunk& c : plan) {
    out += std::to_string(c.id) + ":" + std::to_string(c.n_tokens) + " ";
  }
  return out;
}

// With one tenant (any key, or fair_tenants off with many keys) the planner is the old policy,
// step for step, contended or not, headroom included.
TEST(StepPlannerTenantTest, OneTenantPlansExactlyAsBefore) {
  const uint32_t seed = NewSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const bool fair_off = trial % 2 == 1;  // many tenant keys, fairness off
    PlannerConfig config{1 + static_cast<int32_t>(rng() % 600),
                         1 + static_cast<int32_t>(rng() % 40), !fair_off};
    StepPlanner planner(config);
    ReferencePlanner reference(config);
    Population pop{&rng, fair_off ? 5 : 1};
    for (int step = 0; step < 300; ++step) {
      pop.Arrive();
      const std::vector<SessionWork> work = pop.Work();
      const int32_t headroom =
          rng() % 4 == 0 ? std::numeric_limits<int32_t>::max() : static_cast<int32_t>(rng() % 40);
      const auto plan = planner.Plan(work, headroom);
      const auto want = reference.Plan(work, headroom);
      ASSERT_EQ(Describe(plan), Describe(want)) << "trial " << trial << " step " << step;
      for (const PlannedChunk& c : plan) ASSERT_EQ(work.at(c.work_index).id, c.id);
      pop.Consume(plan);
    }
  }
}

// A step that is not over-subscribed plans exactly as before, whatever the tenants: every
// session gets its slot or its full chunk, in the same order, headroom shortening included.
TEST(StepPlannerTenantTest, UncontendedStepsPlanExactlyAsBefore) {
  const uint32_t seed = NewSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    // 60 sessions of chunks of at most 300 always fit in 18,000 tokens and 61 slots.
    PlannerConfig config{18000 + static_cast<int32_t>(rng() % 1000),
                         61 + static_cast<int32_t>(rng() % 100)};
    StepPlanner planner(config);
    ReferencePlanner reference(config);
    Population pop{&rng, 1 + static_cast<int>(rng() % 6)};
    for (int step = 0; step < 300; ++step) {
      pop.Arrive();
      const std::vector<SessionWork> work = pop.Work();
      const int32_t headroom =
          rng() % 2 == 0 ? std::numeric_limits<int32_t>::max() : static_cast<int32_t>(rng() % 60);
      const auto plan = planner.Plan(work, headroom);
      ASSERT_EQ(Describe(plan), Describe(reference.Plan(work, headroom)))
          << "trial " << trial << " step " << step;
      pop.Consume(plan);
    }
  }
}

// Even where other steps are contended, every step that is not over-subscribed gives every
// session what it asks for (no throughput is lost to fairness).
TEST(StepPlannerTenantTest, EveryStepThatFitsServesEverybodyInFull) {
  const uint32_t seed = NewSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  int fitting_steps = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t budget = 1 + static_cast<int32_t>(rng() % 3000);
    const int32_t cap = 2 + static_cast<int32_t>(rng() % 40);
    StepPlanner planner({budget, cap});
    Population pop{&rng, 1 + static_cast<int>(rng() % 6), 30, 100};
    for (int step = 0; step < 300; ++step) {
      pop.Arrive();
      const std::vector<SessionWork> work = pop.Work();
      size_t decoders = 0;
      int64_t asked = 0;
      for (const SessionWork& w : work) {
        decoders += w.decoding;
        asked += w.decoding ? 1 : std::min<int64_t>(w.pending, w.max_chunk);
      }
      const auto [dcap, dbudget] = StepPlanner::DecodeLimits(cap, budget, decoders < work.size());
      const bool degenerate = decoders > 0 && decoders < work.size() &&
                              (dcap >= static_cast<size_t>(cap) || dbudget >= budget);
      const auto plan = planner.Plan(work);
      if (!degenerate && decoders <= dcap && static_cast<int64_t>(decoders) <= dbudget &&
          work.size() <= static_cast<size_t>(cap) && asked <= budget) {
        ++fitting_steps;
        std::map<uint64_t, int64_t> got;
        for (const PlannedChunk& c : plan) got[c.id] = c.n_tokens;
        ASSERT_EQ(got.size(), work.size()) << "trial " << trial << " step " << step;
        for (const SessionWork& w : work) {
          ASSERT_EQ(got[w.id], w.decoding ? 1 : std::min<int64_t>(w.pending, w.max_chunk));
        }
      }
      pop.Consume(plan);
    }
  }
  EXPECT_GT(fitting_steps, 100) << "the mixes should include steps that fit";
}

// The case: tenant A floods with 100 decoding sessions, tenant B has one. B decodes in
// every step, A's sessions take the other 15 slots in turn.
TEST(StepPlannerTenantTest, AFloodOfDecodersDoesNotStarveASingleSession) {
  for (bool fair : {true, false}) {
    StepPlanner planner({4096, 16, fair});
    std::vector<SessionWork> work;
    for (uint64_t id = 1; id <= 100; ++id) work.push_back({id, 1, true, 64, {}, 1});
    work.push_back({500, 1, true, 64, {}, 2});
    std::map<uint64_t, int> waited;
    int b_steps = 0;
    for (int step = 0; step < 60; ++step) {
      const auto plan = planner.Plan(work);
      ASSERT_EQ(plan.size(), 16u);
      for (auto& [id, w] : waited) ++w;
      for (const PlannedChunk& c : plan) {
        b_steps += c.id == 500;
        waited[c.id] = 0;
      }
      if (!fair) continue;
      ASSERT_TRUE(
          std::any_of(plan.begin(), plan.end(), [](const PlannedChunk& c) { return c.id == 500; }))
          << "step " << step;
      if (step >= 7) {
        for (uint64_t id = 1; id <= 100; ++id) {
          ASSERT_LE(waited.at(id), 7) << "A's session " << id << " (100 sessions, 15 slots)";
        }
      }
    }
    // Without tenants B gets 1/101 of 16 slots a step, as every one of A's sessions does.
    if (fair) {
      EXPECT_EQ(b_steps, 60);
    } else {
      EXPECT_LE(b_steps, 10) << "fair_tenants off";
    }
  }
}

// With a single decode slot (two session slots, an append waiting) the slot alternates
// between the flood and the single session: B is served every other step.
TEST(StepPlannerTenantTest, OneDecodeSlotAlternatesBetweenTenants) {
  StepPlanner planner({4096, 2});
  std::vector<SessionWork> work;
  for (uint64_t id = 1; id <= 100; ++id) work.push_back({id, 1, true, 64, {}, 1});
  work.push_back({500, 1, true, 64, {}, 2});
  work.push_back({600, 1000000, false, 64, {}, 3});  // an append: one slot stays for prefill
  std::vector<int> b_served;
  for (int step = 0; step < 40; ++step) {
    const auto plan = planner.Plan(work);
    ASSERT_EQ(plan.size(), 2u);
    EXPECT_EQ(plan[1].id, 600u) << "the append progresses every step";
    if (plan[0].id == 500) b_served.push_back(step);
  }
  ASSERT_EQ(b_served.size(), 20u);
  for (size_t k = 1; k < b_served.size(); ++k) EXPECT_EQ(b_served[k] - b_served[k - 1], 2);
}

// Prefill floods: tenant A's 100 huge appends against tenant B's one. With room for four
// chunks a step B gets one in every step (all its one session can take: A gets the rest);
// with room for one, every other step (the tokens split evenly).
TEST(StepPlannerTenantTest, AFloodOfAppendsDoesNotStarveASingleAppend) {
  for (int32_t chunk : {128, 512}) {
    StepPlanner planner({512, 16});
    std::vector<SessionWork> work;
    for (uint64_t id = 1; id <= 100; ++id) work.push_back({id, 1 << 30, false, chunk, {}, 1});
    work.push_back({500, 1 << 30, false, chunk, {}, 2});
    int64_t a_tokens = 0, b_tokens = 0;
    std::vector<int> b_served;
    for (int step = 0; step < 40; ++step) {
      const auto plan = planner.Plan(work);
      EXPECT_EQ(Tokens(plan), 512);
      for (const PlannedChunk& c : plan) {
        (c.id == 500 ? b_tokens : a_tokens) += c.n_tokens;
        if (c.id == 500) b_served.push_back(step);
      }
    }
    if (chunk == 128) {
      EXPECT_EQ(b_tokens, 40 * 128);
    } else {
      EXPECT_EQ(a_tokens, b_tokens);
    }
    ASSERT_EQ(b_served.size(), chunk == 128 ? 40u : 20u) << "chunk " << chunk;
    for (size_t k = 1; k < b_served.size(); ++k) {
      EXPECT_EQ(b_served[k] - b_served[k - 1], chunk == 128 ? 1 : 2) << "chunk " << chunk;
    }
  }
}

// Max-min fair shares of `supply` among demands (water-filling), as real numbers.
std::vector<double> FairShares(const std::vector<double>& demand, double supply) {
  std::vector<double> share(demand.size(), 0.0);
  std::vector<size_t> open(demand.size());
  for (size_t t = 0; t < demand.size(); ++t) open[t] = t;
  while (!open.empty() && supply > 1e-9) {
    const double even = supply / static_cast<double>(open.size());
    std::vector<size_t> still;
    double used = 0;
    for (size_t t : open) {
      if (demand[t] - share[t] <= even) {
        used += demand[t] - share[t];
        share[t] = demand[t];
      } else {
        still.push_back(t);
      }
    }
    if (still.size() == open.size()) {
      for (size_t t : open) share[t] += even;
      break;
    }
    supply -= used;
    open = still;
  }
  return share;
}

// Static over-subscribed decode mixes: over K steps each tenant's slots are within one of its
// max-min fair share (an equal split among those that ask for more than it).
TEST(StepPlannerTenantTest, ContendedDecodeSlotsSplitEvenlyAcrossTenants) {
  const uint32_t seed = NewSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int tenants = 2 + static_cast<int>(rng() % 5);
    const int32_t cap = 2 + static_cast<int32_t>(rng() % 40);
    StepPlanner planner({1 << 20, cap});
    std::vector<SessionWork> work;
    std::vector<double> demand(tenants, 0.0);
    uint64_t id = 1;
    for (int t = 0; t < tenants; ++t) {
      const int n = 1 + static_cast<int>(rng() % 40);
      demand[t] = n;
      for (int k = 0; k < n; ++k) work.push_back({id++, 1, true, 64, {}, uint32_t(t * 5)});
    }
    std::shuffle(work.begin(), work.end(), rng);
    const int steps = 50 + static_cast<int>(rng() % 200);
    std::vector<int64_t> got(tenants, 0);
    for (int step = 0; step < steps; ++step) {
      for (const PlannedChunk& c : planner.Plan(work)) got[work[c.work_index].tenant / 5] += 1;
    }
    const double slots = std::min<double>(cap, work.size());
    const std::vector<double> share = FairShares(demand, slots);
    for (int t = 0; t < tenants; ++t) {
      EXPECT_NEAR(static_cast<double>(got[t]), share[t] * steps, 1.0 + 1e-6)
          << "trial " << trial << ": tenant " << t << " of " << tenants << " asks for " << demand[t]
          << " of " << slots << " slots a step, " << steps << " steps";
    }
  }
}

std::string Demands(const std::vector<SessionWork>& work) {
  std::map<uint32_t, std::string> by_tenant;
  for (const SessionWork& w : work) by_tenant[w.tenant] += std::to_string(w.max_chunk) + " ";
  std::string out;
  for (const auto& [t, chunks] : by_tenant) out += "tenant " + std::to_string(t) + ": " + chunks;
  return out;
}

// Static over-subscribed prefill mixes (huge appends, chunk limits differ by tenant): over K
// steps each tenant's prefill tokens are within one chunk of its max-min fair share.
TEST(StepPlannerTenantTest, ContendedPrefillTokensSplitEvenlyAcrossTenants) {
  const uint32_t seed = NewSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int tenants = 2 + static_cast<int>(rng() % 5);
    const int32_t budget = 1 + static_cast<int32_t>(rng() % 2000);
    StepPlanner planner({budget, 1000});
    std::vector<SessionWork> work;
    std::vector<double> demand(tenants, 0.0);
    int32_t biggest_chunk = 1;
    uint64_t id = 1;
    for (int t = 0; t < tenants; ++t) {
      const int n = 1 + static_cast<int>(rng() % 5);
      const int32_t chunk = 1 + static_cast<int32_t>(rng() % 400);
      biggest_chunk = std::max(biggest_chunk, chunk);
      demand[t] = static_cast<double>(n) * chunk;
      for (int k = 0; k < n; ++k) work.push_back({id++, 1LL << 40, false, chunk, {}, uint32_t(t)});
    }
    std::shuffle(work.begin(), work.end(), rng);
    const int steps = 50 + static_cast<int>(rng() % 200);
    std::vector<int64_t> got(tenants, 0);
    for (int step = 0; step < steps; ++step) {
      for (const PlannedChunk& c : planner.Plan(work)) got[work[c.work_index].tenant] += c.n_tokens;
    }
    double total_demand = 0;
    for (double d : demand) total_demand += d;
    const std::vector<double> share = FairShares(demand, std::min<double>(budget, total_demand));
    for (int t = 0; t < tenants; ++t) {
      EXPECT_NEAR(static_cast<double>(got[t]), share[t] * steps, biggest_chunk + 1e-6)
          << "trial " << trial << ": tenant " << t << " of " << tenants << " asks for " << demand[t]
          << " of a budget of " << budget << " a step, " << steps << " steps; " << Demands(work);
    }
  }
}

// Random mixes of tenants that change every step: limits hold, decoders fill the slots they
// may use, prefill progresses, a contended decode step splits across tenants within two slots,
// and nobody starves.
TEST(StepPlannerTenantTest, RandomTenantMixesKeepTheGuarantees) {
  const uint32_t seed = NewSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  int contended_decode_steps = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t budget = 1 + static_cast<int32_t>(rng() % 600);
    const int32_t cap = 1 + static_cast<int32_t>(rng() % 12);
    StepPlanner planner({budget, cap});
    Population pop{&rng, 1 + static_cast<int>(rng() % 3), 30};
    std::map<uint64_t, int> waiting;
    for (int step = 0; step < 600; ++step) {
      pop.Arrive();
      const std::vector<SessionWork> work = pop.Work();
      std::map<uint32_t, int> decoders_of;  // tenant -> decoders with work
      size_t decoders = 0;
      for (const SessionWork& w : work) {
        decoders += w.decoding;
        if (w.decoding) ++decoders_of[w.tenant];
        waiting.try_emplace(w.id, 0);
      }
      const bool prefills = decoders < work.size();
      const auto [dcap, dbudget] = StepPlanner::DecodeLimits(cap, budget, prefills);
      const int32_t headroom = static_cast<int32_t>(rng() % 30);
      const auto plan = planner.Plan(work, headroom);
      const std::string where = "trial " + std::to_string(trial) + " step " + std::to_string(step) +
                                ": " + Describe(plan);
      ASSERT_LE(Tokens(plan), budget) << where;
      ASSERT_LE(static_cast<int32_t>(plan.size()), cap) << where;
      std::map<uint32_t, int> decode_slots;  // tenant -> slots this step
      int32_t planned_decoders = 0, planned_prefills = 0, borrowed = 0;
      std::set<uint64_t> ids;
      for (const PlannedChunk& c : plan) {
        const SessionWork& w = pop.live.at(c.id);
        ASSERT_TRUE(ids.insert(c.id).second) << where;
        ASSERT_GE(c.n_tokens, 1) << where;
        ASSERT_LE(c.n_tokens, std::min<int64_t>(w.pending, w.max_chunk)) << where;
        borrowed += w.cache.HeadroomForChunk(c.n_tokens);
        planned_decoders += w.decoding;
        planned_prefills += !w.decoding;
        if (w.decoding) ++decode_slots[w.tenant];
        waiting[c.id] = -1;
      }
      ASSERT_LE(borrowed, headroom) << where;
      if (prefills && decoders > 0 && (dcap >= static_cast<size_t>(cap) || dbudget >= budget)) {
        ASSERT_EQ(plan.size(), 1u) << where;
      } else {
        ASSERT_EQ(planned_decoders, std::min<int64_t>({static_cast<int64_t>(decoders),
                                                       static_cast<int64_t>(dcap), dbudget}))
            << where;
        if (prefills) {
          ASSERT_GE(planned_prefills, 1) << where;
        }
        if (static_cast<size_t>(planned_decoders) < decoders) {
          ++contended_decode_steps;
          int most = 0;
          for (const auto& [t, n] : decode_slots) most = std::max(most, n);
          for (const auto& [t, n] : decoders_of) {
            const int slots = decode_slots.count(t) ? decode_slots.at(t) : 0;
            if (slots < n) {
              ASSERT_GE(slots, most - 2) << where << " tenant " << t;
            }
          }
        }
      }
      pop.Consume(plan);
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (!pop.live.contains(it->first)) {
          it = waiting.erase(it);
          continue;
        }
        ASSERT_LE(++it->second, 250) << "session " << it->first << " starved, " << where;
        ++it;
      }
    }
  }
  EXPECT_GT(contended_decode_steps, 100);
}

}  // namespace
}  // namespace streamd
