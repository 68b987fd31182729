// MatMulRows / PrepareActivations / DequantizeRow against a double-precision reference built from
// independently decoded weights and the ORIGINAL float activations, for every weight type and
// every instruction-set level this CPU runs, on fresh random inputs over awkward shapes.
//
// Error bounds (per output element, rows r, token t; u = 2^-24, nb = k / 32 blocks):
//   Quantized weights (activations go through 12-bit blocks: |x - d*q| <= d/2 = amax_b/4094,
//   widened by 1% for the f32 reciprocal and product that compute x/d, see matmul_internal.h):
//     |out - ref| <= sum_b (amax_b / 4094) * sum_{j in b} |w_j| * 1.01  +  F
//     F = (2 nb + 8) u M,  M = sum_b amax_b * sum_{j in b} (|w_j| + 24 |d_b| + |m_b|)
//     M bounds the sum of |per-block terms| the kernels add in f32 (|q| <= 15 plus Q4_0's -8),
//     F the rounding of at most 2 nb such additions plus a few products per term. Over a whole
//     product (>= 200 outputs) the RMS of error / worst-case quantization error must also stay
//     below 4/sqrt(k) (unbiased rounding gives 1-2/sqrt(k) on these inputs; a bias or truncation
//     gives ~sqrt(k)/2).
//   Float weights: |out - ref| <= 1e-5 * sum_j |w_j x_j| (f32 accumulation only).
//   AVX2 vs portable on the same quantized activations: |avx2 - portable| <= 2 F (same integer
//   block sums, different f32 summation order). The quantizers must agree bit for bit, and so
//   must the AVX2 and AVX-VNNI products.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"
#include "tests/support/kernels_cpu_test_util.h"

namespace streamd::kernels::cpu {
namespace {

using internal::IsQuantized;
using testing::RandomActivations;
using testing::RandomWeights;
using testing::RefHalf;
using testing::ScopedIsa;
using testing::SeedTrace;
using testing::SupportedIsas;
using testing::TestSeed;
using testing::Weights;

constexpr int kBlock = kQuantBlock;

const char* TypeName(WeightType t) {
  switch (t) {
    case WeightType::kF32:
      return "F32";
    case WeightType::kF16:
      return "F16";
    case WeightType::kBF16:
      return "BF16";
    case WeightType::kQ4_0:
      return "Q4_0";
    case WeightType::kQ4_1:
      return "Q4_1";
    case WeightType::kQ8_0:
      return "Q8_0";
    case WeightType::kQ5_0:
      return "Q5_0";
    case WeightType::kQ5_1:
      return "Q5_1";
    case WeightType::kQ6_K:
      return "Q6_K";
    case WeightType::kQ4_K:  // 8-bit products only (matmul_quant8_test.cc)
      return "Q4_K";
  }
  return "?";
}

// k for a test of `type`: Q6_K rows are whole super-blocks of 256 values, so its k is rounded up.
int64_t KFor(WeightType type, int64_t k) {
  return type == WeightType::kQ6_K ? (k + kQ6_KValues - 1) / kQ6_KValues * kQ6_KValues : k;
}

struct Reference {
  std::vector<double> out;    // [n, rows]
  std::vector<double> bound;  // [n, rows] allowed |error| vs the float activations
  std::vector<double> agree;  // [n, rows] allowed |AVX2 - portable|: 2 F, or 1e-5 sum|w x|
  std::vector<double> qerr;   // [n, rows] worst-case activation quantization error
};

Reference ComputeReference(const Weights& wt, const float* x, int64_t ldx, int64_t n) {
  const int64_t rows = wt.rows, k = wt.k, nb = k / kBlock;
  Reference ref;
  ref.out.assign(n * rows, 0.0);
  ref.bound.assign(n * rows, 0.0);
  ref.agree.assign(n * rows, 0.0);
  ref.qerr.assign(n * rows, 0.0);
  const bool quant = IsQuantized(wt.type);
  std::vector<double> amax(nb);
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * ldx;
    for (int64_t b = 0; b < nb; ++b) {
      double a = 0.0;
      for (int j = 0; j < kBlock; ++j) a = std::max(a, std::fabs(double{xt[b * kBlock + j]}));
      amax[b] = a;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const double* w = wt.w.data() + r * k;
      double dot = 0.0, abs_dot = 0.0, qerr = 0.0, m_scale = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        dot += w[j] * xt[j];
        abs_dot += std::fabs(w[j] * xt[j]);
      }
      if (quant) {
        for (int64_t b = 0; b < nb; ++b) {
          double abs_w = 0.0;
          for (int j = 0; j < kBlock; ++j) abs_w += std::fabs(w[b * kBlock + j]);
          qerr += amax[b] / (2.0 * kQ16Max) * abs_w;
          m_scale +=
              amax[b] * (abs_w + kBlock * (24 * wt.d_abs[r * nb + b] + wt.m_abs[r * nb + b]));
        }
      }
      const double f32err = quant ? (2.0 * nb + 8.0) * 0x1p-24 * m_scale : 1e-5 * abs_dot;
      ref.out[t * rows + r] = dot;
      ref.qerr[t * rows + r] = qerr;
      ref.agree[t * rows + r] = quant ? 2 * f32err : f32err;
      ref.bound[t * rows + r] = qerr * 1.01 + f32err;
    }
  }
  return ref;
}

