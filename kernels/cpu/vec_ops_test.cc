// vec_ops.h and the half conversions against plain double loops, per instruction-set level; the
// softmax exp against the correctly rounded exp (double, rounded once), in ulp.
// Half conversions are checked exhaustively: all 65536 halves, and every midpoint between two
// adjacent halves (the round-to-nearest-even cases) with its two float neighbours.
#include "kernels/cpu/vec_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"
#include "tests/support/kernels_cpu_test_util.h"

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

// The row forms attention uses on a run of keys, for a group of n_q queries sharing the rows:
// group sizes that fill a sub-group of 4 or not (and two sub-groups), head sizes with a partial
// 16-wide chunk (40, 24), not a multiple of 8 (12, 5), every row count up to 33 (whole key tiles
// of 16, 8, 4, 2 and every remainder), and leading dimensions wider than the rows. Elements
// around the outputs are checked untouched.
TEST(VecOpsTest, RowFormsMatchDoubleLoops) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  constexpr float kPoison = 7.0f;
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    for (int64_t n_q : {1, 2, 3, 4, 5, 7, 8}) {
      for (int64_t hd : {64, 128, 40, 24, 8, 12, 5}) {
        for (int64_t rows = 1; rows <= 33; ++rows) {
          SCOPED_TRACE(::testing::Message() << "n_q " << n_q << " hd " << hd << " rows " << rows);
          const int64_t ld = rows + 3;
          const std::vector<float> q = RandomFloats(n_q * hd, rng);
          const std::vector<float> w = RandomFloats(n_q * ld, rng);
          const std::vector<uint16_t> kv = RandomHalves(rows * hd, rng);
          const float scale = 0.125f;
          std::vector<float> dots(n_q * ld, kPoison);
          DotRowsF16(q.data(), n_q, kv.data(), rows, hd, scale, dots.data(), ld);
          for (int64_t i = 0; i < n_q; ++i) {
            for (int64_t r = 0; r < rows; ++r) {
              double want = 0, want_abs = 0;
              for (int64_t d = 0; d < hd; ++d) {
                const double t = double{q[i * hd + d]} * HalfValue(kv[r * hd + d]);
                want += t;
                want_abs += std::fabs(t);
              }
              ASSERT_NEAR(dots[i * ld + r], scale * want, 1e-5 * scale * want_abs + 1e-30)
                  << "query " << i << " row " << r;
            }
            for (int64_t r = rows; r < ld; ++r) ASSERT_EQ(dots[i * ld + r], kPoison);
          }

          const std::vector<float> y0 = RandomFloats(n_q * hd + 1, rng);
          std::vector<float> y = y0;
          AxpyRowsF16(w.data(), ld, n_q, kv.data(), rows, hd, y.data());
          ASSERT_EQ(y[n_q * hd], y0[n_q * hd]);
          for (int64_t i = 0; i < n_q; ++i) {
            for (int64_t d = 0; d < hd; ++d) {
              double want = y0[i * hd + d], want_abs = std::fabs(want);
              for (int64_t r = 0; r < rows; ++r) {
                const double t = double{w[i * ld + r]} * HalfValue(kv[r * hd + d]);
                want += t;
                want_abs += std::fabs(t);
              }
              ASSERT_NEAR(y[i * hd + d], want, 1e-5 * want_abs + 1e-30)
                  << "query " << i << " element " << d;
            }
          }
        }
      }
    }
  }
}

// Distance in units in the last place between two finite floats of one sign.
int64_t UlpDistance(float a, float b) {
  return std::abs(static_cast<int64_t>(Bits(a)) - static_cast<int64_t>(Bits(b)));
}

// The exp of ExpShiftedSum against the correctly rounded one (double exp, rounded once), where
// the softmax uses it (x - shift <= 0) and above.
TEST(SoftmaxTest, ExpShiftedSumWithinTwoUlp) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  // Random points over the whole range, dense near 0 where softmax weights are large, and the
  // ends of the range and of the flush to zero.
  std::vector<float> x;
  std::uniform_real_distribution<float> wide(-87.33f, 88.37f), near(-10.0f, 0.0f);
  for (int i = 0; i < 100000; ++i) x.push_back(wide(rng));
  for (int i = 0; i < 100000; ++i) x.push_back(near(rng));
  for (float v : {0.0f, -0.0f, -1e-30f, -1e-7f, 1e-7f, -0.34657359f, 0.34657359f, -1.0f, -87.33f,
                  -87.336f, 88.37f, std::log(2.0f) * 64}) {
    x.push_back(v);
  }
  for (float v = -87.3365f; v > -87.3366f; v = std::nextafter(v, -INFINITY)) x.push_back(v);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    std::vector<float> e = x;
    ExpShiftedSum(e.data(), static_cast<int64_t>(e.size()), 0.0f);  // the sum overflows here
    int64_t worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = static_cast<float>(std::exp(static_cast<double>(x[i])));
      if (x[i] < -87.3365448f) {
        // Under ln(2^-126): 0 on the SIMD levels, std::exp's subnormal on the portable one.
        ASSERT_LE(e[i], 1.2e-38f) << x[i];
        continue;
      }
      worst = std::max(worst, UlpDistance(e[i], want));
      ASSERT_LE(UlpDistance(e[i], want), 2)
          << "exp(" << x[i] << ") = " << e[i] << ", want " << want;
    }
    std::printf("%s: worst exp error %lld ulp\n", IsaName(isa), static_cast<long long>(worst));
  }
}

