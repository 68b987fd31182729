// Matrix products of quantized (or float) weights with f32 activations, on the CPU.
//
//   out[t][r] = sum_k W[r][k] * x[t][k]      t in [0, n_tokens), r in [row_begin, row_end)
//
// W is stored row-major in its GGUF block layout (see quant_blocks.h): row r starts at
// w + r * w_row_bytes. Activations are first converted once per product (PrepareActivations):
// for quantized weights (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q6_K) into 12-bit blocks (Q16_1,
// quant_blocks.h: per 32 values an f32 scale amax/2047, int16 values, and d*sum(q)) so the dot
// products run on exact integer sums; for float weights into an f32 copy. MatMulRows then reads
// each weight block once per group of tokens. Row ranges let the caller split the work across
// threads: MatMulRows is thread-safe for disjoint ranges. No allocation happens in MatMulRows.
//
// Precision: the 12-bit step (|x - d*q| <= amax/4094 per value) keeps products close to exact
// arithmetic on the stored weights. 8-bit activations (llama.cpp's Q8_1) changed the argmax of
// SmolLM2-135M Q4_1 at ~2.7% of positions versus the exact-weights reference; 12-bit ones at 0.1%,
// as 16-bit ones did (tests/model_golden_test.cc, 2047 positions: perplexity 16.3197 against the
// reference's 16.3177, 16-bit 16.3170). 12 bits, not 16, because a 12-bit value splits into a
// signed byte and a 4-bit one whose products with a 4-bit weight w and with 16 w fit the 8-bit
// multiplies of AMX (matmul_quant_amx.cc): one tile multiply per block instead of two.
//
// The instruction set is picked once at run time (AVX2+FMA+F16C when the CPU has them, plus
// AVX-512 VNNI or AVX-VNNI for the quantized products where available, portable C++ otherwise);
// tests can force a lower level to compare them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streamd::kernels::cpu {

// kQ5_0 is read as stored (GGUF's 22-byte blocks, quant_blocks.h) by the products at every level
// with 12-bit activations (AMX runs them at the AVX-512 VNNI level) and by the 8-bit portable
// reference; its 8-bit packed copy (PackForVnni8) is Q8_0's.
// kQ5_1 likewise (GGUF's 24-byte blocks: Q5_0's values 0..31 with Q4_1's d and m); its 8-bit copy
// holds the values as bytes with d and m.
// kQ6_K is read as stored too (GGUF's 210-byte super-blocks of 256 values; k a multiple of 256)
// by the products with 12-bit activations at every level (AMX: the AVX-512 VNNI level's). Its
// values times their 16-value scales need 13 bits, so its 8-bit product scales each group's sum
// apart (PackForVnni8).
// kQ4_K (GGUF's 144-byte super-blocks of 256 values) only at 8 bits: MatMulRows8 and
// PackForVnni8 read it as stored; the 12-bit products (MatMulRows, PrepareActivations) refuse it
// and take its Q4_1 conversion (repack_quant.h).
enum class WeightType { kF32, kF16, kBF16, kQ4_0, kQ4_1, kQ8_0, kQ5_0, kQ6_K, kQ5_1, kQ4_K };

// Levels, ordered by preference. Each runs the kAvx2 code except for the quantized products:
// kAvxVnni does their i16 multiply-accumulates with AVX-VNNI (vpdpwssd, VEX), kAvx512Vnni with
// AVX-512 VNNI (EVEX; 16 tokens per zmm register for batches), kAmx batches of 6+ tokens on AMX
// tile multiplies (bit-identical to kAvx512Vnni, which it includes). A CPU may have AVX-512 VNNI
// without AVX-VNNI (Cascade Lake, Ice Lake), so a level does not imply the one below it.
// kAvx512Vnni needs AVX-512 F, BW, VL, DQ and VNNI (isa.cc).
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
// amx_packed: null, or w's PackForAmx copy, which the AMX level then reads instead of w for the
// batches it takes (the result is the same, bit for bit).
void MatMulRows(WeightType type, const void* w, size_t w_row_bytes, int64_t k, const void* xq,
                int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end,
                const void* amx_packed = nullptr);
// The same product at a chosen level instead of ActiveIsa() (a build plan's per-shape choice,
// docs/BUILD.md). A level above ActiveIsa() runs at ActiveIsa(): the choice can never reach code
// the CPU lacks, or a level a test forced lower. xq must come from PrepareActivations, whose
// blocks are the same at every level.
void MatMulRowsAt(Isa isa, WeightType type, const void* w, size_t w_row_bytes, int64_t k,
                  const void* xq, int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin,
                  int64_t row_end, const void* amx_packed = nullptr);

