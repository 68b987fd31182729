// ReadCacheKv / WriteCacheKv against the pool itself: every cached position's K and V, written
// through the table while the session streamed (sinks, eviction, chunks given back), come out in
// cache order, and land where a restored cache of another block size reads them.
#include "engine/cache/kv_image.h"

#include <gtest/gtest.h>

#include <random>

namespace streamd {
namespace {

const KvShape kImageShape{3, 2, 4};

// The value stored at (layer, K/V, head, text position, dim): distinct everywhere that matters.
uint16_t ValueAt(int32_t layer, int32_t kv, int32_t head, int64_t p, int32_t d) {
  return static_cast<uint16_t>((p * 131 + layer * 17 + kv * 7 + head * 3 + d) & 0xffff);
}

void WritePositions(const SessionCache& cache, int64_t first, int64_t n) {
  BlockPool& pool = *cache.pool();
  const kernels::KvPoolLayout& l = pool.layout();
  const kernels::SinkWindowTable t = cache.table();
  for (int64_t p = first; p < first + n; ++p) {
    int32_t block, slot;
    t.Locate(p, &block, &slot);
    for (int32_t layer = 0; layer < l.n_layers; ++layer) {
      for (int32_t kv = 0; kv < 2; ++kv) {
        for (int32_t h = 0; h < l.n_kv_heads; ++h) {
          uint16_t* row = pool.layer_data(layer) + l.Offset(block, kv, h, slot);
          for (int32_t d = 0; d < l.head_dim; ++d) row[d] = ValueAt(layer, kv, h, p, d);
        }
      }
    }
  }
}

void ExpectHoldsTheSpan(const SessionCache& cache) {
  BlockPool& pool = *cache.pool();
  const kernels::KvPoolLayout& l = pool.layout();
  const kernels::SinkWindowTable t = cache.table();
  const CachedSpan span = cache.cached_span();
  for (int64_t i = 0; i < span.size(); ++i) {
    const int64_t p = span.Position(i);
    int32_t block, slot;
    t.Locate(p, &block, &slot);
    for (int32_t layer = 0; layer < l.n_layers; ++layer) {
      for (int32_t kv = 0; kv < 2; ++kv) {
        for (int32_t h = 0; h < l.n_kv_heads; ++h) {
          const uint16_t* row = pool.layer_data(layer) + l.Offset(block, kv, h, slot);
          for (int32_t d = 0; d < l.head_dim; ++d) {
            ASSERT_EQ(row[d], ValueAt(layer, kv, h, p, d)) << "position " << p;
          }
        }
      }
    }
  }
}

TEST(KvImageTest, RoundTripsInCacheOrderAcrossBlockSizes) {
  std::random_device rd;
  const uint32_t seed = rd();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (const CacheSpec spec :
       {CacheSpec{CacheMode::kSink, 4, 37, 20}, CacheSpec{CacheMode::kSink, 0, 16, 7},
        CacheSpec{CacheMode::kSink, 5, 1, 3}, CacheSpec{CacheMode::kDense, 0, 90, 13}}) {
    SCOPED_TRACE(::testing::Message()
                 << CacheModeName(spec.mode) << " S " << spec.sinks << " W " << spec.window);
    auto pool = BlockPool::Create(kImageShape, 5, 1 << 20);
    ASSERT_TRUE(pool.ok());
    auto cache = SessionCache::Create(pool->get(), spec, 90);
    ASSERT_TRUE(cache.ok());
    const int64_t total = spec.mode == CacheMode::kDense ? 77 : 300;
    while ((*cache)->tokens_seen() < total) {
      const int32_t n = std::min<int32_t>(1 + rng() % spec.max_chunk,
                                          static_cast<int32_t>(total - (*cache)->tokens_seen()));
      const std::vector<int32_t> ids(n, 9);
      ASSERT_TRUE((*cache)->BeginChunk(ids).ok());
      WritePositions(**cache, (*cache)->tokens_seen(), n);
      (*cache)->Commit(rng() % 6 == 0 ? n - 1 : n);
      // Positions given back are rewritten by the next chunk, as the engine does.
    }
    auto image = ReadCacheKv(**cache);
    ASSERT_TRUE(image.ok()) << image.status().ToString();
    const CachedSpan span = (*cache)->cached_span();
    ASSERT_EQ(image->n_tokens, span.size());
    for (int64_t i = 0; i < span.size(); ++i) {
      for (int32_t d = 0; d < kImageShape.head_dim; ++d) {
        ASSERT_EQ(image->data[image->Offset(2, 1, 1, i) + d],
                  ValueAt(2, 1, 1, span.Position(i), d));
      }
    }
    for (int32_t block : {1, 3, 16}) {
      auto other = BlockPool::Create(kImageShape, block, 1 << 20);
      ASSERT_TRUE(other.ok());
      (void)(*other)->Allocate();  // other block numbers than the first pool's
      auto restored = SessionCache::Create(other->get(), spec, 90);
      ASSERT_TRUE(restored.ok());
      ASSERT_TRUE((*restored)->Restore((*cache)->tokens_seen(), (*cache)->cached_ids()).ok());
      ASSERT_TRUE(WriteCacheKv(**restored, *image).ok());
      ExpectHoldsTheSpan(**restored);
      auto again = ReadCacheKv(**restored);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*again, *image);
    }
  }
}

TEST(KvImageTest, ShapesThatDoNotFitAreRefused) {
  auto pool = BlockPool::Create(kImageShape, 4, 1 << 20);
  ASSERT_TRUE(pool.ok());
  auto cache = SessionCache::Create(pool->get(), {CacheMode::kSink, 2, 10, 4}, 90);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Restore(30, std::vector<int32_t>(11, 1)).ok());
  KvImage image;
  image.n_layers = 3;
  image.n_kv_heads = 2;
  image.head_dim = 4;
  image.n_tokens = 10;
  image.data.resize(static_cast<size_t>(image.elements()));
  Status s = WriteCacheKv(**cache, image);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a cache holding 11"), std::string::npos) << s.message();
  image.n_tokens = 11;
  image.head_dim = 8;
  image.data.resize(static_cast<size_t>(image.elements()));
  EXPECT_NE(WriteCacheKv(**cache, image).message().find("does not fit a pool"), std::string::npos);
}

}  // namespace
}  // namespace streamd
