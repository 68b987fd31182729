// vec_ops.h and the half conversions against plain double loops, per instruction-set level.
// Half conversions are checked exhaustively: all 65536 halves, and every midpoint between two
// adjacent halves (the round-to-nearest-even cases) with its two float neighbours.
#include "kernels/cpu/vec_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/test_util.h"

namespace streamd::kernels::cpu {
namespace {

using testing::ScopedIsa;
using testing::SeedTrace;
using testing::SupportedIsas;
using testing::TestSeed;

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Value of a half by its definition, in double.
double HalfValue(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(mant + 1024, exp - 25);
}

bool IsHalfNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

const std::vector<int64_t> kLengths = {0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 576, 1000};

TEST(HalfTest, HalfToFloatExhaustive) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (int i = 0; i < 65536; ++i) {
    const float f = HalfToFloat(all[i]);
    if (IsHalfNan(all[i])) {
      ASSERT_TRUE(std::isnan(f)) << i;
    } else {
      ASSERT_EQ(static_cast<double>(f), HalfValue(all[i])) << i;
      ASSERT_EQ(std::signbit(f), (i & 0x8000) != 0) << i;
    }
  }
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    std::vector<float> out(65536 + 1, 7.0f);
    HalfToFloatRow(all.data(), out.data(), 65536);
    ASSERT_EQ(out[65536], 7.0f);  // no write past n
    for (int i = 0; i < 65536; ++i) {
      if (IsHalfNan(all[i])) {
        ASSERT_TRUE(std::isnan(out[i])) << i;
      } else {
        ASSERT_EQ(Bits(out[i]), Bits(HalfToFloat(all[i]))) << i;
      }
    }
    // Odd lengths exercise the tails.
    for (int64_t n : kLengths) {
      std::vector<float> part(n + 1, 7.0f);
      HalfToFloatRow(all.data() + 1000, part.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(part[i], HalfToFloat(all[1000 + i]));
      ASSERT_EQ(part[n], 7.0f);
    }
  }
}

TEST(HalfTest, FloatToHalfRoundsToNearestEvenExhaustively) {
  // Inputs: every non-NaN half exactly, every midpoint between adjacent finite halves of one sign
  // (and the midpoint to infinity, 65520), and both float neighbours of each midpoint.
  std::vector<float> in;
  std::vector<uint16_t> want;
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t h = 0; h < 0x7c00; ++h) {
      const double lo = HalfValue(static_cast<uint16_t>(h));
      const double hi = h + 1 < 0x7c00 ? HalfValue(static_cast<uint16_t>(h + 1)) : 65520.0 * 2 - lo;
      const double mid = (lo + hi) / 2;  // exact in float: halves have 11 significant bits
      const float s = sign ? -1.0f : 1.0f;
      const auto up = static_cast<uint16_t>(sign | (h + 1));  // h + 1 == 0x7c00 is infinity
      const auto down = static_cast<uint16_t>(sign | h);
      in.push_back(s * static_cast<float>(lo));
      want.push_back(down);
      in.push_back(s * static_cast<float>(mid));
      want.push_back((h & 1) ? up : down);  // tie: to even
      in.push_back(s * std::nextafter(static_cast<float>(mid), 0.0f));
      want.push_back(down);
      in.push_back(s * std::nextafter(static_cast<float>(mid), INFINITY));
      want.push_back(up);
    }
    in.push_back(sign ? -INFINITY : INFINITY);
    want.push_back(static_cast<uint16_t>(sign | 0x7c00));
    in.push_back(sign ? -1e30f : 1e30f);
    want.push_back(static_cast<uint16_t>(sign | 0x7c00));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(FloatToHalf(in[i]), want[i]) << "input " << in[i] << " index " << i;
  }
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    std::vector<uint16_t> out(in.size() + 1, 0x1234);
    FloatToHalfRow(in.data(), out.data(), static_cast<int64_t>(in.size()));
    ASSERT_EQ(out[in.size()], 0x1234);
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], want[i]) << "input " << in[i];
    const float nans[3] = {std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::signaling_NaN()};
    uint16_t nan_out[3];
    FloatToHalfRow(nans, nan_out, 3);
    for (uint16_t h : nan_out) EXPECT_TRUE(IsHalfNan(h)) << h;
  }
}

std::vector<float> RandomFloats(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

std::vector<uint16_t> RandomHalves(int64_t n, std::mt19937_64& rng) {
  std::vector<uint16_t> v(n);
  for (auto& h : v) h = FloatToHalf(std::normal_distribution<float>(0.0f, 1.0f)(rng));
  return v;
}

TEST(VecOpsTest, DotsMatchDoubleLoops) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    for (int64_t n : kLengths) {
      SCOPED_TRACE(n);
      const std::vector<float> a = RandomFloats(n, rng), b = RandomFloats(n, rng);
      const std::vector<uint16_t> h = RandomHalves(n, rng);
      double want = 0, want_abs = 0, want_h = 0, want_h_abs = 0;
      for (int64_t i = 0; i < n; ++i) {
        want += double{a[i]} * b[i];
        want_abs += std::fabs(double{a[i]} * b[i]);
        want_h += a[i] * HalfValue(h[i]);
        want_h_abs += std::fabs(a[i] * HalfValue(h[i]));
      }
      // f32 accumulation: error within 1e-5 of the sum of |terms|.
      EXPECT_NEAR(DotF32(a.data(), b.data(), n), want, 1e-5 * want_abs + 1e-30);
      EXPECT_NEAR(DotF32F16(a.data(), h.data(), n), want_h, 1e-5 * want_h_abs + 1e-30);
    }
  }
}

