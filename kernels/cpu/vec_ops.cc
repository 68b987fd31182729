// vec_ops.h: portable versions and the dispatch to vec_ops_avx2.cc and vec_ops_avx512.cc (same
// ISA choice as matmul.h, see isa.cc).
#include "kernels/cpu/vec_ops.h"

#include <cmath>

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

void FloatToHalfRow(const float* x, uint16_t* out, int64_t n) {
  if (UseAvx2()) return internal::FloatToHalfRowAvx2(x, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(x[i]);
}

void HalfToFloatRow(const uint16_t* x, float* out, int64_t n) {
  if (UseAvx2()) return internal::HalfToFloatRowAvx2(x, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(x[i]);
}

}  // namespace streamd::kernels::cpu
