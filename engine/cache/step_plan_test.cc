// PlanStep against a plain recomputation from the caches: every token's session, text
// position, cache position and logits row; every session's block table as the cache holds it;
// failed plans leave nothing placed, and Commit/Abort leave the caches as the contract says.
#include "engine/cache/step_plan.h"

#include <gtest/gtest.h>

#include <random>

namespace streamd {
namespace {

TEST(StepPlanTest, DescribesEveryTokenAndTableAsTheCachesDo) {
  auto pool = BlockPool::Create({1, 1, 4}, 7, 1 << 22);
  ASSERT_TRUE(pool.ok());
  std::random_device rd;
  const uint32_t seed = rd();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<std::unique_ptr<SessionCache>> caches;
  for (int i = 0; i < 6; ++i) {
    auto c = SessionCache::Create(pool->get(), {CacheMode::kSink, i % 3 * 2, 20 + 9 * i, 40}, 4096);
    ASSERT_TRUE(c.ok());
    caches.push_back(std::move(c).value());
  }
  for (int step = 0; step < 200; ++step) {
    std::vector<SequenceInput> seqs;
    std::vector<int32_t> tokens;
    for (auto& c : caches) {
      if (rng() % 3 == 0) continue;
      const int32_t n = rng() % 2 ? 1 : 1 + static_cast<int32_t>(rng() % 40);
      seqs.push_back({c.get(), n, rng() % 4 == 0 ? LogitsMode::kAll : LogitsMode::kLast});
      for (int32_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(rng() % 100));
    }
    if (seqs.empty()) continue;
    std::vector<int64_t> seen_before;
    for (const SequenceInput& s : seqs) seen_before.push_back(s.cache->tokens_seen());
    auto plan = PlanStep(tokens, seqs, 100);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_EQ(plan->n_tokens(), static_cast<int32_t>(tokens.size()));
    ASSERT_EQ(plan->seqs.size(), seqs.size());
    int32_t t = 0, row = 0, max_keys = 0;
    bool decode = true;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const SessionCache& c = *seqs[s].cache;
      ASSERT_EQ(c.placed(), seqs[s].n_tokens);
      const PlannedSequence& ps = plan->seqs[s];
      EXPECT_EQ(ps.first_token, t);
      EXPECT_EQ(ps.n_tokens, seqs[s].n_tokens);
      EXPECT_EQ(ps.first_position, seen_before[s]);
      // The plan's table reads the same blocks as the cache's own.
      const kernels::SinkWindowTable mine = c.table(), planned = plan->HostTable(s);
      for (int64_t i = 0; i < static_cast<int64_t>(c.sink_block_ids().size()); ++i) {
        EXPECT_EQ(planned.sink_blocks[i], mine.sink_blocks[i]);
      }
      for (int64_t i = 0; i < static_cast<int64_t>(c.window_block_ids().size()); ++i) {
        EXPECT_EQ(planned.window_blocks[i], mine.window_blocks[i]);
      }
      EXPECT_EQ(planned.first_window_block, mine.first_window_block);
      max_keys = std::max(max_keys, c.spec().sinks + c.spec().window);
      decode = decode && seqs[s].n_tokens == 1;
      for (int32_t i = 0; i < seqs[s].n_tokens; ++i, ++t) {
        const int64_t p = seen_before[s] + i;
        EXPECT_EQ(plan->seq_of[t], static_cast<int32_t>(s));
        EXPECT_EQ(plan->position[t], p);
        EXPECT_EQ(plan->cache_position[t], mine.CachePosition(p));
        EXPECT_EQ(plan->tokens[t], tokens[t]);
        const bool wants = seqs[s].logits == LogitsMode::kAll || i + 1 == seqs[s].n_tokens;
        EXPECT_EQ(plan->out_row[t], wants ? row++ : -1);
      }
    }
    EXPECT_EQ(plan->n_out, row);
    EXPECT_EQ(plan->max_keys, max_keys);
    EXPECT_EQ(plan->decode, decode);
    if (rng() % 5 == 0) {
      AbortStep(seqs);
      for (size_t s = 0; s < seqs.size(); ++s) {
        EXPECT_EQ(seqs[s].cache->tokens_seen(), seen_before[s]);
        EXPECT_LE(seqs[s].cache->blocks_held(), seqs[s].cache->bound_blocks());
      }
    } else {
      CommitStep(seqs);
      for (size_t s = 0; s < seqs.size(); ++s) {
        EXPECT_EQ(seqs[s].cache->tokens_seen(), seen_before[s] + seqs[s].n_tokens);
      }
    }
  }
}

TEST(StepPlanTest, BadBatchesPlaceNothingAndNameTheProblem) {
  auto pool = BlockPool::Create({1, 1, 4}, 16, 1 << 20);
  ASSERT_TRUE(pool.ok());
  auto a = SessionCache::Create(pool->get(), {CacheMode::kSink, 4, 30, 8}, 4096);
  auto b = SessionCache::Create(pool->get(), {CacheMode::kSink, 4, 30, 8}, 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_EQ(PlanStep({}, {}, 10).status().code(), StatusCode::kInvalidArgument);
  const SequenceInput both[] = {{a->get(), 2}, {b->get(), 1}};
  auto bad_id = PlanStep(std::vector<int32_t>{1, 2, 10}, both, 10);
  EXPECT_NE(bad_id.status().message().find("token id 10 at index 2"), std::string::npos);
  const SequenceInput twice[] = {{a->get(), 2}, {a->get(), 1}};
  EXPECT_NE(PlanStep(tokens, twice, 10).status().message().find("share one cache"),
            std::string::npos);
  const SequenceInput miscounted[] = {{a->get(), 2}, {b->get(), 2}};
  EXPECT_NE(PlanStep(tokens, miscounted, 10).status().message().find("hold 4 tokens"),
            std::string::npos);
  const SequenceInput over[] = {{a->get(), 9}};
  EXPECT_NE(PlanStep(std::vector<int32_t>(9, 1), over, 10).status().message().find("chunk limit"),
            std::string::npos);
  EXPECT_EQ((*a)->placed(), 0);
  EXPECT_EQ((*b)->placed(), 0);
  EXPECT_EQ(pool->get()->used_blocks(), 0);
  // A chunk that is already placed fails the second plan, which gives back what it placed.
  const SequenceInput first[] = {{b->get(), 1}};
  ASSERT_TRUE(PlanStep(std::vector<int32_t>{1}, first, 10).ok());
  auto second = PlanStep(tokens, both, 10);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*a)->placed(), 0);
  EXPECT_EQ((*b)->placed(), 1);
}

}  // namespace
}  // namespace streamd
