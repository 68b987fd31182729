#include "engine/cache/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace streamd {
namespace {

const KvShape kShape{30, 3, 64};  // SmolLM2-135M

TEST(BlockPoolTest, SizesFollowTheLayout) {
  auto pool = BlockPool::Create(kShape, 16, 64 << 20);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  // bytes per token = layers * 2 (K, V) * kv heads * head_dim * 2 bytes (f16)
  EXPECT_EQ((*pool)->bytes_per_token(), 30 * 2 * 3 * 64 * 2);
  EXPECT_EQ((*pool)->bytes_per_block(), 16 * 30 * 2 * 3 * 64 * 2);
  EXPECT_EQ((*pool)->total_blocks(), (64 << 20) / (*pool)->bytes_per_block());
  EXPECT_EQ((*pool)->total_bytes(), (*pool)->total_blocks() * (*pool)->bytes_per_block());
  const kernels::KvPoolLayout& l = (*pool)->layout();
  EXPECT_EQ(l.Offset(1, 0, 0, 0), l.block_elems());
  EXPECT_EQ(l.Offset(0, 1, 0, 0), 3 * 16 * 64);  // V after the K of every head
  EXPECT_EQ(l.Offset(0, 0, 2, 5), 2 * 16 * 64 + 5 * 64);
}

TEST(BlockPoolTest, AllocatesEveryBlockOnceAndAccountsExactly) {
  auto pool_or = BlockPool::Create({2, 1, 8}, 3, 10 * 2 * 2 * 1 * 3 * 8 * 2);
  ASSERT_TRUE(pool_or.ok());
  BlockPool& pool = **pool_or;
  ASSERT_EQ(pool.total_blocks(), 10);
  std::set<int32_t> seen;
  for (int i = 0; i < 10; ++i) {
    const int32_t b = pool.Allocate();
    ASSERT_GE(b, 0);
    EXPECT_TRUE(seen.insert(b).second) << "block " << b << " handed out twice";
    EXPECT_EQ(pool.used_blocks(), i + 1);
    EXPECT_EQ(pool.free_blocks(), 10 - i - 1);
  }
  EXPECT_EQ(pool.Allocate(), -1);
  for (int32_t b : seen) pool.Free(b);
  EXPECT_EQ(pool.free_blocks(), 10);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(BlockPoolTest, RejectsBadSizesNamingTheLimit) {
  auto a = BlockPool::Create(kShape, 0, 1 << 20);
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("block_size = 0 is outside [1, 256]"), std::string::npos);
  auto b = BlockPool::Create(kShape, 300, 1 << 20);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  auto c = BlockPool::Create(kShape, 16, 1000);
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("1000 bytes"), std::string::npos);
  EXPECT_FALSE(BlockPool::BudgetFromFraction(0.0).ok());
  EXPECT_FALSE(BlockPool::BudgetFromFraction(1.5).ok());
  auto f = BlockPool::BudgetFromFraction(0.01);
  ASSERT_TRUE(f.ok());
  EXPECT_GT(*f, 0);
}

// Storage a backend supplies (the CUDA backend's is device memory): asked for exactly the
// pool's bytes, its errors passed through, its kind reported.
class FakeDeviceStorage final : public PoolStorage {
 public:
  explicit FakeDeviceStorage(int64_t bytes) : bytes_(static_cast<size_t>(bytes) / 2) {}
  uint16_t* data() override { return bytes_.data(); }
  bool host_accessible() const override { return false; }

 private:
  std::vector<uint16_t> bytes_;
};

