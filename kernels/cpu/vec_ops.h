// Small vector primitives for attention and elementwise layers on the CPU (AVX2 or portable,
// same run-time choice as matmul.h). Half values are IEEE binary16 bit patterns.
#pragma once

#include <cstdint>

namespace streamd::kernels::cpu {

// sum_i a[i] * b[i]
float DotF32(const float* a, const float* b, int64_t n);
// sum_i a[i] * half(b[i])
float DotF32F16(const float* a, const uint16_t* b, int64_t n);
// y[i] += alpha * x[i]
void AxpyF32(float alpha, const float* x, float* y, int64_t n);
// y[i] += alpha * half(x[i])
void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n);
// Rows of a paged K or V block ([n_rows, hd] halves, contiguous), for attention: one call per
// run of keys instead of one per key, with the query (or the output) held in registers.
//   DotRowsF16:  out[r] = scale * sum_i q[i] * half(k[r * hd + i])      r in [0, n_rows)
//   AxpyRowsF16: y[i] += sum_r w[r] * half(v[r * hd + i])               i in [0, hd)
void DotRowsF16(const float* q, const uint16_t* k, int64_t n_rows, int64_t hd, float scale,
                float* out);
void AxpyRowsF16(const float* w, const uint16_t* v, int64_t n_rows, int64_t hd, float* y);
// out[i] = half(x[i]) (round to nearest even), and back.
void FloatToHalfRow(const float* x, uint16_t* out, int64_t n);
void HalfToFloatRow(const uint16_t* x, float* out, int64_t n);

}  // namespace streamd::kernels::cpu
