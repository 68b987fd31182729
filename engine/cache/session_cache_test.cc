// Bookkeeping of the sink + window cache, without a model: the block bound at every step, that
// no token a query can see is ever overwritten, and exact pool accounting.
#include "engine/cache/session_cache.h"

#include <map>
#include <random>
#include <set>
#include <utility>

#include <gtest/gtest.h>

namespace streamd {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Case {
  int32_t sinks, window, block, chunk;
};

class SessionCacheBoundTest : public ::testing::TestWithParam<Case> {};

TEST_P(SessionCacheBoundTest, BoundHoldsAndVisibleTokensAreNeverOverwritten) {
  const Case c = GetParam();
  auto pool_or = BlockPool::Create({1, 1, 4}, c.block, 1 << 24);
  ASSERT_TRUE(pool_or.ok());
  BlockPool& pool = **pool_or;
  const int32_t free_at_start = pool.free_blocks();
  {
    auto cache_or = SessionCache::Create(&pool, {CacheMode::kSink, c.sinks, c.window, c.chunk},
                                         1 << 20);
    ASSERT_TRUE(cache_or.ok()) << cache_or.status().ToString();
    SessionCache& cache = **cache_or;
    const int64_t bound = CeilDiv(c.sinks, c.block) + CeilDiv(c.window, c.block) + 1 +
                          CeilDiv(c.chunk - 1, c.block);
    EXPECT_LE(cache.max_blocks(), bound);

    std::mt19937 rng(c.sinks * 1000 + c.window * 10 + c.block);
    std::uniform_int_distribution<int32_t> chunk(1, c.chunk);
    // Where each text position was written: (block, slot).
    std::map<int64_t, std::pair<int32_t, int32_t>> written;
    const int64_t total = 12LL * c.window + 3 * c.chunk;
    while (cache.tokens_seen() < total) {
      const int32_t n = chunk(rng);
      ASSERT_TRUE(cache.Reserve(n).ok());
      ASSERT_LE(cache.blocks_held(), cache.max_blocks());
      ASSERT_LE(cache.blocks_held(), bound);
      const kernels::SinkWindowTable t = cache.table();
      const int64_t first = cache.tokens_seen();
      for (int64_t p = first; p < first + n; ++p) {
        int32_t b, s;
        t.Locate(p, &b, &s);
        written[p] = {b, s};
      }
      // Every position visible to any query of the chunk still maps where it was written,
      // and no two of them share a slot.
      std::set<std::pair<int32_t, int32_t>> slots;
      for (int64_t p = first; p < first + n; ++p) {
        const int64_t ns = t.VisibleSinks(p);
        // The query's place in the rebuilt cache: after its sinks and the window before it.
        const int64_t expected_cp = p < c.sinks ? p : ns + (p - t.WindowStart(p));
        ASSERT_EQ(t.CachePosition(p), expected_cp);
        ASSERT_LE(t.CachePosition(p), c.sinks + c.window - 1);
        for (int64_t j = 0; j < ns; ++j) {
          int32_t b, s;
          t.Locate(j, &b, &s);
          ASSERT_EQ(std::make_pair(b, s), written[j]) << "sink " << j << " moved";
        }
        for (int64_t j = t.WindowStart(p); j <= p; ++j) {
          int32_t b, s;
          t.Locate(j, &b, &s);
          ASSERT_EQ(std::make_pair(b, s), written[j])
              << "position " << j << " (visible to " << p << ") was overwritten";
        }
      }
      for (int64_t j = 0; j < std::min<int64_t>(first + n, c.sinks); ++j) slots.insert(written[j]);
      for (int64_t j = t.WindowStart(first); j < first + n; ++j) {
        if (j < c.sinks) continue;
        ASSERT_TRUE(slots.insert(written[j]).second) << "two live positions share a slot";
      }
      cache.Commit(n);
      ASSERT_EQ(cache.tokens_cached(),
                std::min<int64_t>(cache.tokens_seen(), c.sinks) +
                    std::min<int64_t>(std::max<int64_t>(cache.tokens_seen() - c.sinks, 0), c.window));
      ASSERT_EQ(cache.tokens_evicted(), cache.tokens_seen() - cache.tokens_cached());
      ASSERT_EQ(pool.used_blocks(), cache.blocks_held());
    }
  }
  EXPECT_EQ(pool.free_blocks(), free_at_start) << "closing the session returns every block";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SessionCacheBoundTest,
    ::testing::Values(Case{4, 1020, 16, 1}, Case{4, 1020, 16, 512}, Case{4, 37, 16, 23},
                      Case{4, 37, 7, 23}, Case{0, 37, 3, 5}, Case{4, 1, 1, 1}, Case{5, 13, 3, 40},
                      Case{16, 50, 16, 16}, Case{1, 100, 7, 1}));

TEST(SessionCacheTest, ValidatesSpecNamingFieldAndLimit) {
  auto pool = BlockPool::Create({1, 1, 4}, 16, 1 << 20);
  ASSERT_TRUE(pool.ok());
  auto neg = SessionCache::Create(pool->get(), {CacheMode::kSink, -1, 100, 16}, 8192);
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(neg.status().message().find("sinks = -1"), std::string::npos);
  auto w0 = SessionCache::Create(pool->get(), {CacheMode::kSink, 4, 0, 16}, 8192);
  EXPECT_NE(w0.status().message().find("window = 0 must be >= 1"), std::string::npos);
  auto big = SessionCache::Create(pool->get(), {CacheMode::kSink, 4, 8190, 16}, 8192);
  EXPECT_NE(big.status().message().find("over the model context of 8192"), std::string::npos);
  auto pool_small = BlockPool::Create({1, 1, 4}, 16, 16 * 2 * 4 * 2 * 10);  // 10 blocks
  ASSERT_TRUE(pool_small.ok());
  auto over = SessionCache::Create(pool_small->get(), {CacheMode::kSink, 4, 1020, 16}, 8192);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("the whole pool has 10"), std::string::npos);
  EXPECT_FALSE(ParseCacheMode("sliding").ok());
  EXPECT_EQ(*ParseCacheMode("window"), CacheMode::kWindow);
}

TEST(SessionCacheTest, DenseCacheStopsAtTheContext) {
  auto pool = BlockPool::Create({1, 1, 4}, 16, 1 << 20);
  ASSERT_TRUE(pool.ok());
  auto cache = SessionCache::Create(pool->get(), {CacheMode::kDense, 4, 1, 8}, 40);
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ((*cache)->spec().sinks, 0);
  EXPECT_EQ((*cache)->spec().window, 40);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE((*cache)->Reserve(8).ok());
    (*cache)->Commit(8);
  }
  Status s = (*cache)->Reserve(1);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*cache)->tokens_evicted(), 0);
  EXPECT_EQ((*cache)->Reserve(9).code(), StatusCode::kInvalidArgument);  // over max_chunk
}

}  // namespace
}  // namespace streamd
