// 8-bit activations (MatMulRows8, PrepareActivations8): the AVX-512 VNNI kernel (on the
// PackForVnni8 copy) and quantizer equal the portable reference bit for bit, and the reference
// stays within the 8-bit quantization bound of a double-precision product of independently
// decoded weights (DequantizeRow) and the original float activations; fresh random inputs over
// awkward shapes (rows not a multiple of the tile, partial groups of 8 tokens, two block chunks).
//
// Bound per output (nb blocks of 32, amax_b the block's largest |x|, u = 2^-24):
//   |out - ref| <= sum_b (amax_b / 254) * sum_{j in b} |w_j| * 1.01 + (2 nb + 8) u M
// with M = sum_b amax_b * sum_{j in b} (|w_j| + 24 |d_b| + |m_b|) as in matmul_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"
#include "tests/support/kernels_cpu_test_util.h"

namespace streamd::kernels::cpu {
namespace {

using testing::RandomWeights;
using testing::SeedTrace;
using testing::TestSeed;

struct Case {
  WeightType type;
  int64_t rows, k, tokens;
};

// RandomActivations (x: [n, k]) whose first token has an all-zero block and a spike (25 times
// the value of largest magnitude of its block): amax 0, and one dominant value.
std::vector<float> ActivationsWithEdges(int64_t n, int64_t k, std::mt19937_64& rng) {
  std::vector<float> x = testing::RandomActivations(n, k, k, rng);
  if (k >= 64) {
    std::fill(x.begin(), x.begin() + 32, 0.0f);
    x[40] = 25.0f * *std::max_element(x.begin() + 32, x.begin() + 64,
                                      [](float a, float b) { return std::fabs(a) < std::fabs(b); });
  }
  return x;
}

TEST(MatMul8Test, QuantizersAgreeBitForBitAndRoundTrip) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const int64_t k = 256;
  const std::vector<float> x = ActivationsWithEdges(1, k, rng);
  std::vector<BlockQ8A> portable(k / kQuantBlock), fast(k / kQuantBlock);
  internal::QuantizeRowQ8APortable(x.data(), k, portable.data());
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    float amax = 0;
    int32_t sum = 0;
    for (int j = 0; j < kQuantBlock; ++j) {
      amax = std::max(amax, std::fabs(x[b * kQuantBlock + j]));
      sum += portable[b].qs[j];
      // Each value is within half a step of its float.
      EXPECT_LE(std::fabs(portable[b].d * portable[b].qs[j] - x[b * kQuantBlock + j]),
                0.5f * portable[b].d * 1.01f + 1e-7f);
    }
    EXPECT_EQ(portable[b].d, amax / 127.0f);
    EXPECT_EQ(portable[b].s, portable[b].d * static_cast<float>(sum));
  }
  if (!IsaSupported(Isa::kAvx512Vnni))
    GTEST_SKIP() << "no AVX-512 VNNI: only the portable quantizer";
  internal::QuantizeRowQ8AAvx512(x.data(), k, fast.data());
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    EXPECT_EQ(fast[b].d, portable[b].d) << "block " << b;
    EXPECT_EQ(fast[b].s, portable[b].s) << "block " << b;
    for (int j = 0; j < kQuantBlock; ++j) EXPECT_EQ(fast[b].qs[j], portable[b].qs[j]);
  }
}

