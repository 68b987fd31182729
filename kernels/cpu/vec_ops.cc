// vec_ops.h: portable versions and the dispatch to vec_ops_avx2.cc (same ISA choice as
// matmul.h, see isa.cc).
#include "kernels/cpu/vec_ops.h"

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu {
namespace {

bool UseAvx2() { return ActiveIsa() != Isa::kPortable; }

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

void DotRowsF16(const float* q, const uint16_t* k, int64_t n_rows, int64_t hd, float scale,
                float* out) {
  if (UseAvx2()) return internal::DotRowsF16Avx2(q, k, n_rows, hd, scale, out);
  for (int64_t r = 0; r < n_rows; ++r) out[r] = DotF32F16(q, k + r * hd, hd) * scale;
}

void AxpyRowsF16(const float* w, const uint16_t* v, int64_t n_rows, int64_t hd, float* y) {
  if (UseAvx2()) return internal::AxpyRowsF16Avx2(w, v, n_rows, hd, y);
  for (int64_t r = 0; r < n_rows; ++r) AxpyF16(w[r], v + r * hd, y, hd);
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