// SwiGLU's gate against a double computation: every length (tails), gates over the whole range
// activations reach and past where exp(-g) saturates or flushes, and NaN.
TEST(VecOpsTest, SiluMulMatchesDouble) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 576, 1536}) {
      SCOPED_TRACE(n);
      std::vector<float> gate = RandomFloats(n + 1, rng), up = RandomFloats(n, rng);
      for (float& g : gate) g *= 12.0f;
      if (n > 8) {
        gate[0] = 90.0f;    // exp(-g) flushes to 0: silu(g) = g
        gate[1] = -100.0f;  // exp(-g) saturates: silu(g) ~ 0
        gate[2] = 0.0f;
      }
      gate[n] = 7.0f;
      const std::vector<float> g0 = gate;
      SiluMul(gate.data(), up.data(), n);
      ASSERT_EQ(gate[n], 7.0f);  // past n: untouched
      for (int64_t i = 0; i < n; ++i) {
        const double g = g0[i];
        const double want = g / (1.0 + std::exp(-g)) * up[i];
        // exp within 2 ulp, then a division and a product: a few f32 roundings. Below
        // g = -88.37 exp(-g) saturates at exp(88.37): |silu| < |g| / 2.4e38 instead of ~0.
        ASSERT_NEAR(gate[i], want, 6e-7 * std::fabs(want) + 1e-33) << "g=" << g << " up=" << up[i];
      }
    }
    std::vector<float> gate(20, 1.0f), up(20, 1.0f);
    gate[13] = std::numeric_limits<float>::quiet_NaN();
    SiluMul(gate.data(), up.data(), 20);
    EXPECT_TRUE(std::isnan(gate[13]));
    EXPECT_FALSE(std::isnan(gate[12]));
  }
}

// GeGLU's gate against the tanh form computed in double (not the exp form the kernels use), on
// random gates over GELU's whole range, its saturations and NaN.
TEST(VecOpsTest, GeluTanhMulMatchesDouble) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 640, 2048}) {
      SCOPED_TRACE(n);
      std::vector<float> gate = RandomFloats(n + 1, rng), up = RandomFloats(n, rng);
      for (float& g : gate) g *= 6.0f;
      if (n > 8) {
        gate[0] = 40.0f;   // exp(-2u) flushes to 0: gelu(g) = g
        gate[1] = -40.0f;  // exp(-2u) saturates: gelu(g) ~ 0
        gate[2] = 0.0f;
        gate[3] = 1e20f;   // g^3 overflows: still g
        gate[4] = -1e20f;  // still ~0
      }
      gate[n] = 7.0f;
      const std::vector<float> g0 = gate;
      GeluTanhMul(gate.data(), up.data(), n);
      ASSERT_EQ(gate[n], 7.0f);  // past n: untouched
      for (int64_t i = 0; i < n; ++i) {
        const double g = g0[i];
        const double u = std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g);
        const double want = 0.5 * g * (1.0 + std::tanh(u)) * up[i];
        // The exp within 2 ulp of an argument rounded a few times (~|2u| * 2^-23 relative), then
        // a division and a product. Where gelu(g) is tiny (g << 0) its relative error grows with
        // |2u|; the absolute bound below covers it.
        ASSERT_NEAR(gate[i], want, 2e-6 * std::fabs(want) + 2e-7 * std::fabs(g * up[i]))
            << "g=" << g << " up=" << up[i];
      }
    }
    std::vector<float> gate(20, 1.0f), up(20, 1.0f);
    gate[13] = std::numeric_limits<float>::quiet_NaN();
    GeluTanhMul(gate.data(), up.data(), 20);
    EXPECT_TRUE(std::isnan(gate[13]));
    EXPECT_FALSE(std::isnan(gate[12]));
  }
}

