// Per-instruction-set entry points behind matmul.h and vec_ops.h; matmul.cc and vec_ops.cc
// dispatch to them. Not part of the public API.
//
// Activation buffer layout (opaque to callers, see matmul.h):
//   quantized weights (Q4_0, Q4_1, Q8_0): [n_tokens, k/32] BlockQ8_1, token-major; d = amax/127,
//     qs = round-half-even(x/d) in [-127, 127], s = d * sum(qs). Non-finite input in a block
//     makes d = s = NaN and qs = 0, so the NaN reaches every output that reads the block.
//   float weights (F32, F16, BF16): [n_tokens, k] f32, a dense copy of x.
//
// The AVX2 translation units are compiled with -mavx2 -mfma -mf16c; they must not call inline
// functions from shared headers (HalfToFloat, std:: templates...) that could be emitted there
// and then picked by the linker for portable callers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu::internal {

// Quantizes one row x: [k] (k % 32 == 0) into out: [k/32].
void QuantizeRowQ8_1Portable(const float* x, int64_t k, BlockQ8_1* out);
void QuantizeRowQ8_1Avx2(const float* x, int64_t k, BlockQ8_1* out);

// Quantized weights (Q4_0, Q4_1, Q8_0) times xq: [n_tokens, k/32] BlockQ8_1.
void MatMulQuantPortable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                         const BlockQ8_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                         int64_t row_begin, int64_t row_end);
void MatMulQuantAvx2(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                     const BlockQ8_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                     int64_t row_begin, int64_t row_end);

// Float weights (F32, F16, BF16) times xq: [n_tokens, k] f32.
void MatMulFloatPortable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                         const float* xq, int64_t n_tokens, float* out, int64_t ldo,
                         int64_t row_begin, int64_t row_end);
void MatMulFloatAvx2(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                     const float* xq, int64_t n_tokens, float* out, int64_t ldo,
                     int64_t row_begin, int64_t row_end);

// vec_ops.h, AVX2 versions (vec_ops_avx2.cc); the portable ones live in vec_ops.cc.
float DotF32Avx2(const float* a, const float* b, int64_t n);
float DotF32F16Avx2(const float* a, const uint16_t* b, int64_t n);
void AxpyF32Avx2(float alpha, const float* x, float* y, int64_t n);
void AxpyF16Avx2(float alpha, const uint16_t* x, float* y, int64_t n);
void FloatToHalfRowAvx2(const float* x, uint16_t* out, int64_t n);
void HalfToFloatRowAvx2(const uint16_t* x, float* out, int64_t n);

}  // namespace streamd::kernels::cpu::internal
