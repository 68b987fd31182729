// Portable C++ reference for the activation quantizer and every matmul.h product. The AVX2
// kernels must agree with it to float rounding on the same quantized activations; it is also
// the path for CPUs without AVX2.
//
// Per block b of 32 values, with activation block (dx, sx, y[32]) (see matmul_internal.h):
//   Q4_1: dw * dx * sum_j q_j y_j + mw * sx            (w_j = dw q_j + mw,  q_j in [0,15])
//   Q4_0: dw * (dx * sum_j q_j y_j - 8 sx)             (w_j = dw (q_j - 8), q_j in [0,15])
//   Q8_0: dw * dx * sum_j q_j y_j                      (w_j = dw q_j)
//   Q5_0: dw * dx * sum_j (q_j - 16) y_j               (w_j = dw (q_j - 16), q_j in [0,31])
//   Q5_1: dw * dx * sum_j q_j y_j + mw * sx            (w_j = dw q_j + mw,  q_j in [0,31])
// with |y_j| <= kQ16Max = 2047. The integer sums are exact in i32, and in f32 too: |sum| <= 32 * 15
// * 2047 < 2^20 for the 4-bit formats, <= 32 * 31 * 2047 < 2^21 for Q5_0 and Q5_1, <= 32 * 128 *
// 2047 < 2^23 for Q8_0. Blocks are accumulated in f32.
//   Q6_K: d * dx * sum_j sc_j (q_j - 32) y_j         (w_j = d sc_j (q_j - 32), q_j in [0,63],
//                                                      sc_j the i8 scale of j's 16 values)
// per 32-value block of its 256-value super-blocks: the i32 sum is exact (|sc (q - 32)| <= 128 *
// 32, so |sum| <= 32 * 4096 * 2047 < 2^28) but may round in f32 (one rounding, above 2^24, the
// same at every level: they convert the same i32).
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"

namespace streamd::kernels::cpu::internal {
namespace {

constexpr int kHalf = kQuantBlock / 2;

// sum_j q_j y_j with q_j the 4-bit values of qs (low nibbles first, then high nibbles).
int32_t DotNibbles(const uint8_t* qs, const int16_t* y) {
  int32_t sum = 0;
  for (int j = 0; j < kHalf; ++j) {
    sum += static_cast<int32_t>(qs[j] & 0xf) * y[j];
    sum += static_cast<int32_t>(qs[j] >> 4) * y[j + kHalf];
  }
  return sum;
}

float DotRowQ4_1(const BlockQ4_1* w, const BlockQ16_1* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const float sumi = static_cast<float>(DotNibbles(w[b].qs, x[b].qs));
    acc += HalfToFloat(w[b].d) * x[b].d * sumi + HalfToFloat(w[b].m) * x[b].s;
  }
  return acc;
}

float DotRowQ4_0(const BlockQ4_0* w, const BlockQ16_1* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const float sumi = static_cast<float>(DotNibbles(w[b].qs, x[b].qs));
    acc += HalfToFloat(w[b].d) * (x[b].d * sumi - 8.0f * x[b].s);
  }
  return acc;
}

float DotRowQ8_0(const BlockQ8_0* w, const BlockQ16_1* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi = 0;
    for (int j = 0; j < kQuantBlock; ++j) sumi += static_cast<int32_t>(w[b].qs[j]) * x[b].qs[j];
    acc += HalfToFloat(w[b].d) * x[b].d * static_cast<float>(sumi);
  }
  return acc;
}

// sum_j (q_j + bias) y_j over one Q5_0 / Q5_1 block (bias -16 / 0).
int32_t DotQ5(const uint8_t* qs, const uint8_t* qh, int32_t bias, const int16_t* y) {
  int32_t sum = 0;
  for (int j = 0; j < kQuantBlock; ++j) sum += (Q5Value(qs, qh, j) + bias) * y[j];
  return sum;
}

float DotRowQ5_0(const BlockQ5_0* w, const BlockQ16_1* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const float sumi = static_cast<float>(DotQ5(w[b].qs, w[b].qh, -16, x[b].qs));
    acc += HalfToFloat(w[b].d) * x[b].d * sumi;
  }
  return acc;
}

float DotRowQ5_1(const BlockQ5_1* w, const BlockQ16_1* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const float sumi = static_cast<float>(DotQ5(w[b].qs, w[b].qh, 0, x[b].qs));
    acc += HalfToFloat(w[b].d) * x[b].d * sumi + HalfToFloat(w[b].m) * x[b].s;
  }
  return acc;
}