// Runs the product with the active ISA: tokens prepared in two ranges, rows in two calls, output
// with a padded stride whose padding must stay untouched.
std::vector<float> RunProduct(const Weights& wt, const void* xq, int64_t n, int64_t ldo) {
  constexpr float kSentinel = -12345.0f;
  std::vector<float> out(n * ldo, kSentinel);
  const int64_t split = wt.rows / 3;
  MatMulRows(wt.type, wt.data.data(), wt.row_bytes, wt.k, xq, n, out.data(), ldo, 0, split);
  MatMulRows(wt.type, wt.data.data(), wt.row_bytes, wt.k, xq, n, out.data(), ldo, split, wt.rows);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = wt.rows; r < ldo; ++r) EXPECT_EQ(out[t * ldo + r], kSentinel);
  }
  return out;
}

std::vector<uint8_t> Prepare(WeightType type, const std::vector<float>& x, int64_t ldx, int64_t k,
                             int64_t n) {
  std::vector<uint8_t> xq(ActivationBytes(type, n, k));
  const int64_t split = n / 2;
  PrepareActivations(type, x.data(), ldx, k, split, n, xq.data());
  PrepareActivations(type, x.data(), ldx, k, 0, split, xq.data());
  return xq;
}

class MatMulTest : public ::testing::TestWithParam<WeightType> {};