// Quantized weights times 8-bit activations (BlockQ8A): a precision cut (8 bits instead of 12
// per activation, quantized per block of 32 with round-to-nearest-even) that halves the
// multiply-accumulate instructions of batched products where a fast kernel exists, the AVX-512
// VNNI level. A build plan takes it per product shape and token bucket only when the streaming
// perplexity on an eval text allows (docs/BUILD.md). Elsewhere MatMulRows8 runs the portable
// reference, which the fast kernel equals bit for bit.
size_t ActivationBytes8(int64_t n_tokens, int64_t k);
// Like PrepareActivations; k a multiple of 32.
void PrepareActivations8(const float* x, int64_t ldx, int64_t k, int64_t token_begin,
                         int64_t token_end, void* xq8);
// Whether MatMulRows8 has its fast kernel for `type` at the active level.
bool FastInt8Activations(WeightType type);
// Like MatMulRows, for Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q8_0 and Q6_K weights and xq8 from
// PrepareActivations8.
// packed: null, or w's PackForVnni8 copy. The fast kernel reads only the copy, for whole tiles of
// 16 rows; other rows, and every row when packed is null, run the portable reference (the result
// is the same, bit for bit, but that path is for odd shapes: give the copy).
void MatMulRows8(WeightType type, const void* w, size_t w_row_bytes, int64_t k, const void* xq8,
                 int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end,
                 const void* packed = nullptr);
// A copy of a quantized matrix for the 8-bit kernel with rows in the vector lanes: per tile of
// 16 rows and block, the rows' f16 scales, their f16 minimums (Q4_1; zero otherwise) and their
// quants transposed so that one 64-byte load holds the same 4 values of all 16 rows (Q8_0's
// shifted by 128 to the unsigned side of vpdpbusd). Each weight load then serves every token
// of the batch, where a kernel on the GGUF rows would unpack each row's block once per 16 tokens.
// The same size as the GGUF rows (Q4_x: 320 bytes per 16 rows and block; Q8_0: 576).
// Q5_0 is packed as the Q8_0 its values are (q - 16 as the byte; 576 bytes per 16 rows and block,
// 1.64x the file's 352). Q6_K per tile of 16 rows and super-block: the rows' f16 d, their i8
// scales of each block's two 16-value groups, and each block's 6-bit values q (for q - 32) as
// 4-bit nibbles laid out as Q4_1's and 2-bit high parts: 3392 bytes per 16 rows and 256 values,
// 1.01x the file's 3360; its sums are scaled per group, exactly (d * scale is exact in f32), so
// 8-bit activations are its only precision cut. Q4_K per tile of 16 rows and
// super-block: the rows' f16 d and dmin, their 6-bit sub-block scales and mins as bytes, and each
// block's nibbles as Q4_1's: 2368 bytes per 16 rows and 256 values, 1.03x the file's 2304 and
// 0.93x the 2560 of its Q4_1 conversion's records; its block scales d sc and -dmin m are made in
// f32 (exact), where that conversion rounds them to f16.
// Whether a matrix can have one: Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q8_0 or Q6_K, rows a multiple of
// 16, k of 32 (Q6_K, Q4_K: of 256).
bool Vnni8Packable(WeightType type, int64_t rows, int64_t k);
size_t Vnni8PackedBytes(WeightType type, int64_t rows, int64_t k);
// Writes the copy of w ([rows, k], Vnni8Packable) to out (Vnni8PackedBytes, 64-byte aligned).
// The copy holds its tiles one after another, Vnni8PackedBytes(type, 16, k) bytes each: rows
// [16 t, 16 u) packed apart to out + t * that give the same bytes, so that threads can pack a
// matrix's tiles side by side.
void PackForVnni8(WeightType type, const void* w, size_t w_row_bytes, int64_t rows, int64_t k,
                  void* out);

// A copy of a quantized weight matrix in the order the AMX level reads it. The GGUF layout keeps
// each row's blocks together; the AMX kernel reads block b of 16 rows at a time, scattered over
// 16 rows: it transposes them and gathers their scales for every block, and its 16 short strided
// streams defeat the hardware prefetcher. The packed copy holds, per tile of 16 rows and block,
// the rows' scales and quants ready for the tile multiplies (Q8_0's as the tile itself), tiles
// one after another, read front to back: 320 bytes per 16 rows and block for the 4-bit formats
// (Q4_1's own size), 576 for Q8_0 (544).
// Whether a matrix can have one: Q4_0, Q4_1 or Q8_0, rows a multiple of 16, k of 32.
bool AmxPackable(WeightType type, int64_t rows, int64_t k);
size_t AmxPackedBytes(WeightType type, int64_t rows, int64_t k);
// Writes the packed copy of w ([rows, k], AmxPackable) to out: AmxPackedBytes bytes, 64-byte
// aligned. Portable code: a copy can be made on any CPU, and is read only at the AMX level.
void PackForAmx(WeightType type, const void* w, size_t w_row_bytes, int64_t rows, int64_t k,
                void* out);

// Dequantizes one weight row (reference path; also used for embedding lookups).
void DequantizeRow(WeightType type, const void* w_row, int64_t k, float* out);

}  // namespace streamd::kernels::cpu
