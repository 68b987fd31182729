// Per-instruction-set entry points behind matmul.h and vec_ops.h; matmul.cc and vec_ops.cc
// dispatch to them. Not part of the public API.
//
// Activation buffer layout (opaque to callers, see matmul.h):
//   quantized weights (Q4_0, Q4_1, Q8_0): [n_tokens, k/32] BlockQ16_1, token-major, per block
//     d = amax / kQ16Max, qs = round-half-even(x * (1/d)) in [-2047, 2047] (all in f32: the
//     reciprocal once per block, one product per value), s = d * sum(qs) (|sum| < 2^20, exact in
//     f32). Every ISA computes these bit-identically. Non-finite input in a block makes
//     d = s = NaN and qs = 0, so the NaN reaches every output that reads the block.
//   float weights (F32, F16, BF16): [n_tokens, k] f32, a dense copy of x.
//
// The AVX2 translation units are compiled with -mavx2 -mfma -mf16c (matmul_quant_vnni.cc also
// with -mavxvnni); they must not call inline functions from shared headers (HalfToFloat, std::
// templates...) that could be emitted there and then picked by the linker for callers of a lower
// level.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu::internal {

// The block formats the integer kernels read (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q6_K); the others
// are float weights. static: each file's copy is compiled with its own flags (see the note on
// inline functions).
static constexpr bool IsQuantized(WeightType type) {
  return type == WeightType::kQ4_0 || type == WeightType::kQ4_1 || type == WeightType::kQ8_0 ||
         type == WeightType::kQ5_0 || type == WeightType::kQ5_1 || type == WeightType::kQ6_K;
}
// The formats the 8-bit activation kernels read: all the quantized ones. Q6_K's values times their
// scales (13 bits) fit no byte, so its 8-bit product multiplies the 6-bit values and applies each
// 16-value group's scale to that group's i32 sum (matmul_quant8.cc).
// Q4_K too, read as stored (its record: PackForVnni8).
static constexpr bool HasInt8Products(WeightType type) {
  return IsQuantized(type) || type == WeightType::kQ4_K;
}
// Values per block of a quantized row's storage: k must be a multiple of it (Q6_K: a super-block).
static constexpr int64_t StorageBlockValues(WeightType type) {
  return type == WeightType::kQ6_K   ? kQ6_KValues
         : type == WeightType::kQ4_K ? kQ4_KValues
                                     : kQuantBlock;
}
// The format of a matrix's PackForVnni8 copy: Q5_0's is Q8_0's (its values as bytes).
static constexpr WeightType Vnni8PackedFormat(WeightType type) {
  return type == WeightType::kQ5_0 ? WeightType::kQ8_0 : type;
}

// Blocks per pass of the multi-token kernels: bounds their stack tables (GroupFactors: 16 KiB).
// Their f32 sums restart at each chunk and are then added to the output, so every level that
// is to give the same bits (AVX2 and AVX-512 for whole chunks of 16 tokens, AMX) uses this one.
inline constexpr int64_t kBlockChunk = 32;

// The AVX-512 VNNI and AMX levels run chunks of 16 tokens; a last partial chunk of at least this
// many tokens is padded to 16, fewer go to the AVX2 tiles. One constant for both, so they split a
// product the same way and give the same bits (measured with batch_scan: the zmm kernel wins
// from 6 tokens on).
inline constexpr int kMinPaddedChunk = 6;
// Of n_tokens, how many those levels run in chunks of 16 (the rest go to the AVX2 tiles).
// static: each file's copy is compiled with its own flags (see the note on inline functions).
static constexpr int64_t TokensInChunksOf16(int64_t n_tokens) {
  const int64_t whole = n_tokens / 16 * 16;
  return n_tokens - whole >= kMinPaddedChunk ? n_tokens : whole;
}

// Quantizes one row x: [k] (k % 32 == 0) into out: [k/32].
void QuantizeRowQ16_1Portable(const float* x, int64_t k, BlockQ16_1* out);
void QuantizeRowQ16_1Avx2(const float* x, int64_t k, BlockQ16_1* out);
void QuantizeRowQ16_1Avx512(const float* x, int64_t k, BlockQ16_1* out);

// Quantized weights (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q6_K) times xq: [n_tokens, k/32] BlockQ16_1.
void MatMulQuantPortable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                         const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                         int64_t row_begin, int64_t row_end);
void MatMulQuantAvx2(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                     const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                     int64_t row_begin, int64_t row_end);
void MatMulQuantAvxVnni(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                        const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                        int64_t row_begin, int64_t row_end);
void MatMulQuantAvx512Vnni(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                           const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                           int64_t row_begin, int64_t row_end);
// 8-bit activations (matmul_quant8.cc, matmul_quant8_avx512.cc).
void QuantizeRowQ8APortable(const float* x, int64_t k, BlockQ8A* out);
void QuantizeRowQ8AAvx512(const float* x, int64_t k, BlockQ8A* out);
void MatMulQuant8Portable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                          const BlockQ8A* xq, int64_t n_tokens, float* out, int64_t ldo,
                          int64_t row_begin, int64_t row_end);