TEST_P(MatMulTest, MatchesReferenceOnAwkwardShapes) {
  const WeightType type = GetParam();
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  // Q6_K's rows are whole super-blocks: 256, 512, 768 and 1536 (two block chunks).
  const std::vector<int64_t> ks = type == WeightType::kQ6_K
                                      ? std::vector<int64_t>{256, 512, 768, 1536}
                                      : std::vector<int64_t>{32, 64, 576, 1536};
  for (int64_t k : ks) {
    for (int64_t rows : {1, 3, 7, 83, 769}) {
      const Weights wt = RandomWeights(type, rows, k, rng);
      // 16+ tokens go through the tokens-in-lanes kernel in chunks of 16 (12-15 padded), the rest
      // through the 4-token and small tiles: 13, 27 = 16 + 8 + 3 and 33 = 32 + 1 mix them.
      for (int64_t n : {1, 2, 3, 5, 7, 13, 16, 27, 33}) {
        SCOPED_TRACE(::testing::Message()
                     << TypeName(type) << " k=" << k << " rows=" << rows << " n_tokens=" << n);
        const int64_t ldx = k + 3, ldo = rows + 2;
        const std::vector<float> x = RandomActivations(n, k, ldx, rng);
        const Reference ref = ComputeReference(wt, x.data(), ldx, n);
        std::vector<uint8_t> xq;
        std::vector<float> portable, avx2, avx512;
        for (Isa isa : SupportedIsas()) {
          SCOPED_TRACE(IsaName(isa));
          ScopedIsa scoped(isa);
          const std::vector<uint8_t> xq_isa = Prepare(type, x, ldx, k, n);
          if (isa == Isa::kPortable) {
            xq = xq_isa;
          } else {
            // The quantizers of every level are bit-identical.
            ASSERT_EQ(std::memcmp(xq.data(), xq_isa.data(), xq.size()), 0);
          }
          const std::vector<float> out = RunProduct(wt, xq.data(), n, ldo);
          double rel2 = 0.0;  // sum of (error / worst-case quantization error)^2
          int failures = 0;
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              const double got = out[t * ldo + r], want = ref.out[t * rows + r];
              const double err = std::fabs(got - want);
              if (ref.qerr[t * rows + r] > 0) {
                rel2 += (err / ref.qerr[t * rows + r]) * (err / ref.qerr[t * rows + r]);
              }
              if (!(err <= ref.bound[t * rows + r]) && ++failures <= 5) {
                ADD_FAILURE() << "t=" << t << " r=" << r << " got " << got << " want " << want
                              << " bound " << ref.bound[t * rows + r];
              }
              if (isa != Isa::kPortable) {
                const double diff = std::fabs(got - portable[t * ldo + r]);
                if (!(diff <= ref.agree[t * rows + r]) && ++failures <= 5) {
                  ADD_FAILURE() << "t=" << t << " r=" << r << " " << IsaName(isa) << " " << got
                                << " vs portable " << portable[t * ldo + r];
                }
              }
            }
          }
          EXPECT_EQ(failures, 0);
          if (IsQuantized(type) && n * rows >= 200) {
            // Rounding errors are unbiased: the RMS of error / worst-case bound stays near
            // 1-2 / sqrt(k); a systematic error (bias, truncation) gives ~sqrt(k) / 2.
            const double rms = std::sqrt(rel2 / static_cast<double>(n * rows));
            EXPECT_LE(rms * std::sqrt(static_cast<double>(k)), 4.0);
          }
          if (isa == Isa::kPortable) portable = out;
          if (isa == Isa::kAvx2) avx2 = out;
          if (isa == Isa::kAvxVnni) {
            // Same integer sums and the same f32 operations in the same order as AVX2.
            EXPECT_EQ(std::memcmp(out.data(), avx2.data(), out.size() * sizeof(float)), 0);
          }
          if (isa == Isa::kAvx512Vnni && !avx2.empty() && (n == 1 || n % 16 == 0)) {
            // One token, and whole chunks of 16 tokens: the AVX2 level's f32 operations, in
            // its order (partial chunks are padded here, tiled there).
            EXPECT_EQ(std::memcmp(out.data(), avx2.data(), out.size() * sizeof(float)), 0);
          }
          if (isa == Isa::kAvx512Vnni) avx512 = out;
          if (isa == Isa::kAmx) {
            // Same integer block sums, same f32 operations and order, same token split.
            ASSERT_FALSE(avx512.empty());
            EXPECT_EQ(std::memcmp(out.data(), avx512.data(), out.size() * sizeof(float)), 0);
          }
        }
      }
    }
  }
}

