// WriteCacheKv's conversion table for int8 images (kv_image.h): into a pool with the same
// scales the bytes are copied (bit for bit, whatever the block size, also from a second set of
// scales that holds the same numbers); into other scales they are requantized once, through
// f32; into an f16 pool dequantized with the image's scales. Incomplete views are refused.
#include "engine/cache/kv_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/cache/kv_image.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd {
namespace {

constexpr int32_t kLayers = 2, kHeads = 3, kHeadDim = 5;  // an awkward head_dim
const CacheSpec kSpec{CacheMode::kSink, 3, 11, 4};
constexpr int64_t kSeen = 40;  // past eviction: the cache holds the 3 sinks and 10 of the window

std::shared_ptr<const KvInt8Scales> Scales(std::mt19937& rng, float lo, float hi) {
  const size_t n = static_cast<size_t>(kLayers) * kHeads * kHeadDim;
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> k(n), v(n);
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  auto s = KvInt8Scales::Make(kLayers, kHeads, kHeadDim, std::move(k), std::move(v));
  EXPECT_TRUE(s.ok());
  return *s;
}

// A restored cache (kSeen tokens seen) in a fresh pool of `scales` (null: f16) and block size.
struct Restored {
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<SessionCache> cache;
};
Restored Restore(std::shared_ptr<const KvInt8Scales> scales, int32_t block_size) {
  KvShape shape{kLayers, kHeads, kHeadDim};
  if (scales != nullptr) {
    shape.dtype = kernels::KvDtype::kInt8;
    shape.int8_scales = std::move(scales);
  }
  Restored r;
  auto pool = BlockPool::Create(shape, block_size, 64 * BlockPool::BlockBytes(shape, block_size));
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  r.pool = std::move(pool).value();
  (void)r.pool->Allocate();  // other block numbers than a fresh pool's
  auto cache = SessionCache::Create(r.pool.get(), kSpec, 1 << 20);
  EXPECT_TRUE(cache.ok());
  r.cache = std::move(cache).value();
  const int64_t held = CachedSpanOf(kSpec, kSeen).size();
  EXPECT_TRUE(r.cache->Restore(kSeen, std::vector<int32_t>(static_cast<size_t>(held), 1)).ok());
  return r;
}

KvImage RandomInt8Image(std::mt19937& rng, std::shared_ptr<const KvInt8Scales> scales) {
  KvImage image;
  image.n_layers = kLayers;
  image.n_kv_heads = kHeads;
  image.head_dim = kHeadDim;
  image.n_tokens = CachedSpanOf(kSpec, kSeen).size();
  image.dtype = kernels::KvDtype::kInt8;
  image.data_i8.resize(static_cast<size_t>(image.elements()));
  for (int8_t& q : image.data_i8) q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  image.scales = std::move(scales);
  return image;
}

TEST(KvConvertTest, SameScalesCopyTheBytesAcrossBlockSizes) {
  std::mt19937 rng(std::random_device{}());
  const auto scales = Scales(rng, 0.01f, 0.1f);
  const KvImage image = RandomInt8Image(rng, scales);
  // The same numbers in another object: the copy does not depend on sharing the pointer.
  const auto twin = KvInt8Scales::Make(kLayers, kHeads, kHeadDim, scales->k(), scales->v());
  ASSERT_TRUE(twin.ok());
  for (int32_t block : {1, 3, 16}) {
    SCOPED_TRACE("block size " + std::to_string(block));
    Restored r = Restore(block == 3 ? *twin : scales, block);
    ASSERT_TRUE(WriteCacheKv(*r.cache, image).ok());
    auto back = ReadCacheKv(*r.cache);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->dtype, kernels::KvDtype::kInt8);
    EXPECT_EQ(back->data_i8, image.data_i8);
    EXPECT_EQ(*back, image);
  }
}

TEST(KvConvertTest, OtherScalesRequantizeOnce) {
  std::mt19937 rng(std::random_device{}());
  const auto from = Scales(rng, 0.01f, 0.1f);
  const auto to = Scales(rng, 0.02f, 0.05f);  // some values saturate
  const KvImage image = RandomInt8Image(rng, from);
  Restored r = Restore(to, 4);
  ASSERT_TRUE(WriteCacheKv(*r.cache, image).ok());
  auto back = ReadCacheKv(*r.cache);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->scales, to);
  int64_t changed = 0;
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t kv = 0; kv < 2; ++kv) {
      for (int32_t h = 0; h < kHeads; ++h) {
        for (int64_t t = 0; t < image.n_tokens; ++t) {
          for (int32_t c = 0; c < kHeadDim; ++c) {
            const int64_t at = image.Offset(l, kv, h, t) + c;
            const float x = from->scales(l, kv)[h * kHeadDim + c] * image.data_i8[at];
            const float y = x * to->inverses(l, kv)[h * kHeadDim + c];
            const int want = static_cast<int>(std::clamp(std::nearbyint(y), -127.0f, 127.0f));
            ASSERT_EQ(back->data_i8[at], want) << "x " << x << " y " << y;
            changed += back->data_i8[at] != image.data_i8[at];
          }
        }
      }
    }
  }
  EXPECT_GT(changed, 0);
}

TEST(KvConvertTest, F16PoolsTakeTheDequantizedValues) {
  std::mt19937 rng(std::random_device{}());
  const auto scales = Scales(rng, 0.01f, 0.1f);
  const KvImage image = RandomInt8Image(rng, scales);
  auto f16 = DequantizedKv(image);
  ASSERT_TRUE(f16.ok());
  EXPECT_EQ(f16->dtype, kernels::KvDtype::kF16);
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t h = 0; h < kHeads; ++h) {
      const int64_t at = image.Offset(l, 1, h, 2) + 4;
      EXPECT_EQ(f16->data[at],
                kernels::FloatToHalf(scales->scales(l, 1)[h * kHeadDim + 4] * image.data_i8[at]));
    }
  }
  Restored r = Restore(nullptr, 7);
  ASSERT_TRUE(WriteCacheKv(*r.cache, image).ok());
  auto back = ReadCacheKv(*r.cache);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *f16);
  // And back into an int8 pool of the same scales: the int8 values it started from.
  Restored again = Restore(scales, 5);
  ASSERT_TRUE(WriteCacheKv(*again.cache, *back).ok());
  auto i8 = ReadCacheKv(*again.cache);
  ASSERT_TRUE(i8.ok());
  EXPECT_EQ(*i8, image);
}

TEST(KvConvertTest, IncompleteViewsAreRefused) {
  std::mt19937 rng(3);
  const auto scales = Scales(rng, 0.01f, 0.1f);
  Restored r = Restore(nullptr, 4);
  KvImage image = RandomInt8Image(rng, nullptr);
  Status s = WriteCacheKv(*r.cache, image);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int8 K/V without their scales"), std::string::npos) << s.message();
  auto other = KvInt8Scales::Make(kLayers, 1, kHeadDim, std::vector<float>(kLayers * kHeadDim, 1),
                                  std::vector<float>(kLayers * kHeadDim, 1));
  ASSERT_TRUE(other.ok());
  image.scales = *other;
  s = WriteCacheKv(*r.cache, image);
  EXPECT_NE(s.message().find("with scales of 2 x 1 x 5"), std::string::npos) << s.message();
  image.scales = scales;
  image.data_i8.pop_back();
  s = WriteCacheKv(*r.cache, image);
  EXPECT_NE(s.message().find("int8 values, need"), std::string::npos) << s.message();
  EXPECT_FALSE(DequantizedKv(image).ok());
}

}  // namespace
}  // namespace streamd
