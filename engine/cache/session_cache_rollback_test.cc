// Rewind and Fork of the sink + window cache, without a model: a rewound cache holds exactly
// what a cache that never saw the dropped tokens holds (span, ids, rows), the limit after
// eviction, and copy-on-write of shared blocks with exact pool accounting.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/cache/session_cache.h"

namespace streamd {
namespace {

const KvShape kRollbackShape{2, 1, 4};

std::vector<int32_t> Ids(int32_t n, int32_t base) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = base + i;
  return v;
}

// Commits `ids` one chunk of at most `chunk` tokens at a time, writing each token's id into
// its K row (layer 0, slot of its text position) so that rows can be checked.
void Feed(BlockPool& pool, SessionCache& cache, const std::vector<int32_t>& ids, int32_t chunk) {
  for (size_t at = 0; at < ids.size();) {
    const size_t n = std::min<size_t>(chunk, ids.size() - at);
    std::span<const int32_t> part(ids.data() + at, n);
    ASSERT_TRUE(cache.BeginChunk(part).ok());
    const kernels::SinkWindowTable t = cache.table();
    for (size_t i = 0; i < n; ++i) {
      const int64_t p = cache.tokens_seen() + static_cast<int64_t>(i);
      int32_t block = 0, slot = 0;
      t.Locate(p, &block, &slot);
      pool.layer_data(0)[pool.layout().Offset(block, 0, 0, slot)] = static_cast<uint16_t>(part[i]);
    }
    cache.Commit(static_cast<int32_t>(n));
    at += n;
  }
}

// The K row of every cached token, in cache order.
std::vector<uint16_t> Rows(BlockPool& pool, const SessionCache& cache) {
  std::vector<uint16_t> rows;
  const CachedSpan span = cache.cached_span();
  const kernels::SinkWindowTable t = cache.table();
  for (int64_t i = 0; i < span.size(); ++i) {
    int32_t block = 0, slot = 0;
    t.Locate(span.Position(i), &block, &slot);
    rows.push_back(pool.layer_data(0)[pool.layout().Offset(block, 0, 0, slot)]);
  }
  return rows;
}

std::unique_ptr<SessionCache> Make(BlockPool* pool, int32_t sinks, int32_t window) {
  auto c = SessionCache::Create(pool, {CacheMode::kSink, sinks, window, 8}, 1 << 20);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

TEST(SessionCacheRollbackTest, RewindEqualsNeverHavingSeenTheTokens) {
  for (int32_t block : {1, 3, 4, 7}) {
    for (int32_t drop : {0, 1, 5, 9, 12}) {
      SCOPED_TRACE(::testing::Message() << "block " << block << " drop " << drop);
      auto pool = std::move(BlockPool::Create(kRollbackShape, block, 1 << 20)).value();
      const int32_t free0 = pool->free_blocks();
      const std::vector<int32_t> all = Ids(18, 100);  // 18 tokens: no eviction with W = 20
      {
        auto a = Make(pool.get(), 2, 20);
        Feed(*pool, *a, all, 5);
        ASSERT_TRUE(a->Rewind(drop).ok());
        auto b = Make(pool.get(), 2, 20);
        Feed(*pool, *b, std::vector<int32_t>(all.begin(), all.end() - drop), 5);
        EXPECT_EQ(a->tokens_seen(), b->tokens_seen());
        EXPECT_EQ(a->cached_ids(), b->cached_ids());
        EXPECT_EQ(a->blocks_held(), b->blocks_held());
        EXPECT_EQ(Rows(*pool, *a), Rows(*pool, *b));
        // Both go on alike after the rewind.
        Feed(*pool, *a, Ids(30, 500), 4);
        Feed(*pool, *b, Ids(30, 500), 4);
        EXPECT_EQ(a->cached_ids(), b->cached_ids());
        EXPECT_EQ(Rows(*pool, *a), Rows(*pool, *b));
      }
      EXPECT_EQ(pool->free_blocks(), free0);
    }
  }
}

TEST(SessionCacheRollbackTest, AfterEvictionOnlyHeldRowsCanComeBack) {
  auto pool = std::move(BlockPool::Create(kRollbackShape, 4, 1 << 20)).value();
  auto a = Make(pool.get(), 2, 8);
  Feed(*pool, *a, Ids(40, 1), 3);  // evicted long ago
  const int64_t max = a->MaxRewind();
  EXPECT_LT(max, a->tokens_seen());
  EXPECT_TRUE(a->CanRewind(max));
  EXPECT_FALSE(a->CanRewind(max + 1));
  const Status refused = a->Rewind(max + 1);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("at most " + std::to_string(max)), std::string::npos)
      << refused.message();
  EXPECT_EQ(a->tokens_seen(), 40);  // a refused rewind changes nothing
  EXPECT_EQ(a->Rewind(41).code(), StatusCode::kInvalidArgument);
  // Into the sinks is always possible: they are never evicted.
  EXPECT_TRUE(a->CanRewind(39));
  ASSERT_TRUE(a->Rewind(39).ok());
  EXPECT_EQ(a->cached_ids(), std::vector<int32_t>({1}));
  // The largest allowed rewind is exact: compare with a cache that saw only that much.
  auto c = Make(pool.get(), 2, 8);
  Feed(*pool, *c, Ids(40, 1), 3);
  const int64_t m = c->MaxRewind();
  ASSERT_TRUE(c->Rewind(m).ok());
  auto d = Make(pool.get(), 2, 8);
  Feed(*pool, *d, Ids(static_cast<int32_t>(40 - m), 1), 3);
  EXPECT_EQ(c->cached_ids(), d->cached_ids());
  EXPECT_EQ(Rows(*pool, *c), Rows(*pool, *d));
}

TEST(SessionCacheRollbackTest, ForkSharesBlocksAndCopiesOnlyWhatItWrites) {
  auto pool = std::move(BlockPool::Create(kRollbackShape, 4, 1 << 20)).value();
  const int32_t free0 = pool->free_blocks();
  auto parent = Make(pool.get(), 2, 12);
  Feed(*pool, *parent, Ids(11, 10), 5);  // sinks 2 + 9 window tokens: last block partial
  const int32_t held = parent->blocks_held();
  auto fork = std::move(parent->Fork()).value();
  EXPECT_EQ(pool->free_blocks(), free0 - held);  // the fork costs nothing yet
  EXPECT_EQ(fork->shared_blocks(), held);
  EXPECT_EQ(fork->cached_ids(), parent->cached_ids());
  EXPECT_EQ(Rows(*pool, *fork), Rows(*pool, *parent));
  // A fork of the fork shares them too.
  auto grandchild = std::move(fork->Fork()).value();
  EXPECT_EQ(pool->free_blocks(), free0 - held);

  // One token into the shared, partly filled last block: that block alone is copied.
  Feed(*pool, *fork, {900}, 1);
  EXPECT_EQ(pool->free_blocks(), free0 - held - 1);
  Feed(*pool, *parent, {700}, 1);
  EXPECT_EQ(pool->free_blocks(), free0 - held - 2);
  // Each sees its own token, and the grandchild neither.
  auto control = Make(pool.get(), 2, 12);
  Feed(*pool, *control, Ids(11, 10), 5);
  EXPECT_EQ(Rows(*pool, *grandchild), Rows(*pool, *control));
  Feed(*pool, *control, {900}, 1);
  EXPECT_EQ(Rows(*pool, *fork), Rows(*pool, *control));
  EXPECT_EQ(fork->cached_ids(), control->cached_ids());
  control.reset();

  // Close the parent first: the fork and the grandchild keep working on their blocks.
  parent.reset();
  auto control2 = Make(pool.get(), 2, 12);
  Feed(*pool, *control2, Ids(11, 10), 5);
  Feed(*pool, *control2, {900}, 1);
  Feed(*pool, *fork, Ids(40, 300), 3);
  Feed(*pool, *control2, Ids(40, 300), 3);
  EXPECT_EQ(Rows(*pool, *fork), Rows(*pool, *control2));
  // Slid past every shared window block; the sink block (never written again) is still
  // shared with the grandchild.
  EXPECT_EQ(fork->shared_blocks(), static_cast<int32_t>(fork->sink_block_ids().size()));
  control2.reset();
  fork.reset();
  grandchild.reset();
  EXPECT_EQ(pool->free_blocks(), free0);
}

TEST(SessionCacheRollbackTest, RewindOfAForkCopiesBeforeRewriting) {
  auto pool = std::move(BlockPool::Create(kRollbackShape, 4, 1 << 20)).value();
  auto parent = Make(pool.get(), 2, 30);
  Feed(*pool, *parent, Ids(14, 10), 5);
  auto fork = std::move(parent->Fork()).value();
  const std::vector<uint16_t> before = Rows(*pool, *parent);
  ASSERT_TRUE(fork->Rewind(6).ok());
  Feed(*pool, *fork, Ids(6, 800), 2);  // overwrites the rows it gave up, in copies
  EXPECT_EQ(Rows(*pool, *parent), before);
  auto control = Make(pool.get(), 2, 30);
  Feed(*pool, *control, Ids(8, 10), 5);
  Feed(*pool, *control, Ids(6, 800), 2);
  EXPECT_EQ(Rows(*pool, *fork), Rows(*pool, *control));
}

}  // namespace
}  // namespace streamd