// Prefill-sized products cross the kernels' token chunking; compared to the portable path.
TEST_P(MatMulTest, LargeTokenCountMatchesPortable) {
  const WeightType type = GetParam();
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const int64_t k = KFor(type, 576), rows = 37, n = 300;
  const Weights wt = RandomWeights(type, rows, k, rng);
  const std::vector<float> x = RandomActivations(n, k, k, rng);
  const Reference ref = ComputeReference(wt, x.data(), k, n);
  std::vector<uint8_t> xq;
  {
    ScopedIsa scoped(Isa::kPortable);
    xq = Prepare(type, x, k, k, n);
  }
  std::vector<float> portable;
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    const std::vector<float> out = RunProduct(wt, xq.data(), n, rows);
    if (isa == Isa::kPortable) {
      portable = out;
      continue;
    }
    int failures = 0;
    for (int64_t i = 0; i < n * rows; ++i) {
      if (!(std::fabs(out[i] - portable[i]) <= ref.agree[i]) && ++failures <= 5) {
        ADD_FAILURE() << "i=" << i << " " << out[i] << " vs portable " << portable[i];
      }
    }
    EXPECT_EQ(failures, 0);
  }
}

// A NaN or infinity in one token's activations poisons exactly that token's outputs.
TEST_P(MatMulTest, NonFiniteActivationsPropagateToTheirTokenOnly) {
  const WeightType type = GetParam();
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const int64_t k = KFor(type, 576), rows = 19;
  const Weights wt = RandomWeights(type, rows, k, rng);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY}) {
    for (int64_t n : {9, 21}) {
      std::vector<float> x = RandomActivations(n, k, k, rng);
      const int64_t bad_token = static_cast<int64_t>(rng() % n);
      x[bad_token * k + static_cast<int64_t>(rng() % k)] = bad;
      for (Isa isa : SupportedIsas()) {
        SCOPED_TRACE(IsaName(isa));
        ScopedIsa scoped(isa);
        const std::vector<uint8_t> xq = Prepare(type, x, k, k, n);
        const std::vector<float> out = RunProduct(wt, xq.data(), n, rows);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const bool finite = std::isfinite(out[t * rows + r]);
            EXPECT_EQ(finite, t != bad_token) << "n=" << n << " t=" << t << " r=" << r;
          }
        }
      }
    }
  }
}

TEST_P(MatMulTest, DequantizeRowMatchesIndependentDecode) {
  const WeightType type = GetParam();
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const Weights wt = RandomWeights(type, 5, 1536, rng);
  std::vector<float> row(wt.k);
  for (int64_t r = 0; r < wt.rows; ++r) {
    DequantizeRow(type, wt.data.data() + r * wt.row_bytes, wt.k, row.data());
    for (int64_t j = 0; j < wt.k; ++j) {
      // Each decoded value is one f32 product (plus one add for Q4_1): within 1 ulp-ish.
      ASSERT_NEAR(row[j], wt.w[r * wt.k + j], 1e-6 * (std::fabs(wt.w[r * wt.k + j]) + 1e-3))
          << "r=" << r << " j=" << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest,
                         ::testing::Values(WeightType::kF32, WeightType::kF16, WeightType::kBF16,
                                           WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ8_0,
                                           WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ6_K),
                         [](const ::testing::TestParamInfo<WeightType>& param) {
                           return std::string(TypeName(param.param));
                         });

// Q6_K's largest products: every value q - 32 = -32 with scale -128 (4096 as i16) against
// activations at +-kQ16Max, so one block's i32 sum is +-32 * 4096 * 2047 (< 2^28, past f32's
// exact 2^24). Every level must stay within f32 rounding of the exact product: a wrapped i16 or
// i32 would be off by far more.
TEST(Q6_KTest, LargestValuesAndScalesStayExactInI32) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const int64_t k = 1536, rows = 13, nb = k / kQuantBlock;
  Weights wt = RandomWeights(WeightType::kQ6_K, rows, k, rng);
  std::vector<double> d(rows * (k / kQ6_KValues));  // each super-block's d
  for (int64_t r = 0; r < rows; ++r) {
    auto* s = reinterpret_cast<BlockQ6_K*>(wt.data.data() + r * wt.row_bytes);
    for (int64_t i = 0; i < k / kQ6_KValues; ++i) {
      std::memset(s[i].ql, 0, sizeof s[i].ql);  // q = 0: the value -32
      std::memset(s[i].qh, 0, sizeof s[i].qh);
      std::memset(s[i].sc, 0x80, sizeof s[i].sc);  // -128
      d[r * (k / kQ6_KValues) + i] = RefHalf(s[i].d);
    }
  }
  for (int64_t n : {1, 5, 16, 19}) {
    SCOPED_TRACE(::testing::Message() << "n_tokens=" << n);
    // +-1 with a random sign per block: each block quantizes to +-2047 exactly.
    std::vector<float> x(n * k);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t b = 0; b < nb; ++b) {
        const float v = (rng() & 1) ? 1.0f : -1.0f;
        std::fill(x.begin() + t * k + b * kQuantBlock, x.begin() + t * k + (b + 1) * kQuantBlock,
                  v);
      }
    }
    for (Isa isa : SupportedIsas()) {
      SCOPED_TRACE(IsaName(isa));
      ScopedIsa scoped(isa);
      const std::vector<uint8_t> xq = Prepare(WeightType::kQ6_K, x, k, k, n);
      const std::vector<float> out = RunProduct(wt, xq.data(), n, rows);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double exact = 0.0, abs_sum = 0.0;
          for (int64_t j = 0; j < k; ++j) {
            const double w = 4096.0 * d[r * (k / kQ6_KValues) + j / kQ6_KValues];
            exact += w * x[t * k + j];
            abs_sum += std::fabs(w);
          }
          ASSERT_NEAR(out[t * rows + r], exact, (2.0 * nb + 8.0) * 0x1p-24 * abs_sum)
              << "t=" << t << " r=" << r;
        }
      }
    }
  }
}