TEST(MatMul8Test, WithoutACopyEqualsReferenceAndStaysWithinTheQuantizationBound) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const bool fast = IsaSupported(Isa::kAvx512Vnni);
  const Case cases[] = {
      {WeightType::kQ4_1, 45, 64, 1},    {WeightType::kQ4_1, 13, 1536, 16},
      {WeightType::kQ4_1, 37, 576, 20},  {WeightType::kQ4_0, 19, 128, 7},
      {WeightType::kQ4_0, 12, 1088, 33}, {WeightType::kQ8_0, 25, 576, 16},
      {WeightType::kQ8_0, 7, 1056, 5},   {WeightType::kQ5_0, 29, 896, 16},
      {WeightType::kQ5_0, 11, 4864, 3},  {WeightType::kQ6_K, 21, 256, 9},
      {WeightType::kQ6_K, 13, 1536, 17}, {WeightType::kQ5_1, 27, 576, 11},
      {WeightType::kQ5_1, 9, 1536, 1},   {WeightType::kQ4_K, 23, 256, 9},
      {WeightType::kQ4_K, 13, 1536, 17},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "type " << static_cast<int>(c.type) << " rows " << c.rows
                                      << " k " << c.k << " tokens " << c.tokens);
    const std::vector<uint8_t> w = RandomWeights(c.type, c.rows, c.k, rng).data;
    const size_t row_bytes = WeightRowBytes(c.type, c.k);
    const std::vector<float> x = ActivationsWithEdges(c.tokens, c.k, rng);
    std::vector<uint8_t> xq(ActivationBytes8(c.tokens, c.k));
    PrepareActivations8(x.data(), c.k, c.k, 0, c.tokens, xq.data());
    const int64_t ldo = c.rows + 3;
    std::vector<float> reference(static_cast<size_t>(c.tokens * ldo), -1.0f);
    std::vector<float> out(reference.size(), -1.0f);
    const auto* blocks = reinterpret_cast<const BlockQ8A*>(xq.data());
    internal::MatMulQuant8Portable(c.type, w.data(), row_bytes, c.k, blocks, c.tokens,
                                   reference.data(), ldo, 0, c.rows);
    // Two row ranges, as the thread pool cuts them.
    const int64_t cut = c.rows / 2 + 1;
    MatMulRows8(c.type, w.data(), row_bytes, c.k, xq.data(), c.tokens, out.data(), ldo, 0, cut);
    MatMulRows8(c.type, w.data(), row_bytes, c.k, xq.data(), c.tokens, out.data(), ldo, cut,
                c.rows);
    EXPECT_EQ(FastInt8Activations(c.type), fast);
    // Without a packed copy every row takes the reference (the fast kernel:
    // PackedCopyGivesTheSameBits).
    EXPECT_EQ(out, reference) << "the path without a packed copy differs from the reference";
    // Against exact arithmetic on the decoded weights and the float activations.
    const int64_t nb = c.k / kQuantBlock;
    std::vector<float> row(static_cast<size_t>(c.k));
    for (int64_t r = 0; r < c.rows; ++r) {
      DequantizeRow(c.type, w.data() + static_cast<size_t>(r) * row_bytes, c.k, row.data());
      for (int64_t t = 0; t < c.tokens; ++t) {
        double exact = 0, bound = 0, magnitude = 0;
        for (int64_t b = 0; b < nb; ++b) {
          double amax = 0, wsum = 0;
          for (int j = 0; j < kQuantBlock; ++j) {
            const int64_t i = b * kQuantBlock + j;
            exact += static_cast<double>(row[i]) * x[t * c.k + i];
            amax = std::max(amax, static_cast<double>(std::fabs(x[t * c.k + i])));
            wsum += std::fabs(row[i]);
          }
          bound += amax / 254.0 * wsum * 1.01;
          magnitude += amax * (wsum + 24 * 0.05 + 0.3);
        }
        bound += (2.0 * nb + 8) * std::ldexp(1.0, -24) * magnitude;
        EXPECT_LE(std::fabs(out[t * ldo + r] - exact), bound) << "row " << r << " token " << t;
      }
    }
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t r = c.rows; r < ldo; ++r)
        EXPECT_EQ(out[t * ldo + r], -1.0f) << "wrote past rows";
    }
  }
}

