// Small vector primitives for attention and elementwise layers on the CPU (AVX-512, AVX2 or
// portable, same run-time choice as matmul.h: the attention rows, softmax helpers, SwiGLU and
// the residual steps (AddRmsNormRow, RotatePairs) take AVX-512 at kAvx512Vnni and above; the
// dots, axpys and half conversions AVX2 at every level above kPortable; ArgmaxF32 is portable
// code at every level). Half values are IEEE binary16 bit patterns.
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
// Attention over a run of keys: rows of a paged K or V block ([n_rows, hd] halves, contiguous)
// shared by a group of n_q queries (the query heads of one KV head under GQA), q and y
// [n_q, hd], scores and weights [n_q, ld]:
//   DotRowsF16:  out[i * ldo + r] = scale * sum_d q[i * hd + d] * half(k[r * hd + d])
//   AxpyRowsF16: y[i * hd + d] += sum_r w[i * ldw + r] * half(v[r * hd + d])
// for i < n_q, r < n_rows, d < hd. Each K/V row is converted from f16 once per group of up to
// 4 queries (larger groups run in such sub-groups) rather than once per query. Any n_q, n_rows
// and hd >= 1 work; hd % 8 == 0 takes the vector path on AVX2 (any hd on AVX-512).
void DotRowsF16(const float* q, int64_t n_q, const uint16_t* k, int64_t n_rows, int64_t hd,
                float scale, float* out, int64_t ldo);
void AxpyRowsF16(const float* w, int64_t ldw, int64_t n_q, const uint16_t* v, int64_t n_rows,
                 int64_t hd, float* y);
// The same over rows of int8 values (an int8 KV cache): the rows' integers, unscaled; the caller
// folds the per-channel scales into q before and into y after (paged_attention.h). Every int8
// is exact in f32, so only the order of the additions differs between levels. AVX-512 at
// kAvx512Vnni and above; portable code below.
void DotRowsI8(const float* q, int64_t n_q, const int8_t* k, int64_t n_rows, int64_t hd,
               float scale, float* out, int64_t ldo);
void AxpyRowsI8(const float* w, int64_t ldw, int64_t n_q, const int8_t* v, int64_t n_rows,
                int64_t hd, float* y);
// Softmax helpers.
// max_i x[i] (n >= 1). With a NaN in x the result is NaN or the max of the others; either way
// ExpShiftedSum then turns the NaN into a NaN sum.
float MaxF32(const float* x, int64_t n);
// x[i] = exp(x[i] - shift) for i < n; returns the sum of the new x[i]. The SIMD levels use a
// polynomial exp (the same bits on AVX2 and AVX-512) within 1 ulp of the correctly rounded exp
// for every float x[i] - shift in [-87.33, 88.37] (checked exhaustively: 99.5% of them correctly
// rounded; softmax passes <= 0). Below ln(2^-126) = -87.34, where exp is under the smallest
// normal float, they give 0 (std::exp: a subnormal < 1.2e-38); above 88.37, exp(88.37). NaN
// stays NaN. The sum is accumulated in f32, in 8 (AVX2) or 16 (AVX-512) lanes added together at
// the end: at most n / 8 + 4 roundings, a relative error under 8e-6 for 1000 keys and typically
// far less, against 5e-4 for the f16 rounding of K and V. The portable level calls std::exp and
// sums in f64.
float ExpShiftedSum(float* x, int64_t n, float shift);
// SwiGLU's gate: gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)), with the exp of
// ExpShiftedSum (std::exp at the portable level). A scalar std::exp per element was ~8% of a
// 16-session decode step (16 x 1536 x 30 of them).
void SiluMul(float* gate, const float* up, int64_t n);
// GeGLU's gate (Gemma): gate[i] = gelu(gate[i]) * up[i] with the tanh approximation,
// gelu(g) = g/2 * (1 + tanh(u)), u = sqrt(2/pi) * (g + 0.044715 g^3), computed as the equal
// g / (1 + exp(-2u)), with SiluMul's exp.
void GeluTanhMul(float* gate, const float* up, int64_t n);
// 2 * sqrt(2 / pi) and 2 * sqrt(2 / pi) * 0.044715: -2u = -g * (kGeluC0 + kGeluC1 * g^2).
inline constexpr float kGeluC0 = 1.5957691216057308f;
inline constexpr float kGeluC1 = 0.0713548162726009f;
// A Llama layer's residual step on one row: x[i] += delta[i] (no add when delta is null), then
// out[i] = x[i] * scale * weight[i] with scale = 1 / sqrt(sum_i x[i]^2 / n + eps). The squares
// are exact in f64 and summed there, in 4 lanes at the portable level and 32 at AVX-512: the
// order of those additions is the only difference between the levels (a relative 1e-16 in the
// sum, far below the f32 rounding of scale); the two f32 products per value are the same at
// every level.
void AddRmsNormRow(float* x, const float* delta, const float* weight, float eps, int64_t n,
                   float* out);
// Rotary embedding of n_vectors consecutive vectors of dim values (dim even) in place, every
// vector by the same angles: the pair (a, b) at (2i, 2i + 1) becomes (a cos[i] - b sin[i],
// a sin[i] + b cos[i]), each two f32 products and a sum (never a fused multiply-add), so every
// level gives the same bits.
void RotatePairs(float* x, int64_t n_vectors, int64_t dim, const float* cos, const float* sin);
// The same rotation over GPT-NeoX's pairs (i, i + dim/2) (Qwen's RoPE): the same two products
// and a sum per value, portable code at every level (the compiler vectorizes the two halves).
void RotateHalves(float* x, int64_t n_vectors, int64_t dim, const float* cos, const float* sin);
// The lowest index among the largest values of x[0, n): a greedy pick over a logits row. NaN
// values are skipped; 0 when every value is -inf or NaN (or n == 0).
int64_t ArgmaxF32(const float* x, int64_t n);
// out[i] = half(x[i]) (round to nearest even), and back.
void FloatToHalfRow(const float* x, uint16_t* out, int64_t n);
void HalfToFloatRow(const uint16_t* x, float* out, int64_t n);

}  // namespace streamd::kernels::cpu