// At the AVX-512 VNNI level a product of 2-5 tokens (a decode step of up to 5 sessions) widens
// each Q6_K half super-block once for all its tokens, and computes every token as the 1-token
// product does: each token gets the bits it would get alone, tail rows (Tile) included.
TEST(Q6_KTest, SmallBatchesGiveEachTokenItsOneTokenBits) {
  if (!IsaSupported(Isa::kAvx512Vnni)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  ScopedIsa scoped(Isa::kAvx512Vnni);
  const int64_t k = 1536, rows = 83, nb = k / kQuantBlock;
  const Weights wt = RandomWeights(WeightType::kQ6_K, rows, k, rng);
  for (int64_t n : {2, 3, 4, 5, 21}) {  // 21 = 16 in the lanes + 5 left
    SCOPED_TRACE(::testing::Message() << "n_tokens=" << n);
    const std::vector<float> x = RandomActivations(n, k, k, rng);
    const std::vector<uint8_t> xq = Prepare(WeightType::kQ6_K, x, k, k, n);
    const std::vector<float> batch = RunProduct(wt, xq.data(), n, rows);
    for (int64_t t = (n > 16 ? 16 : 0); t < n; ++t) {
      const std::vector<float> alone =
          RunProduct(wt, xq.data() + static_cast<size_t>(t * nb) * sizeof(BlockQ16_1), 1, rows);
      ASSERT_EQ(std::memcmp(alone.data(), batch.data() + t * rows, rows * sizeof(float)), 0)
          << "token " << t;
    }
  }
}

// AMX splits each activation q into a signed and an unsigned part: q = 16 * hi + (q & 15) against
// 4-bit weights, q = 256 * hi + (q & 255) against Q8_0. The values where the splits carry or
// borrow (+-15, +-16, +-17, +-255, +-256, -1, the extremes) with the largest weights, so the block
// sums reach their bounds. Bit-identical to the AVX-512 VNNI level, and within the error bound of
// the exact product.
TEST(AmxTest, ActivationSplitIsExactAtTheExtremes) {
  if (!IsaSupported(Isa::kAmx)) GTEST_SKIP() << "this CPU (or OS) has no AMX-INT8";
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (WeightType type : {WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ8_0}) {
    SCOPED_TRACE(TypeName(type));
    const int64_t k = 1536, rows = 48, n = 29;  // two block chunks; 16 + 13 tokens
    Weights wt = RandomWeights(type, rows, k, rng);
    // Every quant at its largest magnitude in half the rows (4-bit 15; Q8_0 127 or -128).
    const size_t block_bytes = wt.row_bytes / (k / kQuantBlock);
    const size_t header = type == WeightType::kQ4_1 ? 4 : 2;
    const size_t quants = type == WeightType::kQ8_0 ? kQuantBlock : kQuantBlock / 2;
    std::vector<float> decoded(k);
    for (int64_t r = 0; r < rows; r += 2) {
      uint8_t* row = wt.data.data() + r * wt.row_bytes;
      for (int64_t b = 0; b < k / kQuantBlock; ++b) {
        const int fill = type == WeightType::kQ8_0 ? (r % 4 ? 0x7f : 0x80) : 0xff;
        std::memset(row + b * block_bytes + header, fill, quants);
      }
      DequantizeRow(type, row, k, decoded.data());
      std::copy(decoded.begin(), decoded.end(), wt.w.begin() + r * k);
    }
    // One value per block at the block's maximum sets the scale to 1 (q = +-2047); the others
    // hit the split boundaries.
    const float edges[] = {-2047, -256, -255, -129, -128, -17, -16, -15, -1,  0,
                           1,     15,   16,   17,   127,  128, 255, 256, 2047};
    std::uniform_int_distribution<size_t> pick(0, std::size(edges) - 1);
    std::vector<float> x(n * k);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < k; ++i) {
        x[t * k + i] = i % kQuantBlock == 0 ? (t % 2 ? -2047.0f : 2047.0f) : edges[pick(rng)];
      }
    }
    std::vector<float> want, got;
    {
      ScopedIsa scoped(Isa::kAvx512Vnni);
      want = RunProduct(wt, Prepare(type, x, k, k, n).data(), n, rows);
    }
    {
      ScopedIsa scoped(Isa::kAmx);
      ASSERT_EQ(ActiveIsa(), Isa::kAmx);
      got = RunProduct(wt, Prepare(type, x, k, k, n).data(), n, rows);
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    const Reference ref = ComputeReference(wt, x.data(), k, n);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_LE(std::fabs(got[t * rows + r] - ref.out[t * rows + r]), ref.bound[t * rows + r])
            << "t=" << t << " r=" << r;
      }
    }
  }
}

