// RepackRows against the reference dequantization (dequantize_reference.h) of the same blocks:
// per value within the error repack_quant.h states for each target, and as products: the repacked
// matrix times random vectors, at every ISA level this CPU runs, against the reference matrix
// times the same vectors in double, within a bound derived from both quantization steps.
#include "kernels/cpu/repack_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/random_quant_blocks.h"
#include "tests/support/kernels_cpu_test_util.h"

namespace streamd::kernels {
namespace {

using cpu::WeightType;
using cpu::testing::ScopedIsa;
using cpu::testing::SeedTrace;
using cpu::testing::SupportedIsas;
using cpu::testing::TestSeed;

// The per-value error repack_quant.h states, for a 32-value block whose largest |x| is amax.
// Q4_1 (from Q4_K) and Q5_1 (from Q5_K): d*scale and dmin*min each rounded to f16 (relative
// 2^-11, plus half an f16 subnormal step); amax >= qmax*d*scale/2 and >= dmin*min, so |error| <=
// 2^-11 * (2 amax + amax). Q8_0 re-quantized: half the rounded scale, f16(amax/127) <= amax/127 *
// (1 + 2^-11). Exact conversions (Q5_0, IQ4_NL) and Q5_1's copy of itself: 0.
double ValueErrorBound(ConvertedQuant type, double amax) {
  constexpr double kHalfSubnormalStep = 0x1p-24;
  if (type == ConvertedQuant::kQ5_0 || type == ConvertedQuant::kIQ4_NL ||
      type == ConvertedQuant::kQ5_1) {
    return 0.0;
  }
  if (RepackTarget(type) == WeightType::kQ4_1 || RepackTarget(type) == WeightType::kQ5_1) {
    return 3 * 0x1p-11 * amax + 2 * kHalfSubnormalStep;
  }
  return amax / 254.0 * (1 + 0x1p-11) + kHalfSubnormalStep;
}

struct Matrix {
  int64_t rows, k;
  std::vector<uint8_t> src;       // [rows, k] in `type`
  std::vector<float> reference;   // [rows, k] DequantizeReference
  std::vector<uint8_t> repacked;  // [rows, k] in RepackTarget(type)
  size_t src_row_bytes, dst_row_bytes;
};

Matrix MakeRepacked(ConvertedQuant type, int64_t rows, int64_t k, std::mt19937_64& rng) {
  const QuantLayout layout = LayoutOf(type);
  Matrix m{rows, k, {}, {}, {}, 0, 0};
  m.src_row_bytes = static_cast<size_t>(k / layout.block_values * layout.block_bytes);
  m.dst_row_bytes = cpu::WeightRowBytes(RepackTarget(type), k);
  m.src = RandomBlocks(type, rows * k / layout.block_values, rng, 0.5f);
  m.reference.resize(static_cast<size_t>(rows * k));
  DequantizeReference(type, m.src.data(), rows * k / layout.block_values, m.reference.data());
  m.repacked.resize(m.dst_row_bytes * rows);
  // Two calls over disjoint ranges, as the loader splits rows across threads.
  EXPECT_TRUE(RepackRows(type, m.src.data(), m.src_row_bytes, k, 0, rows / 2, m.repacked.data()));
  EXPECT_TRUE(
      RepackRows(type, m.src.data(), m.src_row_bytes, k, rows / 2, rows, m.repacked.data()));
  return m;
}

class RepackTest : public ::testing::TestWithParam<ConvertedQuant> {};

TEST_P(RepackTest, ValuesWithinTheStatedError) {
  const ConvertedQuant type = GetParam();
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const int64_t rows = 19, k = 768;
  const Matrix m = MakeRepacked(type, rows, k, rng);
  std::vector<float> row(k);
  double max_err = 0, max_rel = 0, sum_sq_err = 0, sum_sq = 0;
  for (int64_t r = 0; r < rows; ++r) {
    cpu::DequantizeRow(RepackTarget(type), m.repacked.data() + r * m.dst_row_bytes, k, row.data());
    for (int64_t b = 0; b < k / kQuantBlock; ++b) {
      const float* ref = &m.reference[r * k + b * kQuantBlock];
      double amax = 0;
      for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(double{ref[i]}));
      const double bound = ValueErrorBound(type, amax);
      for (int i = 0; i < kQuantBlock; ++i) {
        const double err = std::fabs(double{row[b * kQuantBlock + i]} - ref[i]);
        ASSERT_LE(err, bound) << LayoutOf(type).name << " row " << r << " value "
                              << b * kQuantBlock + i << ": " << row[b * kQuantBlock + i]
                              << " vs reference " << ref[i];
        max_err = std::max(max_err, err);
        if (amax > 0) max_rel = std::max(max_rel, err / amax);
        sum_sq_err += err * err;
        sum_sq += double{ref[i]} * ref[i];
      }
    }
  }
  // The accuracy cost of the repack, for docs/ARCHITECTURE.md.
  std::printf(
      "%s -> %s: max |error| %.3g (values up to 0.5), max |error| / block amax %.3g, "
      "rms error / rms value %.3g\n",
      LayoutOf(type).name,
      RepackTarget(type) == WeightType::kQ4_1   ? "Q4_1"
      : RepackTarget(type) == WeightType::kQ5_1 ? "Q5_1"
                                                : "Q8_0",
      max_err, max_rel, std::sqrt(sum_sq_err / sum_sq));
}

TEST_P(RepackTest, ProductsMatchTheReferenceMatrixAtEveryLevel) {
  const ConvertedQuant type = GetParam();
  const WeightType target = RepackTarget(type);
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  // 48 rows: whole AMX tiles of 16 plus the GGUF-row path at other levels; 7 tokens: a batch.
  const int64_t rows = 48, k = 512, n_tokens = 7;
  const Matrix m = MakeRepacked(type, rows, k, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n_tokens * k);
  for (float& v : x) v = normal(rng);

  for (cpu::Isa isa : SupportedIsas()) {
    SCOPED_TRACE(cpu::IsaName(isa));
    ScopedIsa forced(isa);
    std::vector<uint8_t> xq(cpu::ActivationBytes(target, n_tokens, k));
    cpu::PrepareActivations(target, x.data(), k, k, 0, n_tokens, xq.data());
    std::vector<float> out(n_tokens * rows);
    cpu::MatMulRows(target, m.repacked.data(), m.dst_row_bytes, k, xq.data(), n_tokens, out.data(),
                    rows, 0, rows);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        // Bound: the weights' repack error times |x|, plus the 12-bit activations' step
        // (|x - d q| <= amax_x / 4094 per value, matmul.h) times |w|, plus f32 accumulation.
        double exact = 0, bound = 1e-4;
        for (int64_t b = 0; b < k / kQuantBlock; ++b) {
          const float* w = &m.reference[r * k + b * kQuantBlock];
          const float* xb = &x[t * k + b * kQuantBlock];
          double wmax = 0, xmax = 0;
          for (int i = 0; i < kQuantBlock; ++i) {
            wmax = std::max(wmax, std::fabs(double{w[i]}));
            xmax = std::max(xmax, std::fabs(double{xb[i]}));
          }
          const double werr = ValueErrorBound(type, wmax);
          for (int i = 0; i < kQuantBlock; ++i) {
            exact += double{w[i]} * xb[i];
            bound += werr * std::fabs(double{xb[i]}) +
                     (std::fabs(double{w[i]}) + werr) * xmax / 4094.0 * 1.01;
          }
        }
        ASSERT_NEAR(out[t * rows + r], exact, bound) << "token " << t << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllConverted, RepackTest, ::testing::ValuesIn(kConvertedQuants),
                         [](const ::testing::TestParamInfo<ConvertedQuant>& p) {
                           return std::string(LayoutOf(p.param).name);
                         });

}  // namespace
}  // namespace streamd::kernels