TEST(MatMul8Test, PackedCopyGivesTheSameBits) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  EXPECT_FALSE(Vnni8Packable(WeightType::kQ4_1, 40, 64));  // rows not a multiple of 16
  EXPECT_FALSE(Vnni8Packable(WeightType::kF32, 16, 64));
  EXPECT_EQ(Vnni8PackedBytes(WeightType::kQ4_1, 32, 64), 2u * 2u * 320u);
  EXPECT_EQ(Vnni8PackedBytes(WeightType::kQ8_0, 16, 96), 3u * 576u);
  EXPECT_EQ(Vnni8PackedBytes(WeightType::kQ5_0, 16, 96), 3u * 576u);
  EXPECT_FALSE(Vnni8Packable(WeightType::kQ6_K, 16, 96));               // k not whole super-blocks
  EXPECT_EQ(Vnni8PackedBytes(WeightType::kQ6_K, 16, 512), 2u * 3392u);  // per super-block
  EXPECT_FALSE(Vnni8Packable(WeightType::kQ4_K, 16, 96));               // k not whole super-blocks
  // Per tile and super-block: d, dmin, 8 scales and 8 mins per row, 8 blocks of nibbles.
  EXPECT_EQ(Vnni8PackedBytes(WeightType::kQ4_K, 32, 512), 2u * 2u * (64u + 256u + 8u * 256u));
  const Case cases[] = {
      {WeightType::kQ4_1, 48, 576, 16},
      {WeightType::kQ4_1, 64, 1536, 20},
      {WeightType::kQ4_1, 32, 64, 1},
      {WeightType::kQ4_0, 48, 1088, 7},
      {WeightType::kQ8_0, 48, 576, 16},
      {WeightType::kQ8_0, 32, 2304, 70},
      {WeightType::kQ4_1, 16, 128, 70},
      // Q8_0 past 64 blocks: the shifts of a pass outgrow a 64-block table (a decode step, and
      // a wider matrix after the one above, whose scratch then grows).
      {WeightType::kQ8_0, 16, 4096, 1},
      {WeightType::kQ8_0, 32, 8192, 9},
      // Q5_0: packed as Q8_0 (its values q - 16 as bytes), read by the Q8_0 kernel.
      {WeightType::kQ5_0, 48, 896, 16},
      {WeightType::kQ5_0, 32, 4864, 70},
      {WeightType::kQ5_0, 16, 896, 1},
      // Q5_1: its values 0-31 as bytes with Q4_1's offset term.
      {WeightType::kQ5_1, 48, 576, 16},
      {WeightType::kQ5_1, 32, 1536, 70},
      {WeightType::kQ5_1, 16, 576, 1},
      // Q6_K: its values unsigned, each 16-value group's sum scaled apart; two block chunks
      // (k 1536 is 48 blocks), partial groups of 8 tokens, a pass of 64 and the rest.
      {WeightType::kQ6_K, 48, 1536, 16},
      {WeightType::kQ6_K, 32, 256, 70},
      {WeightType::kQ6_K, 16, 8960, 1},
      {WeightType::kQ6_K, 16, 512, 5},
      // Q4_K: its super-block records (scales and mins made per block), two block chunks,
      // partial groups of 8 tokens, a pass of 64 and the rest.
      {WeightType::kQ4_K, 48, 1536, 16},
      {WeightType::kQ4_K, 32, 256, 70},
      {WeightType::kQ4_K, 16, 8960, 1},
      {WeightType::kQ4_K, 16, 512, 5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "type " << static_cast<int>(c.type) << " rows " << c.rows
                                      << " k " << c.k << " tokens " << c.tokens);
    const std::vector<uint8_t> w = RandomWeights(c.type, c.rows, c.k, rng).data;
    const size_t row_bytes = WeightRowBytes(c.type, c.k);
    ASSERT_TRUE(Vnni8Packable(c.type, c.rows, c.k));
    std::vector<uint8_t> storage(Vnni8PackedBytes(c.type, c.rows, c.k) + 64);
    uint8_t* packed = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    PackForVnni8(c.type, w.data(), row_bytes, c.rows, c.k, packed);
    // Tile after tile: each tile's rows packed apart at its offset give the same bytes (what a
    // load that packs a matrix on several threads relies on).
    const size_t tile_bytes = Vnni8PackedBytes(c.type, 16, c.k);
    ASSERT_EQ(tile_bytes * static_cast<size_t>(c.rows / 16), Vnni8PackedBytes(c.type, c.rows, c.k));
    std::vector<uint8_t> apart_storage(storage.size());
    uint8_t* apart =
        apart_storage.data() + (64 - reinterpret_cast<uintptr_t>(apart_storage.data()) % 64) % 64;
    for (int64_t tile = 0; tile < c.rows / 16; ++tile) {
      PackForVnni8(c.type, w.data() + static_cast<size_t>(16 * tile) * row_bytes, row_bytes, 16,
                   c.k, apart + static_cast<size_t>(tile) * tile_bytes);
    }
    EXPECT_TRUE(std::equal(packed, packed + Vnni8PackedBytes(c.type, c.rows, c.k), apart));
    const std::vector<float> x = ActivationsWithEdges(c.tokens, c.k, rng);
    std::vector<uint8_t> xq(ActivationBytes8(c.tokens, c.k));
    PrepareActivations8(x.data(), c.k, c.k, 0, c.tokens, xq.data());
    const int64_t ldo = c.rows + 5;
    std::vector<float> reference(static_cast<size_t>(c.tokens * ldo), -1.0f);
    internal::MatMulQuant8Portable(c.type, w.data(), row_bytes, c.k,
                                   reinterpret_cast<const BlockQ8A*>(xq.data()), c.tokens,
                                   reference.data(), ldo, 0, c.rows);
    // Whole tiles, and ranges that start and end inside a tile (those rows come from the GGUF
    // rows, the tiles between from the copy).
    for (const auto& [begin, end] :
         {std::pair<int64_t, int64_t>{0, c.rows}, std::pair<int64_t, int64_t>{5, c.rows - 3},
          std::pair<int64_t, int64_t>{3, 9}}) {
      std::vector<float> out(reference.size(), -1.0f);
      MatMulRows8(c.type, w.data(), row_bytes, c.k, xq.data(), c.tokens, out.data(), ldo, 0, begin,
                  packed);
      MatMulRows8(c.type, w.data(), row_bytes, c.k, xq.data(), c.tokens, out.data(), ldo, begin,
                  end, packed);
      MatMulRows8(c.type, w.data(), row_bytes, c.k, xq.data(), c.tokens, out.data(), ldo, end,
                  c.rows, packed);
      EXPECT_EQ(out, reference) << "rows [" << begin << ", " << end << ")";
    }
  }
}

}  // namespace
}  // namespace streamd::kernels::cpu