// The packed copy's records hold every scale, minimum and 4-bit value where matmul_internal.h
// says (checked here on any CPU; the AMX test below checks that the kernel reads them so).
TEST(AmxPackingTest, RecordsHoldEveryValueWhereTheLayoutSays) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  EXPECT_FALSE(AmxPackable(WeightType::kQ4_1, 40, 64));  // not whole tiles of 16 rows
  EXPECT_FALSE(AmxPackable(WeightType::kF16, 32, 64));
  EXPECT_EQ(AmxPackedBytes(WeightType::kQ4_1, 40, 64), 0u);
  for (WeightType type : {WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ8_0}) {
    SCOPED_TRACE(TypeName(type));
    const int64_t rows = 48, k = 576, nb = k / kQuantBlock;
    const Weights wt = RandomWeights(type, rows, k, rng);
    const bool q8 = type == WeightType::kQ8_0;
    const size_t record = q8 ? 576 : 320;
    ASSERT_TRUE(AmxPackable(type, rows, k));
    ASSERT_EQ(AmxPackedBytes(type, rows, k), rows / 16 * nb * record);
    std::vector<uint8_t> packed(AmxPackedBytes(type, rows, k) + 64);
    uint8_t* rec0 = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    PackForAmx(type, wt.data.data(), wt.row_bytes, rows, k, rec0);
    const size_t block_bytes = wt.row_bytes / nb;
    const bool q4_1 = type == WeightType::kQ4_1;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* block = wt.data.data() + r * wt.row_bytes + b * block_bytes;
        const uint8_t* rec = rec0 + ((r / 16) * nb + b) * record;
        const int n = static_cast<int>(r % 16), lane = n / 4, i = n % 4;
        ASSERT_EQ(std::memcmp(rec + 2 * n, block, 2), 0) << "d of row " << r << " block " << b;
        const uint8_t zero[2] = {0, 0};
        ASSERT_EQ(std::memcmp(rec + 32 + 2 * n, q4_1 ? block + 2 : zero, 2), 0) << "m " << r;
        if (q8) {  // value v of row n: B-tile row v / 4, byte 4n + v % 4
          for (int v = 0; v < 32; ++v) {
            ASSERT_EQ(rec[64 + 64 * (v / 4) + 4 * n + v % 4], block[2 + v]) << r << "," << v;
          }
          continue;
        }
        const uint8_t* qs = block + block_bytes - 16;
        for (int v = 0; v < 32; ++v) {
          const int want = v < 16 ? qs[v] & 15 : qs[v - 16] >> 4;
          // v = 8j + 2h + 4g + e: byte 16 lane + 8h + 2i + e of S_j, nibble g.
          const int j = v / 8, g = (v % 8) / 4, h = (v % 4) / 2, e = v % 2;
          const uint8_t byte = rec[64 + 64 * j + 16 * lane + 8 * h + 2 * i + e];
          ASSERT_EQ(g ? byte >> 4 : byte & 15, want) << "row " << r << " block " << b << " v " << v;
        }
      }
    }
  }
}