// Softmax shapes: every length with a shift (the max), against std::exp and a double sum; the
// tails leave the elements past n alone; NaN and -inf inputs.
TEST(SoftmaxTest, MaxAndExpShiftedSumOverLengths) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 197, 1000}) {
      SCOPED_TRACE(n);
      std::vector<float> s = RandomFloats(n + 1, rng);
      for (float& v : s) v *= 8.0f;  // spread like attention scores
      s[n] = 7.0f;
      const float max = MaxF32(s.data(), n);
      ASSERT_EQ(max, *std::max_element(s.begin(), s.begin() + n));
      const std::vector<float> before = s;
      const float sum = ExpShiftedSum(s.data(), n, max);
      ASSERT_EQ(s[n], 7.0f);
      double want_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(static_cast<double>(before[i] - max));
        want_sum += want;
        ASSERT_NEAR(s[i], want, 2.4e-7 * want + 1e-38) << i;
      }
      EXPECT_NEAR(sum, want_sum, (n / 8.0 + 4) * 0x1p-24 * want_sum);
    }
    std::vector<float> s(37, -1.0f);
    s[20] = -INFINITY;
    float sum = ExpShiftedSum(s.data(), 37, 0.0f);
    EXPECT_EQ(s[20], 0.0f);
    EXPECT_NEAR(sum, 36 * std::exp(-1.0), 1e-5);
    s.assign(37, -1.0f);
    s[35] = std::numeric_limits<float>::quiet_NaN();
    sum = ExpShiftedSum(s.data(), 37, 0.0f);
    EXPECT_TRUE(std::isnan(s[35]));
    EXPECT_FALSE(std::isnan(s[34]));
    EXPECT_TRUE(std::isnan(sum));
  }
}

// The residual step against a double computation, with and without the add: every length
// (masked tails), rows with a large spread of magnitudes (as the residual stream has), values
// past n left alone; the products are the same at every level, so only the f64 sum's order can
// move scale, and not by more than its f32 rounding.
TEST(VecOpsTest, AddRmsNormRowMatchesDouble) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 576, 1000}) {
    SCOPED_TRACE(n);
    std::vector<float> x0 = RandomFloats(n + 1, rng), delta = RandomFloats(n, rng),
                       weight = RandomFloats(n, rng);
    if (n > 8) x0[3] *= 300.0f;  // an outlier channel
    const float eps = 1e-5f;
    for (bool add : {false, true}) {
      SCOPED_TRACE(add ? "with delta" : "no delta");
      std::vector<double> summed(n);
      double sq = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        summed[i] = add ? static_cast<double>(x0[i] + delta[i]) : x0[i];  // the f32 add
        sq += summed[i] * summed[i];
      }
      const double scale = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
      std::vector<float> portable_out;
      for (Isa isa : SupportedIsas()) {
        SCOPED_TRACE(IsaName(isa));
        ScopedIsa scoped(isa);
        std::vector<float> x = x0, out(n + 1, 7.0f);
        AddRmsNormRow(x.data(), add ? delta.data() : nullptr, weight.data(), eps, n, out.data());
        ASSERT_EQ(out[n], 7.0f);
        ASSERT_EQ(Bits(x[n]), Bits(x0[n]));
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(Bits(x[i]), Bits(static_cast<float>(summed[i]))) << i;
          const double want = summed[i] * scale * weight[i];
          // scale rounded to f32, then two f32 products: three roundings.
          ASSERT_NEAR(out[i], want, 2.5e-7 * std::fabs(want) + 1e-30) << i;
        }
        if (portable_out.empty()) {
          portable_out = out;
        } else {
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_NEAR(out[i], portable_out[i], 1.2e-7 * std::fabs(portable_out[i])) << i;
          }
        }
      }
    }
  }
}

