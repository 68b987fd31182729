// The local layers' own cache (session_cache.h, "Local layers"), without a model: what it keeps
// (LocalSpec), that its queries see exactly the keys a span-limited query of the shared cache
// sees, that no key they see is overwritten, its bound and headroom, and that restores, rewinds,
// forks and errors cover both caches. The logits side is engine/backends/cpu/
// local_layer_cache_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "engine/cache/kv_image.h"
#include "engine/cache/kv_scales.h"
#include "engine/cache/session_cache.h"

namespace streamd {
namespace {

constexpr int32_t kLocalContext = 1 << 16;

// A model of 3 layers, the first two local.
std::shared_ptr<const LayerSplit> TwoLocalOne() {
  return std::make_shared<LayerSplit>(LayerSplit::Of({1, 1, 0}));
}

std::unique_ptr<BlockPool> LayersPool(int32_t layers, int32_t block, int64_t blocks = 4096) {
  const KvShape shape{layers, 1, 4};
  auto pool = BlockPool::Create(shape, block, blocks * BlockPool::BlockBytes(shape, block));
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(*pool);
}

// The text positions a query at p reads through `table`, in order.
std::vector<int64_t> KeysSeen(const kernels::SinkWindowTable& table, int64_t p) {
  std::vector<int64_t> keys;
  for (int64_t j = table.SinkBegin(p); j < table.VisibleSinks(p); ++j) keys.push_back(j);
  for (int64_t j = table.WindowStart(p); j <= p; ++j) keys.push_back(j);
  return keys;
}

TEST(LocalLayersTest, LocalSpecKeepsWhatASpanLimitedQueryReads) {
  // A window past the span: a window of the span, no sinks.
  CacheSpec local = SessionCache::LocalSpec({CacheMode::kSink, 4, 1020, 64}, 512);
  EXPECT_EQ(local.mode, CacheMode::kWindow);
  EXPECT_EQ(local.sinks, 0);
  EXPECT_EQ(local.window, 512);
  EXPECT_EQ(local.max_chunk, 64);
  // A window under it keeps the spec.
  local = SessionCache::LocalSpec({CacheMode::kSink, 4, 100, 64}, 512);
  EXPECT_EQ(local.mode, CacheMode::kSink);
  EXPECT_EQ(local.sinks, 4);
  EXPECT_EQ(local.window, 100);
  // A dense cache (the whole context) slides with the span.
  local =
      SessionCache::LocalSpec(SessionCache::Effective({CacheMode::kDense, 0, 0, 64}, 8192), 512);
  EXPECT_EQ(local.mode, CacheMode::kWindow);
  EXPECT_EQ(local.window, 512);
}

struct LocalCase {
  CacheMode mode;
  int32_t sinks, window, span, block, chunk;
};

class LocalLayersStreamTest : public ::testing::TestWithParam<LocalCase> {};

// Random chunks over a long stream (some given back in part): every query of every chunk sees
// the same positions through the local cache as through the main cache with the span, each of
// those positions is still where it was written, and both caches stay within their bounds at
// rest and within the headroom the geometry predicted during a chunk.
TEST_P(LocalLayersStreamTest, QueriesSeeTheSpanLimitedKeysAndNothingIsOverwritten) {
  const LocalCase c = GetParam();
  std::unique_ptr<BlockPool> main = LayersPool(1, c.block);
  std::unique_ptr<BlockPool> local_pool = LayersPool(2, c.block);
  auto cache_or = SessionCache::Create(main.get(), {c.mode, c.sinks, c.window, c.chunk},
                                       kLocalContext, {local_pool.get(), c.span, TwoLocalOne()});
  ASSERT_TRUE(cache_or.ok()) << cache_or.status().ToString();
  SessionCache& cache = **cache_or;
  const SessionCache& local = *cache.local();
  EXPECT_LE(local.bound_blocks(), cache.bound_blocks());

  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> chunk(1, c.chunk);
  std::vector<std::pair<int32_t, int32_t>> written;  // local (block, slot) by position
  const int64_t total = c.mode == CacheMode::kDense ? 3000 : 8LL * c.window + 5LL * c.span;
  while (cache.tokens_seen() < total) {
    const int32_t n = chunk(rng);
    const CacheGeometry g = cache.geometry();
    ASSERT_TRUE(cache.BeginChunk(std::vector<int32_t>(n, 7)).ok());
    const int32_t headroom = g.HeadroomForChunk(n);
    EXPECT_LE(cache.blocks_held(), cache.bound_blocks() + headroom);
    EXPECT_LE(local.blocks_held(), local.bound_blocks() + headroom);
    kernels::SinkWindowTable spanned = cache.table();
    spanned.span = c.span;
    const kernels::SinkWindowTable table = cache.local_table();
    const int64_t first = cache.tokens_seen();
    for (int64_t p = first; p < first + n; ++p) {
      int32_t block, slot;
      table.Locate(p, &block, &slot);
      written.emplace_back(block, slot);
      const std::vector<int64_t> keys = KeysSeen(table, p);
      ASSERT_EQ(keys, KeysSeen(spanned, p)) << "query at " << p;
      for (int64_t j : keys) {
        table.Locate(j, &block, &slot);
        ASSERT_EQ(std::make_pair(block, slot), written[j]) << "key " << j << " of query " << p;
      }
    }
    const int32_t kept = n > 1 && chunk(rng) == 1 ? n - 1 : n;  // sometimes one given back
    cache.Commit(kept);
    written.resize(static_cast<size_t>(cache.tokens_seen()));
    EXPECT_LE(cache.blocks_held(), cache.bound_blocks());
    EXPECT_LE(local.blocks_held(), local.bound_blocks());
    EXPECT_EQ(local.tokens_seen(), cache.tokens_seen());
  }
  if (c.window > c.span || c.mode == CacheMode::kDense) {
    EXPECT_LT(local.blocks_held(), cache.blocks_held());
  }
  cache_or->reset();
  EXPECT_EQ(main->used_blocks(), 0);
  EXPECT_EQ(local_pool->used_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LocalLayersStreamTest,
                         ::testing::Values(LocalCase{CacheMode::kSink, 4, 1020, 512, 16, 64},
                                           LocalCase{CacheMode::kSink, 4, 37, 13, 4, 9},
                                           LocalCase{CacheMode::kSink, 5, 9, 13, 4, 7},
                                           LocalCase{CacheMode::kWindow, 0, 50, 17, 8, 20},
                                           LocalCase{CacheMode::kDense, 0, 0, 13, 16, 30}));

TEST(LocalLayersTest, RestoreRewindAndForkCoverBothCaches) {
  std::unique_ptr<BlockPool> main = LayersPool(1, 4);
  std::unique_ptr<BlockPool> local_pool = LayersPool(2, 4);
  const CacheSpec spec{CacheMode::kSink, 4, 40, 8};
  const LocalLayers local{local_pool.get(), 10, TwoLocalOne()};
  auto cache = SessionCache::Create(main.get(), spec, kLocalContext, local);
  ASSERT_TRUE(cache.ok());
  for (int i = 0; i < 20; ++i) {
    std::vector<int32_t> ids(5);
    for (int32_t k = 0; k < 5; ++k) ids[k] = i * 5 + k;
    ASSERT_TRUE((*cache)->BeginChunk(ids).ok());
    (*cache)->Commit(5);
  }
  // 100 tokens seen: the local cache holds the last 9 (positions 91..99).
  const std::vector<int32_t> ids = (*cache)->cached_ids();
  const std::vector<int32_t> local_ids = (*cache)->local()->cached_ids();
  EXPECT_EQ(local_ids, std::vector<int32_t>(ids.end() - 9, ids.end()));

  // A restore rebuilds both, the local one from the main one's ids.
  auto restored = SessionCache::Create(main.get(), spec, kLocalContext, local);
  ASSERT_TRUE(restored.ok());
  ASSERT_TRUE((*restored)->Restore(100, ids).ok());
  EXPECT_EQ((*restored)->local()->cached_ids(), local_ids);
  EXPECT_EQ((*restored)->local()->blocks_held(), (*cache)->local()->blocks_held());

  // The local window limits how far a rewind can go, and says so.
  const int64_t max_rewind = (*cache)->MaxRewind();
  EXPECT_LE(max_rewind, (*cache)->local()->MaxRewind());
  EXPECT_FALSE((*cache)->CanRewind(max_rewind + 1));
  const Status too_far = (*cache)->Rewind(max_rewind + 1);
  EXPECT_EQ(too_far.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(too_far.message().find("at most " + std::to_string(max_rewind)), std::string::npos)
      << too_far.message();
  ASSERT_TRUE((*cache)->Rewind(max_rewind).ok());
  EXPECT_EQ((*cache)->local()->tokens_seen(), 100 - max_rewind);

  // A fork shares the blocks of both pools.
  const int32_t local_used = local_pool->used_blocks();
  auto fork = (*cache)->Fork();
  ASSERT_TRUE(fork.ok());
  EXPECT_EQ(local_pool->used_blocks(), local_used);
  EXPECT_EQ((*fork)->local()->shared_blocks(), (*fork)->local()->blocks_held());
  EXPECT_EQ((*fork)->local_span(), 10);
}

TEST(LocalLayersTest, CreateRefusesPoolsThatDoNotFit) {
  std::unique_ptr<BlockPool> main = LayersPool(1, 4);
  std::unique_ptr<BlockPool> local4 = LayersPool(2, 4);
  std::unique_ptr<BlockPool> local8 = LayersPool(2, 8);
  const CacheSpec spec{CacheMode::kSink, 4, 40, 8};
  const auto error = [&](const LocalLayers& local) {
    auto cache = SessionCache::Create(main.get(), spec, kLocalContext, local);
    EXPECT_FALSE(cache.ok());
    return cache.ok() ? std::string() : std::string(cache.status().message());
  };
  EXPECT_NE(error({local8.get(), 10, TwoLocalOne()}).find("blocks of 8 tokens"), std::string::npos);
  EXPECT_NE(error({local4.get(), 0, TwoLocalOne()}).find("span = 0"), std::string::npos);
  // The split says one local layer; the pool holds two.
  const auto one_local = std::make_shared<LayerSplit>(LayerSplit::Of({1, 0}));
  EXPECT_NE(error({local4.get(), 10, one_local}).find("local and other layers"), std::string::npos);
  EXPECT_NE(error({local4.get(), 10, nullptr}).find("local and other layers"), std::string::npos);
}

// K/V images of a split cache hold every model layer: written from an f16 or an int8 image, a
// split cache reads back what a shared cache does, except the local layers' rows their window
// no longer holds, which are zeros.
TEST(LocalLayersTest, ImagesKeepEveryLayerAndTheLocalRowsTheWindowHolds) {
  std::unique_ptr<BlockPool> shared_pool = LayersPool(3, 4);
  std::unique_ptr<BlockPool> main = LayersPool(1, 4);
  std::unique_ptr<BlockPool> local_pool = LayersPool(2, 4);
  const CacheSpec spec{CacheMode::kSink, 2, 20, 8};
  const int32_t span = 6;
  const int64_t seen = 50;
  std::vector<int32_t> ids(21);  // 2 sinks + the 19 window tokens the next query sees
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(100 + i);

  std::mt19937 rng(std::random_device{}());
  KvImage f16;
  f16.n_layers = 3;
  f16.n_kv_heads = 1;
  f16.head_dim = 4;
  f16.n_tokens = static_cast<int64_t>(ids.size());
  f16.data.resize(static_cast<size_t>(f16.elements()));
  for (uint16_t& x : f16.data) x = static_cast<uint16_t>(0x3000 + rng() % 0x0800);  // finite
  KvImage int8 = f16;
  int8.data.clear();
  int8.dtype = kernels::KvDtype::kInt8;
  int8.data_i8.resize(static_cast<size_t>(int8.elements()));
  for (int8_t& x : int8.data_i8) x = static_cast<int8_t>(static_cast<int32_t>(rng() % 255) - 127);
  std::vector<float> k(12), v(12);
  for (float& x : k) x = 0.01f + 0.001f * static_cast<float>(rng() % 100);
  for (float& x : v) x = 0.01f + 0.001f * static_cast<float>(rng() % 100);
  auto scales = KvInt8Scales::Make(3, 1, 4, k, v);
  ASSERT_TRUE(scales.ok());
  int8.scales = *scales;

  for (const KvImage* image : {&f16, &int8}) {
    auto shared = SessionCache::Create(shared_pool.get(), spec, kLocalContext);
    auto split = SessionCache::Create(main.get(), spec, kLocalContext,
                                      {local_pool.get(), span, TwoLocalOne()});
    ASSERT_TRUE(shared.ok() && split.ok());
    ASSERT_TRUE((*shared)->Restore(seen, ids).ok());
    ASSERT_TRUE((*split)->Restore(seen, ids).ok());
    ASSERT_TRUE(WriteCacheKv(**shared, *image).ok());
    const Status written = WriteCacheKv(**split, *image);
    ASSERT_TRUE(written.ok()) << written.ToString();
    auto expected = ReadCacheKv(**shared);
    auto got = ReadCacheKv(**split);
    ASSERT_TRUE(expected.ok() && got.ok());
    ASSERT_EQ(got->n_layers, 3);
    // The local cache holds positions 45..49: the last 5 of the 21 cached.
    const CachedSpan cached = (*split)->cached_span();
    for (int32_t layer = 0; layer < 2; ++layer) {
      for (int32_t kv = 0; kv < 2; ++kv) {
        for (int64_t i = 0; i < cached.size(); ++i) {
          if (cached.Position(i) > seen - span) continue;
          uint16_t* row = expected->data.data() + expected->Offset(layer, kv, 0, i);
          std::fill(row, row + 4, uint16_t{0});
        }
      }
    }
    EXPECT_EQ(got->data, expected->data) << (image == &f16 ? "f16" : "int8");
    EXPECT_NE(got->data, std::vector<uint16_t>(got->data.size(), 0));
  }
}

}  // namespace
}  // namespace streamd