// The AMX level reads the packed copy instead of the rows and gets the same bits, for every token
// count (chunks of 16, padded and AVX2-tiled remainders), one and two block chunks, row ranges
// on and off the tiles of 16 (off: the rows are read instead).
TEST(AmxTest, PackedWeightsGiveTheSameBits) {
  if (!IsaSupported(Isa::kAmx)) GTEST_SKIP() << "this CPU (or OS) has no AMX-INT8";
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  ScopedIsa scoped(Isa::kAmx);
  ASSERT_EQ(ActiveIsa(), Isa::kAmx);
  for (WeightType type : {WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ8_0}) {
    for (int64_t k : {32, 576, 1536}) {
      for (int64_t rows : {16, 48, 784}) {
        const Weights wt = RandomWeights(type, rows, k, rng);
        std::vector<uint8_t> buffer(AmxPackedBytes(type, rows, k) + 64);
        uint8_t* packed =
            buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
        PackForAmx(type, wt.data.data(), wt.row_bytes, rows, k, packed);
        for (int64_t n : {1, 5, 6, 16, 27, 33, 64}) {
          SCOPED_TRACE(::testing::Message()
                       << TypeName(type) << " k=" << k << " rows=" << rows << " n=" << n);
          const std::vector<float> x = RandomActivations(n, k, k, rng);
          const std::vector<uint8_t> xq = Prepare(type, x, k, k, n);
          const int64_t on_tiles = rows / 32 * 16, off_tiles = rows / 3;
          for (int64_t split : {on_tiles, off_tiles}) {
            std::vector<float> plain(n * rows), from_packed(n * rows, -1.0f);
            for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, split}, {split, rows}}) {
              MatMulRows(type, wt.data.data(), wt.row_bytes, k, xq.data(), n, plain.data(), rows,
                         r0, r1);
              MatMulRows(type, wt.data.data(), wt.row_bytes, k, xq.data(), n, from_packed.data(),
                         rows, r0, r1, packed);
            }
            ASSERT_EQ(std::memcmp(plain.data(), from_packed.data(), plain.size() * sizeof(float)),
                      0)
                << "split at row " << split;
          }
        }
      }
    }
  }
}