TEST(VecOpsTest, AxpyMatchesDoubleLoops) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    for (int64_t n : kLengths) {
      SCOPED_TRACE(n);
      const float alpha = std::normal_distribution<float>(0.0f, 2.0f)(rng);
      const std::vector<float> x = RandomFloats(n, rng), y0 = RandomFloats(n + 1, rng);
      const std::vector<uint16_t> h = RandomHalves(n, rng);
      std::vector<float> y = y0, yh = y0;
      AxpyF32(alpha, x.data(), y.data(), n);
      AxpyF16(alpha, h.data(), yh.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = y0[i] + double{alpha} * x[i];
        const double want_h = y0[i] + alpha * HalfValue(h[i]);
        // One product and one add in f32 (or one fused op): two roundings at most.
        EXPECT_NEAR(y[i], want, 2.4e-7 * (std::fabs(y0[i]) + std::fabs(alpha * x[i])));
        EXPECT_NEAR(yh[i], want_h,
                    2.4e-7 * (std::fabs(y0[i]) + std::fabs(alpha * HalfValue(h[i]))));
      }
      EXPECT_EQ(y[n], y0[n]);  // untouched past n
      EXPECT_EQ(yh[n], y0[n]);
    }
  }
}

// The row forms attention uses on a run of keys: every row count (the 4-row groups and the
// rest) and head sizes with and without a 32-wide part and with a non-multiple-of-8 size.
TEST(VecOpsTest, RowFormsMatchDoubleLoops) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    for (int64_t hd : {8, 40, 64, 128, 12}) {
      for (int64_t rows : {1, 3, 4, 7, 16}) {
        SCOPED_TRACE(::testing::Message() << "hd " << hd << " rows " << rows);
        const std::vector<float> q = RandomFloats(hd, rng), w = RandomFloats(rows, rng);
        const std::vector<uint16_t> kv = RandomHalves(rows * hd, rng);
        const float scale = 0.125f;
        std::vector<float> dots(rows + 1, 7.0f);
        DotRowsF16(q.data(), kv.data(), rows, hd, scale, dots.data());
        EXPECT_EQ(dots[rows], 7.0f);  // untouched past n_rows
        for (int64_t r = 0; r < rows; ++r) {
          double want = 0, want_abs = 0;
          for (int64_t i = 0; i < hd; ++i) {
            want += double{q[i]} * HalfValue(kv[r * hd + i]);
            want_abs += std::fabs(double{q[i]} * HalfValue(kv[r * hd + i]));
          }
          EXPECT_NEAR(dots[r], scale * want, 1e-5 * scale * want_abs + 1e-30) << "row " << r;
        }
        const std::vector<float> y0 = RandomFloats(hd + 1, rng);
        std::vector<float> y = y0;
        AxpyRowsF16(w.data(), kv.data(), rows, hd, y.data());
        EXPECT_EQ(y[hd], y0[hd]);
        for (int64_t i = 0; i < hd; ++i) {
          double want = y0[i], want_abs = std::fabs(y0[i]);
          for (int64_t r = 0; r < rows; ++r) {
            want += double{w[r]} * HalfValue(kv[r * hd + i]);
            want_abs += std::fabs(double{w[r]} * HalfValue(kv[r * hd + i]));
          }
          EXPECT_NEAR(y[i], want, 1e-5 * want_abs + 1e-30) << "element " << i;
        }
      }
    }
  }
}

TEST(VecOpsTest, NanPropagates) {
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    std::vector<float> a(37, 1.0f), b(37, 2.0f), y(37, 0.0f);
    std::vector<uint16_t> h(37, FloatToHalf(0.5f));
    a[35] = std::numeric_limits<float>::quiet_NaN();
    h[3] = 0x7e00;  // half NaN
    EXPECT_TRUE(std::isnan(DotF32(a.data(), b.data(), 37)));
    EXPECT_TRUE(std::isnan(DotF32F16(b.data(), h.data(), 37)));
    AxpyF32(1.0f, a.data(), y.data(), 37);
    EXPECT_TRUE(std::isnan(y[35]));
    EXPECT_FALSE(std::isnan(y[34]));
    AxpyF16(1.0f, h.data(), y.data(), 37);
    EXPECT_TRUE(std::isnan(y[3]));
    EXPECT_FALSE(std::isnan(y[4]));
  }
}

}  // namespace
}  // namespace streamd::kernels::cpu