// RoPE's rotation: the same bits at every level (separate products, no fused multiply-add), the
// rotation of a double computation within two f32 roundings, odd vector counts and head sizes
// that are not a multiple of 16 (masked tails), values past the vectors left alone.
TEST(VecOpsTest, RotatePairsMatchesDoubleAndIsTheSameAtEveryLevel) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> angle(-3.2, 3.2);
  for (int64_t dim : {2, 6, 16, 18, 64, 80, 128}) {
    for (int64_t vectors : {1, 3, 9}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " vectors " << vectors);
      std::vector<float> cos(dim / 2), sin(dim / 2);
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double a = angle(rng);
        cos[i] = static_cast<float>(std::cos(a));
        sin[i] = static_cast<float>(std::sin(a));
      }
      const std::vector<float> x0 = RandomFloats(vectors * dim + 1, rng);
      std::vector<float> first;
      for (Isa isa : SupportedIsas()) {
        SCOPED_TRACE(IsaName(isa));
        ScopedIsa scoped(isa);
        std::vector<float> x = x0;
        RotatePairs(x.data(), vectors, dim, cos.data(), sin.data());
        ASSERT_EQ(Bits(x.back()), Bits(x0.back()));
        for (int64_t v = 0; v < vectors; ++v) {
          for (int64_t i = 0; i < dim / 2; ++i) {
            const int64_t e = v * dim + 2 * i;
            const double a = x0[e], b = x0[e + 1];
            const double bound = 2.5e-7 * (std::fabs(a) + std::fabs(b));
            ASSERT_NEAR(x[e], a * cos[i] - b * sin[i], bound) << e;
            ASSERT_NEAR(x[e + 1], a * sin[i] + b * cos[i], bound) << e;
          }
        }
        if (first.empty()) {
          first = x;
        } else {
          for (size_t e = 0; e < x.size(); ++e) ASSERT_EQ(Bits(x[e]), Bits(first[e])) << e;
        }
      }
    }
  }
}

// NEOX layout: pair i is (i, i + dim/2) of each vector; the same rotation as RotatePairs's, so
// on a vector whose halves are interleaved into pairs both give the same bits.
TEST(VecOpsTest, RotateHalvesRotatesHalfAHeadApartLikeRotatePairs) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> angle(-3.2, 3.2);
  for (int64_t dim : {2, 6, 64, 128}) {
    for (int64_t vectors : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " vectors " << vectors);
      const int64_t half = dim / 2;
      std::vector<float> cos(half), sin(half);
      for (int64_t i = 0; i < half; ++i) {
        const double a = angle(rng);
        cos[i] = static_cast<float>(std::cos(a));
        sin[i] = static_cast<float>(std::sin(a));
      }
      const std::vector<float> x0 = RandomFloats(vectors * dim + 1, rng);
      std::vector<float> neox = x0, pairs(x0.size());
      pairs.back() = x0.back();
      for (int64_t v = 0; v < vectors; ++v) {
        for (int64_t i = 0; i < half; ++i) {
          pairs[v * dim + 2 * i] = x0[v * dim + i];
          pairs[v * dim + 2 * i + 1] = x0[v * dim + half + i];
        }
      }
      RotateHalves(neox.data(), vectors, dim, cos.data(), sin.data());
      RotatePairs(pairs.data(), vectors, dim, cos.data(), sin.data());
      ASSERT_EQ(Bits(neox.back()), Bits(x0.back()));
      for (int64_t v = 0; v < vectors; ++v) {
        for (int64_t i = 0; i < half; ++i) {
          ASSERT_EQ(Bits(neox[v * dim + i]), Bits(pairs[v * dim + 2 * i])) << v << " " << i;
          ASSERT_EQ(Bits(neox[v * dim + half + i]), Bits(pairs[v * dim + 2 * i + 1]))
              << v << " " << i;
        }
      }
    }
  }
}

// The greedy pick: the lowest index of the maximum wherever it sits (every lane of the 8-lane
// scan and the tail), ties, NaN skipped, all -inf or NaN giving 0; against a plain scan.
TEST(VecOpsTest, ArgmaxF32IsTheFirstLargestSkippingNan) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {1, 7, 8, 9, 17, 100, 49152}) {
    SCOPED_TRACE(n);
    std::vector<float> x = RandomFloats(n, rng);
    for (int trial = 0; trial < 20; ++trial) {
      const auto at = static_cast<int64_t>(rng() % n);
      x[at] = 50.0f + static_cast<float>(trial);
      if (n > 2) x[(at + 1 + rng() % (n - 1)) % n] = nan;
      int64_t want = 0;
      float best = -INFINITY;
      for (int64_t i = 0; i < n; ++i) {
        if (x[i] > best) best = x[i], want = i;
      }
      ASSERT_EQ(ArgmaxF32(x.data(), n), want);
      if (want + 1 < n) {  // a tie after the first occurrence keeps the first
        const int64_t later = want + 1 + static_cast<int64_t>(rng() % (n - want - 1));
        const float kept = x[later];
        x[later] = x[want];
        ASSERT_EQ(ArgmaxF32(x.data(), n), want);
        x[later] = kept;
      }
    }
  }
  std::vector<float> none(13, -INFINITY);
  EXPECT_EQ(ArgmaxF32(none.data(), 13), 0);
  none[4] = nan;
  EXPECT_EQ(ArgmaxF32(none.data(), 13), 0);
  none[11] = -1e30f;
  EXPECT_EQ(ArgmaxF32(none.data(), 13), 11);
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