TEST(ActivationQuantTest, BlocksRoundTripWithinHalfAStep) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const int64_t k = 1536, n = 7;
  std::vector<float> x = RandomActivations(n, k, k, rng);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // an all-zero block: d = 0, no NaN
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    const std::vector<uint8_t> xq = Prepare(WeightType::kQ4_1, x, k, k, n);
    const auto* blocks = reinterpret_cast<const BlockQ16_1*>(xq.data());
    for (int64_t i = 0; i < n * k / kBlock; ++i) {
      const BlockQ16_1& b = blocks[i];
      const float* xb = x.data() + i * kBlock;
      float amax = 0.0f;
      int32_t sum = 0;
      for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
      // The documented rule, exactly: d = amax / 2047, q = nearbyint(x * (1 / d)) in f32.
      ASSERT_EQ(b.d, amax / 2047.0f) << "block " << i;
      const float id = b.d != 0.0f ? 1.0f / b.d : 0.0f;
      for (int j = 0; j < kBlock; ++j) {
        ASSERT_EQ(b.qs[j], static_cast<int>(std::nearbyint(xb[j] * id))) << i << "," << j;
        ASSERT_LE(std::abs(int{b.qs[j]}), 2047);
        // Half a step, plus the f32 rounding of 1 / d and x * (1 / d) (< 2047 * 3u steps).
        ASSERT_LE(std::fabs(xb[j] - double{b.d} * b.qs[j]), (0.5 + 0.006) * b.d + 1e-30)
            << i << "," << j;
        sum += b.qs[j];
      }
      ASSERT_EQ(b.s, b.d * static_cast<float>(sum)) << "block " << i;
    }
  }
}

// Exact ties round half to even on every ISA; the extremes map to +-2047; blocks whose scale
// would be subnormal quantize to zero instead of overflowing 12 bits.
TEST(ActivationQuantTest, TiesExtremesAndTinyBlocks) {
  std::vector<float> x(3 * kBlock, 0.0f);
  // Block 0: amax = 2047, so d = 1 and x * (1 / d) = x exactly.
  const float ties[] = {2047.0f, -2047.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 2046.5f};
  const int16_t want[] = {2047, -2047, 2, 4, -2, -4, 0, 0, 2, 2046};
  std::copy(std::begin(ties), std::end(ties), x.begin());
  for (int j = 10; j < kBlock; ++j) x[j] = static_cast<float>(j * 60 - 7);
  x[kBlock + 3] = 1e-35f;       // d = amax / 2047 < FLT_MIN
  x[2 * kBlock + 5] = -1e-41f;  // subnormal input
  x[2 * kBlock + 6] = 2e-41f;
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    const std::vector<uint8_t> xq = Prepare(WeightType::kQ8_0, x, 3 * kBlock, 3 * kBlock, 1);
    const auto* blocks = reinterpret_cast<const BlockQ16_1*>(xq.data());
    EXPECT_EQ(blocks[0].d, 1.0f);
    for (int j = 0; j < 10; ++j) EXPECT_EQ(blocks[0].qs[j], want[j]) << "j=" << j;
    for (int j = 10; j < kBlock; ++j) EXPECT_EQ(blocks[0].qs[j], j * 60 - 7) << "j=" << j;
    for (int b = 1; b < 3; ++b) {
      EXPECT_EQ(blocks[b].d, 0.0f) << "block " << b;
      EXPECT_EQ(blocks[b].s, 0.0f) << "block " << b;
      for (int j = 0; j < kBlock; ++j) EXPECT_EQ(blocks[b].qs[j], 0) << b << "," << j;
    }
  }
}

TEST(IsaTest, ForceStepsDownToASupportedLevel) {
  ForceIsa(Isa::kPortable);
  EXPECT_EQ(ActiveIsa(), Isa::kPortable);
  for (Isa isa : kAllIsas) {
    ForceIsa(isa);
    EXPECT_TRUE(IsaSupported(ActiveIsa())) << IsaName(isa);
    EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(isa)) << IsaName(isa);
    if (IsaSupported(isa)) {
      EXPECT_EQ(ActiveIsa(), isa);
    }
  }
  ForceIsa(DetectIsa());
  EXPECT_TRUE(IsaSupported(DetectIsa()));
  std::printf("detected ISA: %s\n", IsaName(DetectIsa()));
}

}  // namespace
}  // namespace streamd::kernels::cpu