// Rows [row_begin, row_end), multiples of 16, from the PackForVnni8 copy. shifts: Q8_0's
// scratch, Vnni8ShiftInts(type, k) int32s (null for the 4-bit formats), owned by the caller so
// that this file needs no allocation (and no std:: template that the linker could pick from
// here for code of a lower level).
void MatMulQuant8PackedAvx512Vnni(WeightType type, const uint8_t* packed, int64_t k,
                                  const BlockQ8A* xq, int64_t n_tokens, float* out, int64_t ldo,
                                  int64_t row_begin, int64_t row_end, int32_t* shifts);
// Tokens per pass of that kernel, and the size of its scratch: Q8_0's 128 * sum(x) of each
// (token, block) of one pass, which it takes off the sums of its weights stored + 128; Q6_K's
// 32 * sum(x) of each (token, half block), taken off the sums of its values stored unsigned
// (q in 0..63 for q - 32).
inline constexpr int64_t kVnni8TokensPerPass = 64;
static constexpr size_t Vnni8ShiftInts(WeightType type, int64_t k) {
  const size_t per_block = Vnni8PackedFormat(type) == WeightType::kQ8_0   ? 1
                           : Vnni8PackedFormat(type) == WeightType::kQ6_K ? 2
                                                                          : 0;
  return per_block * static_cast<size_t>(kVnni8TokensPerPass * (k / kQuantBlock));
}
// PackForVnni8's Q4_K record, one per tile of 16 rows and super-block (8 blocks): the rows' f16 d
// and dmin (2 x 32 bytes), their 6-bit sub-block scales and mins as bytes ([8][16] each, 256),
// then per block the 4-bit formats' 256 bytes of nibbles: 4.625 bits per weight, where Q4_1's
// records of the same values take 5. Its parts' byte offsets, for the packer and the kernel:
inline constexpr size_t kQ4_KDminAt = 32, kQ4_KScalesAt = 64, kQ4_KMinsAt = 192,
                        kQ4_KQuantsAt = 320, kQ4_KBlockQuantBytes = 256;
inline constexpr size_t kQ4_KRecordBytes = kQ4_KQuantsAt + 8 * kQ4_KBlockQuantBytes;
// PackForVnni8's Q6_K record, one per tile of 16 rows and super-block (8 blocks): the rows' f16 d
// (32 bytes, then 32 unused: the vectors stay on cache lines), their 16-value group scales as
// bytes ([8 blocks][2 groups][16 rows], 256), then per block the values' low 4 bits as the 4-bit
// formats' 256 bytes of nibbles and their high 2 bits in 128 bytes (kQ6_KHighBitsShift): 6.625
// bits per weight, where the file's rows take 6.5625 and Q6_K's 9-bit records took 9. Its parts'
// byte offsets (kQ6_KHighAt within a block's values):
inline constexpr size_t kQ6_KScalesAt = 64, kQ6_KQuantsAt = 320, kQ6_KBlockQuantBytes = 384,
                        kQ6_KHighAt = 256;
inline constexpr size_t kQ6_KRecordBytes = kQ6_KQuantsAt + 8 * kQ6_KBlockQuantBytes;
// PackForVnni8's record of one tile of 16 rows and one block: the 4-bit formats' 320 bytes;
// Q8_0's (and Q5_0's) 576; Q5_1's 576 too (16 f16 d, 16 f16 m, its values 0-31 as bytes); Q4_K's
// and Q6_K's, per block, an eighth of their super-block records.
inline constexpr size_t Vnni8RecordBytes(WeightType type) {
  return Vnni8PackedFormat(type) == WeightType::kQ8_0 || type == WeightType::kQ5_1 ? 576
         : type == WeightType::kQ4_K ? kQ4_KRecordBytes / (kQ4_KValues / kQuantBlock)
         : type == WeightType::kQ6_K ? kQ6_KRecordBytes / (kQ6_KValues / kQuantBlock)
                                     : 320;
}
// Where a Q6_K record keeps a value's high 2 bits: the value in byte p of the block's weight
// vector v (0-7; values 4v..4v+3 of every row, as the 4-bit formats' unpacked vectors) has them
// in byte p of high-bit vector v / 4, at bits 2 * (v % 4); shifted left by kQ6_KHighBitsShift[v %
// 4] (a right shift where negative) within 16-bit lanes they land at bits 4-5 of the byte, the
// shifts' spill from the neighbouring byte falling outside them.
inline constexpr int kQ6_KHighBitsShift[4] = {4, 2, 0, -2};

// packed: the PackForAmx copy of w, or null. Q4_0, Q4_1 and Q8_0 only (Q5_0 and Q6_K run at the
// AVX-512 VNNI level: matmul.cc).
void MatMulQuantAmx(WeightType type, const uint8_t* w, size_t w_row_bytes, const uint8_t* packed,
                    int64_t k, const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                    int64_t row_begin, int64_t row_end);

