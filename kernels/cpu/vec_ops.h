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
// out[i] = half(x[i]) (round to nearest even), and back.
void FloatToHalfRow(const float* x, uint16_t* out, int64_t n);
void HalfToFloatRow(const uint16_t* x, float* out, int64_t n);

}  // namespace streamd::kernels::cpu