// Block b of a Q6_K row (quant_blocks.h): half n, quarter j of super-block b / 8.
float DotRowQ6_K(const BlockQ6_K* w, const BlockQ16_1* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& s = w[b / 8];
    const int n = static_cast<int>(b % 8 / 4), j = static_cast<int>(b % 4);
    int32_t sumi = 0;
    for (int l = 0; l < kQuantBlock; ++l) {
      const int low = s.ql[64 * n + 32 * (j & 1) + l] >> (4 * (j >> 1)) & 0xf;
      const int high = s.qh[32 * n + l] >> (2 * j) & 3;
      sumi += s.sc[8 * n + 2 * j + l / 16] * ((low | high << 4) - 32) * x[b].qs[l];
    }
    acc += HalfToFloat(s.d) * x[b].d * static_cast<float>(sumi);
  }
  return acc;
}

template <typename Convert>
float DotRowFloat(const uint8_t* w, const float* x, int64_t k, Convert convert) {
  // Eight partial sums: shorter rounding chains, and the compiler can vectorize it.
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += convert(w, i + l) * x[i + l];
  }
  for (; i < k; ++i) acc[0] += convert(w, i) * x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

uint16_t LoadU16(const uint8_t* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, sizeof v);
  return v;
}

}  // namespace

void QuantizeRowQ16_1Portable(const float* x, int64_t k, BlockQ16_1* out) {
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f;
    bool finite = true;
    for (int j = 0; j < kQuantBlock; ++j) {
      finite = finite && std::isfinite(xb[j]);
      amax = std::fmax(amax, std::fabs(xb[j]));
    }
    BlockQ16_1& o = out[b];
    if (!finite) {
      o.d = o.s = std::nanf("");
      std::memset(o.qs, 0, sizeof o.qs);
      continue;
    }
    // A scale below FLT_MIN (amax < 3.9e-34, or 0) would be subnormal, too inexact to keep q
    // within 12 bits, and its reciprocal may overflow: such a block quantizes to zero.
    float d = amax / static_cast<float>(kQ16Max);
    if (!(d >= FLT_MIN)) d = 0.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQuantBlock; ++j) {
      // nearbyint rounds half to even, like the AVX2 quantizer's _mm256_round_ps. |xb[j] * id|
      // exceeds 2047 by at most 2047 * 3 * 2^-24 < 0.001 (three f32 roundings), so q stays in
      // [-2047, 2047].
      const auto q = static_cast<int32_t>(std::nearbyint(xb[j] * id));
      o.qs[j] = static_cast<int16_t>(q);
      sum += q;
    }
    o.d = d;
    o.s = d * static_cast<float>(sum);
  }
}

void MatMulQuantPortable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                         const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                         int64_t row_begin, int64_t row_end) {
  const int64_t nb = k / kQuantBlock;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const BlockQ16_1* x = xq + t * nb;  // [nb]
    float* o = out + t * ldo;
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = w + static_cast<size_t>(r) * w_row_bytes;
      switch (type) {
        case WeightType::kQ4_0:
          o[r] = DotRowQ4_0(reinterpret_cast<const BlockQ4_0*>(row), x, nb);
          break;
        case WeightType::kQ4_1:
          o[r] = DotRowQ4_1(reinterpret_cast<const BlockQ4_1*>(row), x, nb);
          break;
        case WeightType::kQ8_0:
          o[r] = DotRowQ8_0(reinterpret_cast<const BlockQ8_0*>(row), x, nb);
          break;
        case WeightType::kQ5_0:
          o[r] = DotRowQ5_0(reinterpret_cast<const BlockQ5_0*>(row), x, nb);
          break;
        case WeightType::kQ5_1:
          o[r] = DotRowQ5_1(reinterpret_cast<const BlockQ5_1*>(row), x, nb);
          break;
        case WeightType::kQ6_K:
          o[r] = DotRowQ6_K(reinterpret_cast<const BlockQ6_K*>(row), x, nb);
          break;
        default:
          return;
      }
    }
  }
}

void MatMulFloatPortable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                         const float* xq, int64_t n_tokens, float* out, int64_t ldo,
                         int64_t row_begin, int64_t row_end) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* x = xq + t * k;  // [k]
    float* o = out + t * ldo;
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = w + static_cast<size_t>(r) * w_row_bytes;
      switch (type) {
        case WeightType::kF32:
          o[r] = DotRowFloat(row, x, k, [](const uint8_t* p, int64_t i) {
            float v;
            std::memcpy(&v, p + 4 * i, sizeof v);
            return v;
          });
          break;
        case WeightType::kF16:
          o[r] = DotRowFloat(
              row, x, k, [](const uint8_t* p, int64_t i) { return HalfToFloat(LoadU16(p, i)); });
          break;
        case WeightType::kBF16:
          o[r] = DotRowFloat(
              row, x, k, [](const uint8_t* p, int64_t i) { return Bf16ToFloat(LoadU16(p, i)); });
          break;
        default:
          return;
      }
    }
  }
}

}  // namespace streamd::kernels::cpu::internal
