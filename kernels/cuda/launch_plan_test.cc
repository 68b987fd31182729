// Host-side planning helpers of the attention launchers (no device needed: runs everywhere).
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

TEST(LaunchPlanTest, DecodeSplitsCoverEveryKeyWithEnoughKeysPerSplit) {
  for (int32_t tokens : {1, 3, 16, 64, 256}) {
    for (int32_t kv_heads : {1, 3, 8}) {
      for (int32_t keys : {1, 5, 64, 65, 1024, 4096, 8192}) {
        int32_t per = 0;
        const int32_t splits = ChooseDecodeSplits(tokens, kv_heads, keys, 132, &per);
        EXPECT_GE(splits, 1);
        EXPECT_GE(static_cast<int64_t>(splits) * per, keys);
        EXPECT_LT(static_cast<int64_t>(splits - 1) * per, keys) << "an empty split";
        if (splits > 1) {
          EXPECT_GE(per, 64);
        }
      }
    }
  }
  int32_t per = 0;
  EXPECT_GT(ChooseDecodeSplits(1, 8, 4096, 132, &per), 1);    // one session still fills the GPU
  EXPECT_EQ(ChooseDecodeSplits(256, 8, 1024, 132, &per), 1);  // enough blocks already
}

// A prefill block holds at most 64 (query, head) rows (four warps of 16) and 16 heads.
TEST(LaunchPlanTest, PrefillTilesHoldAtMostSixtyFourRows) {
  for (int32_t group : {1, 2, 3, 4, 8, 16, 32}) {
    const int32_t q = PrefillTileQueries(group);
    EXPECT_GE(q, 4);
    EXPECT_LE(q * std::min(group, 16), 64);
    EXPECT_GT((q + 1) * std::min(group, 16), 64) << "a tile as large as the rows allow";
  }
  EXPECT_EQ(DecodeAttentionWorkspaceBytes(10, 4, 64, 1), 0u);
  EXPECT_EQ(DecodeAttentionWorkspaceBytes(10, 4, 64, 3), 10u * 4 * 3 * 66 * sizeof(float));
}

}  // namespace
}  // namespace streamd::kernels::cuda