TEST(BlockPoolTest, StorageIsPluggable) {
  int64_t asked = 0;
  const PoolStorageFactory fake = [&](int64_t bytes) -> StatusOr<std::unique_ptr<PoolStorage>> {
    asked = bytes;
    return std::unique_ptr<PoolStorage>(new FakeDeviceStorage(bytes));
  };
  auto pool = BlockPool::Create(kShape, 16, 10 * BlockPool::BlockBytes(kShape, 16), fake);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(asked, (*pool)->total_bytes());
  EXPECT_FALSE((*pool)->host_accessible());
  EXPECT_EQ((*pool)->total_blocks(), 10);
  EXPECT_NE((*pool)->Allocate(), -1);

  auto host = BlockPool::Create(kShape, 16, 1 << 20);
  ASSERT_TRUE(host.ok());
  EXPECT_TRUE((*host)->host_accessible());

  const PoolStorageFactory full = [](int64_t bytes) -> StatusOr<std::unique_ptr<PoolStorage>> {
    return ResourceExhaustedError("device 0 (fake): " + std::to_string(bytes) +
                                  " bytes do not fit");
  };
  auto failed = BlockPool::Create(kShape, 16, 1 << 20, full);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(failed.status().message().find("device 0 (fake)"), std::string::npos);
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  auto pool = BlockPool::Create({1, 1, 8}, 4, 1 << 16);
  ASSERT_TRUE(pool.ok());
  const int32_t b = (*pool)->Allocate();
  (*pool)->Free(b);
  EXPECT_DEATH((*pool)->Free(b), "not allocated");
}

// ReadBlocks/WriteBlocks move whole blocks, every layer, in [ids][layers][block_elems] order,
// and touch nothing else of the pool.
TEST(BlockPoolTest, BlockCopiesMoveEveryLayerOfTheNamedBlocksOnly) {
  auto pool_or = BlockPool::Create({3, 2, 4}, 5, 9 * 3 * 2 * 2 * 5 * 4 * 2);
  ASSERT_TRUE(pool_or.ok());
  BlockPool& pool = **pool_or;
  ASSERT_EQ(pool.total_blocks(), 9);
  const kernels::KvPoolLayout& l = pool.layout();
  for (int32_t layer = 0; layer < 3; ++layer) {
    uint16_t* base = pool.layer_data(layer);
    for (int64_t e = 0; e < l.layer_elems(); ++e) base[e] = static_cast<uint16_t>(layer * 1000 + e);
  }
  const std::vector<int32_t> ids = {7, 2, 4};
  std::vector<uint16_t> out(ids.size() * 3 * l.block_elems());
  ASSERT_TRUE(pool.ReadBlocks(ids, out.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int32_t layer = 0; layer < 3; ++layer) {
      for (int64_t e = 0; e < l.block_elems(); ++e) {
        ASSERT_EQ(out[(i * 3 + layer) * l.block_elems() + e],
                  static_cast<uint16_t>(layer * 1000 + ids[i] * l.block_elems() + e));
      }
    }
  }
  // Write them back shifted by one block: 7 -> block 1, 2 -> block 3, 4 -> block 5.
  std::vector<uint16_t> before(pool.layer_data(0), pool.layer_data(0) + 3 * l.layer_elems());
  const std::vector<int32_t> targets = {1, 3, 5};
  ASSERT_TRUE(pool.WriteBlocks(targets, out.data()).ok());
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (int32_t b = 0; b < 9; ++b) {
      const auto t = std::find(targets.begin(), targets.end(), b);
      for (int64_t e = 0; e < l.block_elems(); ++e) {
        const uint16_t got = pool.layer_data(layer)[b * l.block_elems() + e];
        const uint16_t want =
            t == targets.end() ? before[layer * l.layer_elems() + b * l.block_elems() + e]
                               : static_cast<uint16_t>(
                                     layer * 1000 + ids[t - targets.begin()] * l.block_elems() + e);
        ASSERT_EQ(got, want) << "layer " << layer << " block " << b << " element " << e;
      }
    }
  }
  EXPECT_EQ(pool.ReadBlocks(std::vector<int32_t>{9}, out.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.WriteBlocks(std::vector<int32_t>{-1}, out.data()).code(),
            StatusCode::kInvalidArgument);
  // A list with a bad id is refused before anything is written: block 0 keeps its values.
  const std::vector<uint16_t> block0(pool.layer_data(0), pool.layer_data(0) + l.block_elems());
  const std::vector<int32_t> bad = {0, 9};
  EXPECT_EQ(pool.WriteBlocks(bad, out.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::equal(block0.begin(), block0.end(), pool.layer_data(0)));
}

}  // namespace
}  // namespace streamd