// The AMX-packed copy of a matrix (PackForAmx): one record of AmxPackedRecordBytes(type) per
// (tile of 16 rows, block), tile-major: record (T, b) at (T * nb + b) * AmxPackedRecordBytes.
// With w(n, v) the value v of row 16 T + n in block b:
//   bytes 0-31: the rows' f16 scales d; bytes 32-63: their f16 minimums m (Q4_1; zero otherwise);
//   Q8_0, bytes 64-575: the tile multiply's B operand: 8 rows of 64 bytes, row kk holding
//     w(n, 4kk .. 4kk + 3) in bytes 4n .. 4n + 3;
//   4-bit formats, bytes 64-319: four 64-byte vectors S_j (j = 0..3). In 128-bit lane L (rows
//     4L..4L+3), for
//     i = 0..3 and e = 0, 1, byte 16 L + 2 i + e holds w(4L + i, 8j + e) in its low nibble and
//     w(4L + i, 8j + 4 + e) in its high nibble; byte 16 L + 8 + 2 i + e holds w(4L + i, 8j + 2
//     + e) and w(4L + i, 8j + 6 + e).
// So the byte interleaves (vpunpck{l,h}bw) of S_j's low nibbles with 16 times themselves, and of
// its high nibbles likewise, are rows 4j .. 4j + 3 of the tile multiply's B operand of pairs
// (w, 16 w) (matmul_quant_amx.cc), with no transpose and no gather of the scales.
inline constexpr size_t kAmxPackedScaleBytes = 64;
static constexpr size_t AmxPackedRecordBytes(WeightType type) {
  return kAmxPackedScaleBytes + 16 * (type == WeightType::kQ8_0 ? kQuantBlock : kQuantBlock / 2);
}

// Float weights (F32, F16, BF16) times xq: [n_tokens, k] f32.
void MatMulFloatPortable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                         const float* xq, int64_t n_tokens, float* out, int64_t ldo,
                         int64_t row_begin, int64_t row_end);
void MatMulFloatAvx2(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                     const float* xq, int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin,
                     int64_t row_end);

// vec_ops.h, AVX2 versions (vec_ops_avx2.cc); the portable ones live in vec_ops.cc.
float DotF32Avx2(const float* a, const float* b, int64_t n);
float DotF32F16Avx2(const float* a, const uint16_t* b, int64_t n);
void AxpyF32Avx2(float alpha, const float* x, float* y, int64_t n);
void AxpyF16Avx2(float alpha, const uint16_t* x, float* y, int64_t n);
void DotRowsF16Avx2(const float* q, int64_t n_q, const uint16_t* k, int64_t n_rows, int64_t hd,
                    float scale, float* out, int64_t ldo);
void AxpyRowsF16Avx2(const float* w, int64_t ldw, int64_t n_q, const uint16_t* v, int64_t n_rows,
                     int64_t hd, float* y);
float MaxF32Avx2(const float* x, int64_t n);
float ExpShiftedSumAvx2(float* x, int64_t n, float shift);
void SiluMulAvx2(float* gate, const float* up, int64_t n);
void GeluTanhMulAvx2(float* gate, const float* up, int64_t n);
void FloatToHalfRowAvx2(const float* x, uint16_t* out, int64_t n);
void HalfToFloatRowAvx2(const uint16_t* x, float* out, int64_t n);
// vec_ops.h, AVX-512 versions of the attention rows and softmax helpers (vec_ops_avx512.cc).
void DotRowsF16Avx512(const float* q, int64_t n_q, const uint16_t* k, int64_t n_rows, int64_t hd,
                      float scale, float* out, int64_t ldo);
void AxpyRowsF16Avx512(const float* w, int64_t ldw, int64_t n_q, const uint16_t* v, int64_t n_rows,
                       int64_t hd, float* y);
void QuantizeRowI8Avx512(const float* x, const float* inv_scale, int64_t n, int8_t* out);
void DotRowsI8Avx512(const float* q, int64_t n_q, const int8_t* k, int64_t n_rows, int64_t hd,
                     float scale, float* out, int64_t ldo);
void AxpyRowsI8Avx512(const float* w, int64_t ldw, int64_t n_q, const int8_t* v, int64_t n_rows,
                      int64_t hd, float* y);
float MaxF32Avx512(const float* x, int64_t n);
float ExpShiftedSumAvx512(float* x, int64_t n, float shift);
void SiluMulAvx512(float* gate, const float* up, int64_t n);
void GeluTanhMulAvx512(float* gate, const float* up, int64_t n);
void AddRmsNormRowAvx512(float* x, const float* delta, const float* weight, float eps, int64_t n,
                         float* out);
void RotatePairsAvx512(float* x, int64_t n_vectors, int64_t dim, const float* cos,
                       const float* sin);

// AddRmsNormRow's scale from the f64 sum of squares of n values, the same at every level.
inline float RmsScale(double sum_squares, int64_t n, float eps) {
  return static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(n) + eps));
}

}  // namespace streamd::kernels::cpu::internal
