// Matrix products of quantized (or float) weights with f32 activations, on the CPU.
//
//   out[t][r] = sum_k W[r][k] * x[t][k]      t in [0, n_tokens), r in [row_begin, row_end)
//
// W is stored row-major in its GGUF block layout (see quant_blocks.h): row r starts at
// w + r * w_row_bytes. Activations are first quantized once per product (PrepareActivations)
// into the format the weight type's integer dot product wants (Q8_1 for Q4_1, Q8_0 for Q4_0
// and Q8_0, f32 copies for float weights); MatMulRows then reads each weight block once per
// group of tokens. Row ranges let the caller split the work across threads: MatMulRows is
// thread-safe for disjoint ranges. No allocation happens in MatMulRows.
//
// The instruction set is picked once at run time (AVX2+FMA+F16C when the CPU has them,
// portable C++ otherwise); tests can force the portable path to compare the two.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streamd::kernels::cpu {

enum class WeightType { kF32, kF16, kBF16, kQ4_0, kQ4_1, kQ8_0 };

enum class Isa { kPortable, kAvx2 };
// Best ISA this CPU supports.
Isa DetectIsa();
// ISA used by the functions below (defaults to DetectIsa(); tests may force kPortable).
Isa ActiveIsa();
void ForceIsa(Isa isa);  // not thread-safe; call before any product runs
const char* IsaName(Isa isa);

// Bytes of one weight row of k values (k must be a multiple of 32 for quantized types).
size_t WeightRowBytes(WeightType type, int64_t k);

// Bytes PrepareActivations writes for n_tokens rows of k values.
size_t ActivationBytes(WeightType type, int64_t n_tokens, int64_t k);

// x: [n_tokens, k] f32, row stride ldx floats -> xq (ActivationBytes(type, n_tokens, k) bytes).
// Rows [token_begin, token_end) only, so callers may split it across threads too.
void PrepareActivations(WeightType type, const float* x, int64_t ldx, int64_t k,
                        int64_t token_begin, int64_t token_end, void* xq);

// out: [n_tokens, ldo] f32; writes out[t * ldo + r] for r in [row_begin, row_end).
void MatMulRows(WeightType type, const void* w, size_t w_row_bytes, int64_t k, const void* xq,
                int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end);

// Dequantizes one weight row (reference path; also used for embedding lookups).
void DequantizeRow(WeightType type, const void* w_row, int64_t k, float* out);

}  // namespace streamd::kernels::cpu
