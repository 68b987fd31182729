// Matrix products of quantized (or float) weights with f32 activations, on the CPU.
//
//   out[t][r] = sum_k W[r][k] * x[t][k]      t in [0, n_tokens), r in [row_begin, row_end)
//
// W is stored row-major in its GGUF block layout (see quant_blocks.h): row r starts at
// w + r * w_row_bytes. Activations are first converted once per product (PrepareActivations):
// for quantized weights (Q4_0, Q4_1, Q8_0) into 16-bit blocks (Q16_1, quant_blocks.h: per 32
// values an f32 scale amax/32767, int16 values, and d*sum(q)) so the dot products run on exact
// integer sums; for float weights into an f32 copy. MatMulRows then reads each weight block once
// per group of tokens. Row ranges let the caller split the work across threads: MatMulRows is
// thread-safe for disjoint ranges. No allocation happens in MatMulRows.
//
// Precision: the 16-bit step (|x - d*q| <= amax/65534 per value) keeps products close to exact
// arithmetic on the stored weights. 8-bit activations (llama.cpp's Q8_1) changed the argmax of
// SmolLM2-135M Q4_1 at ~2.7% of positions versus the exact-weights reference; 16-bit ones at 0.1%
// (tests/model_golden_test.cc, 2047 positions).
//
// The instruction set is picked once at run time (AVX2+FMA+F16C when the CPU has them, plus
// AVX-512 VNNI or AVX-VNNI for the quantized products where available, portable C++ otherwise);
// tests can force a lower level to compare them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streamd::kernels::cpu {

enum class WeightType { kF32, kF16, kBF16, kQ4_0, kQ4_1, kQ8_0 };

// Levels, ordered by preference. Each runs the kAvx2 code except for the quantized products:
// kAvxVnni does their i16 multiply-accumulates with AVX-VNNI (vpdpwssd, VEX), kAvx512Vnni with
// AVX-512 VNNI (EVEX; 16 tokens per zmm register for batches), kAmx batches of 6+ tokens on AMX
// tile multiplies (bit-identical to kAvx512Vnni, which it includes). A CPU may have AVX-512 VNNI
// without AVX-VNNI (Cascade Lake, Ice Lake), so a level does not imply the one below it.
enum class Isa { kPortable, kAvx2, kAvxVnni, kAvx512Vnni, kAmx };
// Every level, lowest first (for tests, benchmarks and flags that go through them all).
inline constexpr Isa kAllIsas[] = {Isa::kPortable, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni,
                                   Isa::kAmx};
// Whether this CPU (and OS) can run a level.
bool IsaSupported(Isa isa);
// Best ISA this CPU supports.
Isa DetectIsa();
// ISA used by the functions below (defaults to DetectIsa(); tests may force kPortable).
Isa ActiveIsa();
// Not thread-safe; call before any product runs. A level the CPU lacks falls back to the best
// supported level below it.
void ForceIsa(Isa isa);
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
