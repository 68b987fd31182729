// vec_ops.h: portable versions and the dispatch to vec_ops_avx2.cc and vec_ops_avx512.cc (same
// ISA choice as matmul.h, see isa.cc).
#include "kernels/cpu/vec_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu {
namespace {

bool UseAvx2() { return ActiveIsa() != Isa::kPortable; }
// kAvx512Vnni and every level above it (kAmx) include AVX-512 F/BW/VL.
bool UseAvx512() { return ActiveIsa() >= Isa::kAvx512Vnni; }

}  // namespace

float DotF32(const float* a, const float* b, int64_t n) {
  if (UseAvx2()) return internal::DotF32Avx2(a, b, n);
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) acc[0] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

float DotF32F16(const float* a, const uint16_t* b, int64_t n) {
  if (UseAvx2()) return internal::DotF32F16Avx2(a, b, n);
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * HalfToFloat(b[i + l]);
  }
  for (; i < n; ++i) acc[0] += a[i] * HalfToFloat(b[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void AxpyF32(float alpha, const float* x, float* y, int64_t n) {
  if (UseAvx2()) return internal::AxpyF32Avx2(alpha, x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  if (UseAvx2()) return internal::AxpyF16Avx2(alpha, x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * HalfToFloat(x[i]);
}

void DotRowsF16(const float* q, int64_t n_q, const uint16_t* k, int64_t n_rows, int64_t hd,
                float scale, float* out, int64_t ldo) {
  if (UseAvx512()) return internal::DotRowsF16Avx512(q, n_q, k, n_rows, hd, scale, out, ldo);
  if (UseAvx2()) return internal::DotRowsF16Avx2(q, n_q, k, n_rows, hd, scale, out, ldo);
  for (int64_t i = 0; i < n_q; ++i) {
    for (int64_t r = 0; r < n_rows; ++r) {
      out[i * ldo + r] = DotF32F16(q + i * hd, k + r * hd, hd) * scale;
    }
  }
}

void AxpyRowsF16(const float* w, int64_t ldw, int64_t n_q, const uint16_t* v, int64_t n_rows,
                 int64_t hd, float* y) {
  if (UseAvx512()) return internal::AxpyRowsF16Avx512(w, ldw, n_q, v, n_rows, hd, y);
  if (UseAvx2()) return internal::AxpyRowsF16Avx2(w, ldw, n_q, v, n_rows, hd, y);
  for (int64_t i = 0; i < n_q; ++i) {
    for (int64_t r = 0; r < n_rows; ++r) AxpyF16(w[i * ldw + r], v + r * hd, y + i * hd, hd);
  }
}

void DotRowsI8(const float* q, int64_t n_q, const int8_t* k, int64_t n_rows, int64_t hd,
               float scale, float* out, int64_t ldo) {
  if (UseAvx512()) return internal::DotRowsI8Avx512(q, n_q, k, n_rows, hd, scale, out, ldo);
  for (int64_t i = 0; i < n_q; ++i) {
    for (int64_t r = 0; r < n_rows; ++r) {
      float acc = 0.0f;
      for (int64_t d = 0; d < hd; ++d) acc += q[i * hd + d] * static_cast<float>(k[r * hd + d]);
      out[i * ldo + r] = acc * scale;
    }
  }
}

void AxpyRowsI8(const float* w, int64_t ldw, int64_t n_q, const int8_t* v, int64_t n_rows,
                int64_t hd, float* y) {
  if (UseAvx512()) return internal::AxpyRowsI8Avx512(w, ldw, n_q, v, n_rows, hd, y);
  for (int64_t i = 0; i < n_q; ++i) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float a = w[i * ldw + r];
      for (int64_t d = 0; d < hd; ++d) y[i * hd + d] += a * static_cast<float>(v[r * hd + d]);
    }
  }
}

float MaxF32(const float* x, int64_t n) {
  if (UseAvx512()) return internal::MaxF32Avx512(x, n);
  if (UseAvx2()) return internal::MaxF32Avx2(x, n);
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float ExpShiftedSum(float* x, int64_t n, float shift) {
  if (UseAvx512()) return internal::ExpShiftedSumAvx512(x, n, shift);
  if (UseAvx2()) return internal::ExpShiftedSumAvx2(x, n, shift);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return static_cast<float>(sum);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  if (UseAvx512()) return internal::SiluMulAvx512(gate, up, n);
  if (UseAvx2()) return internal::SiluMulAvx2(gate, up, n);
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeluTanhMul(float* gate, const float* up, int64_t n) {
  if (UseAvx512()) return internal::GeluTanhMulAvx512(gate, up, n);
  if (UseAvx2()) return internal::GeluTanhMulAvx2(gate, up, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g * (kGeluC0 + kGeluC1 * g * g))) * up[i];
  }
}

void AddRmsNormRow(float* x, const float* delta, const float* weight, float eps, int64_t n,
                   float* out) {
  if (UseAvx512()) return internal::AddRmsNormRowAvx512(x, delta, weight, eps, n, out);
  if (delta != nullptr) {
    for (int64_t i = 0; i < n; ++i) x[i] += delta[i];
  }
  // Four independent sums: one chain of n dependent f64 additions took ~4 cycles per value.
  constexpr int kLanes = 4;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (; i < n; ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
  const double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  const float scale = internal::RmsScale(sum, n, eps);
  for (i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void RotatePairs(float* x, int64_t n_vectors, int64_t dim, const float* cos, const float* sin) {
  if (UseAvx512()) return internal::RotatePairsAvx512(x, n_vectors, dim, cos, sin);
  for (int64_t v = 0; v < n_vectors; ++v) {
    float* xv = x + v * dim;
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float a = xv[2 * i], b = xv[2 * i + 1];
      const float ac = a * cos[i], bs = b * sin[i], as = a * sin[i], bc = b * cos[i];
      xv[2 * i] = ac - bs;
      xv[2 * i + 1] = as + bc;
    }
  }
}

void RotateHalves(float* x, int64_t n_vectors, int64_t dim, const float* cos, const float* sin) {
  const int64_t half = dim / 2;
  for (int64_t v = 0; v < n_vectors; ++v) {
    float* lo = x + v * dim;
    float* hi = lo + half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = lo[i], b = hi[i];
      const float ac = a * cos[i], bs = b * sin[i], as = a * sin[i], bc = b * cos[i];
      lo[i] = ac - bs;
      hi[i] = as + bc;
    }
  }
}

int64_t ArgmaxF32(const float* x, int64_t n) {
  // A single running max is one long dependency chain; eight independent ones let the CPU
  // overlap them (the compiler may not reorder float max itself, because of NaN semantics:
  // `v > m ? v : m` keeps m when v is NaN).
  constexpr int64_t kLanes = 8;
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) {
      lane_max[j] = x[i + j] > lane_max[j] ? x[i + j] : lane_max[j];
    }
  }
  for (; i < n; ++i) lane_max[0] = x[i] > lane_max[0] ? x[i] : lane_max[0];
  const float best = *std::max_element(lane_max, lane_max + kLanes);
  if (best == -std::numeric_limits<float>::infinity()) return 0;
  // The first occurrence is the lowest index; on random logits this stops half way on average.
  return std::find(x, x + n, best) - x;
}

void FloatToHalfRow(const float* x, uint16_t* out, int64_t n) {
  if (UseAvx2()) return internal::FloatToHalfRowAvx2(x, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(x[i]);
}

void HalfToFloatRow(const uint16_t* x, float* out, int64_t n) {
  if (UseAvx2()) return internal::HalfToFloatRowAvx2(x, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(x[i]);
}

}  // namespace streamd::kernels::cpu
