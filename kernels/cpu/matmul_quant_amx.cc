// Quantized weights (Q4_0, Q4_1, Q8_0) times Q16_1 activations on AMX tile multiplies.
//
// A batched decode step (one token per session) is bound by the integer multiply-accumulates:
// at the AVX-512 VNNI level (matmul_quant_avx512.cc) vpdpwssd retires 64 i16 products per cycle
// and the per-block weight widening and scaling roughly halve that. An AMX TMUL instruction
// multiplies a 16x64 byte tile by a 64x16 one in ~16 cycles; the vector units keep the weight
// transpose and the per-block scaling.
//
// AMX multiplies bytes; the activations are 12-bit (|q| <= kQ16Max = 2047), split exactly:
//   4-bit weights (w in [0, 15]): q = 16 * hi + lo with hi = q >> 4 in [-128, 127] (signed) and
//     lo = q & 15. The activation tile holds each value as the byte pair (lo, hi) and the weight
//     tile as (w, 16 w), both bytes (16 w <= 240 unsigned): one TDPBSUD over K = 64 bytes sums
//     w lo + 16 w hi = w q over the whole block. Measured (matmul_bench, 1536 x 576 Q4_1 in L2,
//     64 tokens): 347 us against 449 with the byte split below.
//   Q8_0 (w in [-128, 127], 16 w does not fit a byte): q = 256 * hi + lo with hi = q >> 8 and
//     lo = q & 255 (unsigned), two multiplies over K = 32 bytes, summed as (hi sum << 8) + lo sum.
// |sum| <= 32 * 128 * 2047 < 2^23 either way. So this level computes the same i32 block sums as
// every other level and then the same f32 operations in the same order as OuterTile16 (per block
// acc = fma(f32(sum), dw * dx, acc), then acc = fma(ow, os, acc); blocks in chunks of
// kBlockChunk whose partial sums are added to out): its output is bit-identical to the AVX-512
// VNNI level's for every token count (tested in matmul_test.cc). Parts of a product this level
// does not take (fewer than kMinPaddedChunk tokens, rows not in a whole tile of 16) are handed to
// that level, which splits the same way.
//
// Tiles (C[token][row] += A[token][k] * B[k][row], one quant block per multiply):
//   A: 16 tokens x 64 bytes (the pairs; Q8_0: 32 bytes, the hi (tile 2) or lo (tile 3) bytes) of
//      the tokens' block, packed once per chunk of tokens and blocks (PackTokens), reused by every
//      row tile;
//   B: 16 (Q8_0: 8) x 64 bytes: 16 weight rows in the VNNI order (4 consecutive bytes of a row per
//      32-bit lane; tile 4), transposed from the rows' blocks for each (row tile, block);
//   C: 16 tokens x 16 rows of i32 (tile 0; Q8_0 tiles 0 and 1 for hi and lo), stored to memory
//      and scaled with AVX-512, with the 16 rows of one token in one zmm, so results go straight
//      to out.
// The 4-bit formats alternate their A and C tiles between even and odd blocks and make the B
// tiles a block ahead, so one block's tile loads and multiplies do not wait for the previous
// block's (tiles are not renamed). Measured (`kernels_cpu_bench --benchmark_filter=
// 'BM_ModelMatmuls/(16|64)/4/1'`, five alternations, medians): 16 tokens 16.1 -> 15.7 ms, 64
// tokens 52.5 -> 48.7 ms; a 16-session decode step 17.2 -> 15.7 ms.
//
// Compiled with the AVX-512 flags plus -mamx-tile -mamx-int8; reached only after the run-time
// check in isa.cc (CPUID, XCR0 and the Linux permission to use tile data).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_internal.h"

namespace streamd::kernels::cpu::internal {
namespace {

constexpr int kTileTokens = 16;
constexpr int kTileRows = 16;

// Tile register numbers. Macros, not constants: the intrinsics paste them into the assembly
// text (tmm##n), after macro expansion. Two row tiles (0 and 1) share the activation tiles.
#define STREAMD_TILE_SUM_HI_0 0
#define STREAMD_TILE_SUM_LO_0 1
#define STREAMD_TILE_SUM_HI_1 5
#define STREAMD_TILE_SUM_LO_1 6
#define STREAMD_TILE_ACT_HI 2
#define STREAMD_TILE_ACT_LO 3
#define STREAMD_TILE_WEIGHTS_0 4
#define STREAMD_TILE_WEIGHTS_1 7

// LDTILECFG's 64-byte memory operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

template <class F>
TileConfig MakeTileConfig() {
  TileConfig c;
  const int sums[] = {STREAMD_TILE_SUM_HI_0, STREAMD_TILE_SUM_LO_0, STREAMD_TILE_SUM_HI_1,
                      STREAMD_TILE_SUM_LO_1};
  for (int t : sums) {
    c.rows[t] = kTileTokens;
    c.bytes_per_row[t] = kTileRows * sizeof(int32_t);
  }
  const int acts[] = {STREAMD_TILE_ACT_HI, STREAMD_TILE_ACT_LO};
  for (int t : acts) {
    c.rows[t] = kTileTokens;
    c.bytes_per_row[t] = F::kPairs ? 2 * kQuantBlock : kQuantBlock;
  }
  const int weights[] = {STREAMD_TILE_WEIGHTS_0, STREAMD_TILE_WEIGHTS_1};
  for (int t : weights) {
    c.rows[t] = F::kPairs ? kQuantBlock / 2 : kQuantBlock / 4;
    c.bytes_per_row[t] = kTileRows * 4;
  }
  return c;
}

// Per-format pieces: where a block's quants start, whether they are signed, and the offset
// term's factors (ow, os) of matmul_quant_kernels.h.
struct AmxQ4_1 {
  using Block = BlockQ4_1;
  static constexpr WeightType kType = WeightType::kQ4_1;
  static constexpr bool kSigned = false, kOffset = true, kOffsetIsMin = true, kPairs = true;
  static float Os(float sx) { return sx; }
};
struct AmxQ4_0 {
  using Block = BlockQ4_0;
  static constexpr WeightType kType = WeightType::kQ4_0;
  static constexpr bool kSigned = false, kOffset = true, kOffsetIsMin = false, kPairs = true;
  static float Os(float sx) { return -8.0f * sx; }
};
struct AmxQ8_0 {
  using Block = BlockQ8_0;
  static constexpr WeightType kType = WeightType::kQ8_0;
  static constexpr bool kSigned = true, kOffset = false, kOffsetIsMin = false, kPairs = false;
  static float Os(float) { return 0.0f; }
};

// Activations of 16 tokens over up to kBlockChunk blocks, as the A tiles want them: per block,
// for the 4-bit formats one tile of 16 tokens x 64 bytes (value i's pair (lo, hi) at bytes
// 2i, 2i + 1), for Q8_0 the hi tile (16 x 32 bytes) followed by the lo tile.
struct PackedTokens {
  alignas(64) int8_t a[kBlockChunk][kTileTokens * 2 * kQuantBlock];
  alignas(64) float dx[kBlockChunk][kTileTokens];
  alignas(64) float os[kBlockChunk][kTileTokens];
};

// Tokens [0, n_valid) of x, blocks [0, nbc); missing tokens get zero bytes and factors.
template <class F>
void PackTokens(const BlockQ16_1* x, int64_t nb, int n_valid, int64_t nbc, PackedTokens& p) {
  for (int64_t b = 0; b < nbc; ++b) {
    for (int t = 0; t < kTileTokens; ++t) {
      __m512i q = _mm512_setzero_si512();
      float dx = 0.0f, os = 0.0f;
      if (t < n_valid) {
        const BlockQ16_1& xb = x[t * nb + b];
        q = _mm512_loadu_si512(xb.qs);
        dx = xb.d;
        os = F::Os(xb.s);
      }
      if constexpr (F::kPairs) {
        // q = 16 * hi + lo with lo = q & 15 and hi = q >> 4 in [-128, 127] (|q| <= kQ16Max <
        // 2048): the i16 word lo | hi << 8.
        const __m512i pair =
            _mm512_ternarylogic_epi32(q, _mm512_slli_epi16(_mm512_srai_epi16(q, 4), 8),
                                      _mm512_set1_epi16(0x000f), 0xe4);  // c ? a : b
        _mm512_store_si512(p.a[b] + t * 2 * kQuantBlock, pair);
      } else {
        const __m256i lo = _mm512_cvtepi16_epi8(q);  // truncation keeps the low byte
        const __m256i hi = _mm512_cvtepi16_epi8(_mm512_srai_epi16(q, 8));
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.a[b] + t * kQuantBlock), hi);
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.a[b] + (kTileTokens + t) * kQuantBlock),
                           lo);
      }
      p.dx[b][t] = dx;
      p.os[b][t] = os;
    }
  }
}

// Bytes [offset, offset + 16) of 16 rows (stride bytes apart) as four vectors: vector j holds
// bytes offset + 4j .. offset + 4j + 3 of row n in 32-bit lane n.
inline void Transpose16x4(const uint8_t* rows, size_t stride, __m512i out[4]) {
  __m512i v[4];  // v[j]: rows 4j..4j+3, 16 bytes each
  for (int j = 0; j < 4; ++j) {
    const uint8_t* r = rows + 4 * j * stride;
    __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r)));
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + stride)), 1);
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * stride)), 2);
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 3 * stride)), 3);
    v[j] = x;
  }
  // Lane L of a pair (v0, v1): dword L / 8 (or 2 + L / 8) of row L % 8; then halves of rows
  // 0-7 and 8-15 side by side.
  const __m512i idx01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i idx23 = _mm512_add_epi32(idx01, _mm512_set1_epi32(2));
  const __m512i a01 = _mm512_permutex2var_epi32(v[0], idx01, v[1]);
  const __m512i b01 = _mm512_permutex2var_epi32(v[2], idx01, v[3]);
  const __m512i a23 = _mm512_permutex2var_epi32(v[0], idx23, v[1]);
  const __m512i b23 = _mm512_permutex2var_epi32(v[2], idx23, v[3]);
  out[0] = _mm512_shuffle_i64x2(a01, b01, 0x44);
  out[1] = _mm512_shuffle_i64x2(a01, b01, 0xee);
  out[2] = _mm512_shuffle_i64x2(a23, b23, 0x44);
  out[3] = _mm512_shuffle_i64x2(a23, b23, 0xee);
}

// (w, 16 w) as the bytes of an i16 word, from words holding w <= 15.
inline __m512i WeightPairs(__m512i w) { return _mm512_or_si512(w, _mm512_slli_epi16(w, 12)); }

// One block of 16 rows as the B tile. Q8_0: row kk holds values 4kk .. 4kk+3 of every row.
// 4-bit formats: row kk holds the pairs (w, 16 w) of values 2kk and 2kk + 1 of every row, which
// the pairs (lo, hi) of the activations meet: w * lo + 16 w * hi = w * q.
template <class F>
inline void PackWeights(const uint8_t* block, size_t stride, uint8_t (*b)[kTileRows * 4]) {
  __m512i v[4];
  if constexpr (F::kSigned) {  // Q8_0: bytes 2..33 are the values in order
    Transpose16x4(block + 2, stride, v);
    for (int j = 0; j < 4; ++j) _mm512_store_si512(b[j], v[j]);
    Transpose16x4(block + 18, stride, v);
    for (int j = 0; j < 4; ++j) _mm512_store_si512(b[4 + j], v[j]);
  } else {  // 4-bit: byte j holds value j (low nibble) and value j + 16 (high nibble)
    Transpose16x4(block + sizeof(typename F::Block) - kQuantBlock / 2, stride, v);
    const __m512i mask = _mm512_set1_epi8(0x0f);
    // Bytes 0, 1 (or 2, 3) of each 32-bit lane, zero-extended to i16.
    const __m512i first = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1));
    const __m512i second = _mm512_broadcast_i32x4(
        _mm_setr_epi8(2, -1, 3, -1, 6, -1, 7, -1, 10, -1, 11, -1, 14, -1, 15, -1));
    for (int j = 0; j < 4; ++j) {  // v[j], lane n: values 4j .. 4j+3 and 16+4j .. of row n
      const __m512i lo = _mm512_and_si512(v[j], mask);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v[j], 4), mask);
      _mm512_store_si512(b[2 * j], WeightPairs(_mm512_shuffle_epi8(lo, first)));
      _mm512_store_si512(b[2 * j + 1], WeightPairs(_mm512_shuffle_epi8(lo, second)));
      _mm512_store_si512(b[8 + 2 * j], WeightPairs(_mm512_shuffle_epi8(hi, first)));
      _mm512_store_si512(b[9 + 2 * j], WeightPairs(_mm512_shuffle_epi8(hi, second)));
    }
  }
}

// dw and ow of one block of 16 rows (f16 in the block header: d, then m for Q4_1).
template <class F>
inline void RowScales(const uint8_t* block, __m512i row_offsets, __m512* dw, __m512* ow) {
  const __m512i h = _mm512_i32gather_epi32(row_offsets, block, 1);
  *dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
  *ow = F::kOffsetIsMin ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16))) : *dw;
}

// i32 block sums of 16 tokens x 16 rows, [token][row], as the tiles store them.
struct BlockSums {
  alignas(64) int32_t hi[kTileTokens][kTileRows];
  alignas(64) int32_t lo[kTileTokens][kTileRows];
};

// One quant block's weights for kTiles row tiles, as B tiles.
template <int kTiles>
struct WeightTiles {
  alignas(64) uint8_t b[kTiles][kQuantBlock / 2][kTileRows * 4];
};

// Tile multiplies of one block for kTiles (1 or 2) row tiles: s[i] = block sums of row tile i.
// wt[i]: the B tile of row tile i.
// The 4-bit formats' one multiply per row tile: activation tile kAct, sum tiles kSum0 and
// kSum1 (tile numbers).
#define STREAMD_MULTIPLY_PAIRS(kAct, kSum0, kSum1)                             \
  do {                                                                         \
    _tile_loadd(kAct, p.a[b], 2 * kQuantBlock);                                \
    _tile_loadd(STREAMD_TILE_WEIGHTS_0, wt[0], kTileRows * 4);                 \
    _tile_zero(kSum0);                                                         \
    _tile_dpbsud(kSum0, kAct, STREAMD_TILE_WEIGHTS_0);                         \
    if constexpr (kTiles == 2) {                                               \
      _tile_loadd(STREAMD_TILE_WEIGHTS_1, wt[kTiles - 1], kTileRows * 4);      \
      _tile_zero(kSum1);                                                       \
      _tile_dpbsud(kSum1, kAct, STREAMD_TILE_WEIGHTS_1);                       \
    }                                                                          \
    _tile_stored(kSum0, s[0].hi, kStride);                                     \
    if constexpr (kTiles == 2) _tile_stored(kSum1, s[kTiles - 1].hi, kStride); \
  } while (0)

template <class F, int kTiles>
inline void MultiplyBlock(const PackedTokens& p, int64_t b, const uint8_t* const* wt,
                          BlockSums* s) {
  // The tile loads' asm statements do not tell the compiler they read memory: make the stores
  // to the B tiles happen first.
  asm volatile("" ::: "memory");
  constexpr int kStride = kTileRows * sizeof(int32_t);
  if constexpr (F::kPairs) {
    // Tiles are not renamed: loading or zeroing a tile waits until the previous block's
    // instructions have read it (its multiplies the activation tile, its stores the sum
    // tiles). Odd blocks use the tiles the Q8_0 split needs for its low bytes (free in this
    // format), so consecutive blocks overlap; only the B tiles are shared.
    if (b % 2 == 0) {
      STREAMD_MULTIPLY_PAIRS(STREAMD_TILE_ACT_HI, STREAMD_TILE_SUM_HI_0, STREAMD_TILE_SUM_HI_1);
    } else {
      STREAMD_MULTIPLY_PAIRS(STREAMD_TILE_ACT_LO, STREAMD_TILE_SUM_LO_0, STREAMD_TILE_SUM_LO_1);
    }
    asm volatile("" ::: "memory");  // and the next block's B tile stores after these loads
    return;
  }
  _tile_loadd(STREAMD_TILE_ACT_HI, p.a[b], kQuantBlock);
  _tile_loadd(STREAMD_TILE_ACT_LO, p.a[b] + kTileTokens * kQuantBlock, kQuantBlock);
  _tile_loadd(STREAMD_TILE_WEIGHTS_0, wt[0], kTileRows * 4);
  _tile_zero(STREAMD_TILE_SUM_HI_0);
  _tile_zero(STREAMD_TILE_SUM_LO_0);
  if constexpr (kTiles == 2) {
    _tile_loadd(STREAMD_TILE_WEIGHTS_1, wt[kTiles - 1], kTileRows * 4);
    _tile_zero(STREAMD_TILE_SUM_HI_1);
    _tile_zero(STREAMD_TILE_SUM_LO_1);
  }
  _tile_dpbssd(STREAMD_TILE_SUM_HI_0, STREAMD_TILE_ACT_HI, STREAMD_TILE_WEIGHTS_0);
  _tile_dpbusd(STREAMD_TILE_SUM_LO_0, STREAMD_TILE_ACT_LO, STREAMD_TILE_WEIGHTS_0);
  if constexpr (kTiles == 2) {
    _tile_dpbssd(STREAMD_TILE_SUM_HI_1, STREAMD_TILE_ACT_HI, STREAMD_TILE_WEIGHTS_1);
    _tile_dpbusd(STREAMD_TILE_SUM_LO_1, STREAMD_TILE_ACT_LO, STREAMD_TILE_WEIGHTS_1);
  }
  _tile_stored(STREAMD_TILE_SUM_HI_0, s[0].hi, kStride);
  _tile_stored(STREAMD_TILE_SUM_LO_0, s[0].lo, kStride);
  if constexpr (kTiles == 2) {
    _tile_stored(STREAMD_TILE_SUM_HI_1, s[kTiles - 1].hi, kStride);
    _tile_stored(STREAMD_TILE_SUM_LO_1, s[kTiles - 1].lo, kStride);
  }
  asm volatile("" ::: "memory");
}
#undef STREAMD_MULTIPLY_PAIRS

// acc[t] (16 rows of token t) += the scaled block sums of tokens [0, n_valid), with the block's
// row factors dw and ow.
template <class F>
inline void ScaleBlock(const BlockSums& s, const PackedTokens& p, int64_t b, __m512 dw, __m512 ow,
                       int n_valid, __m512* acc) {
  for (int t = 0; t < n_valid; ++t) {
    const __m512i sum = F::kPairs
                            ? _mm512_load_si512(s.hi[t])
                            : _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(s.hi[t]), 8),
                                               _mm512_load_si512(s.lo[t]));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(p.dx[b][t])),
                             acc[t]);
    if constexpr (F::kOffset) acc[t] = _mm512_fmadd_ps(ow, _mm512_set1_ps(p.os[b][t]), acc[t]);
  }
}

// Where RowTiles reads kTiles row tiles' weights, block by block: the GGUF rows themselves
// (GgufRows) or their AMX-packed copy (PackedRows). Each gives block b of row tile i as the B
// tile (Weights), its row factors (Scales), and asks for the lines it will read next (Prefetch,
// called once per block with b in [0, nbc]).
template <class F, int kTiles>
struct GgufRows {
  const uint8_t* w;  // row 0 of tile 0, block 0 of the chunk
  size_t stride;     // bytes per row
  int64_t nbc;       // blocks in the chunk
  __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(stride)));
  // The next row tiles (they follow these in memory), and how many of their lines each block
  // step asks for: computed once, not in every step of the block loop.
  const uint8_t* next = w + kTiles * kTileRows * stride;
  int64_t prefetch_lines = (static_cast<int64_t>(kTiles * kTileRows * stride) / 64 + nbc - 1) / nbc;

  const uint8_t* Block(int i, int64_t b) const {
    return w + i * kTileRows * stride + b * sizeof(typename F::Block);
  }
  const uint8_t* Weights(int i, int64_t b, uint8_t (*scratch)[kTileRows * 4]) const {
    PackWeights<F>(Block(i, b), stride, scratch);
    return scratch[0];
  }
  void Scales(int i, int64_t b, __m512* dw, __m512* ow) const {
    RowScales<F>(Block(i, b), row_offsets, dw, ow);
  }
  // The next row tiles follow these in memory: stream them into L2 while these compute (a
  // decode step reads every weight from DRAM once). Measured on the 30-layer matmul benchmark
  // at 16 tokens: no prefetch 22.0 ms, into L1 20.3, into L2 17.1, L2 two tiles ahead 19.7.
  void Prefetch(int64_t b) const {
    for (int64_t l = 0; l < prefetch_lines; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(next + 64 * (b * prefetch_lines + l)),
                   _MM_HINT_T1);
    }
  }
};

template <class F, int kTiles>
struct PackedRows {
  const uint8_t* tile;  // the record of tile 0, block 0 of the chunk
  size_t tile_bytes;    // bytes per row tile (all its blocks)

  const uint8_t* Record(int i, int64_t b) const {
    return tile + i * tile_bytes + b * AmxPackedRecordBytes(F::kType);
  }
  // The B tile (layout: matmul_internal.h): Q8_0's is in the record; the 4-bit formats' pairs
  // (w, 16 w) are the byte interleaves of the record's nibbles with 16 times themselves.
  const uint8_t* Weights(int i, int64_t b, uint8_t (*scratch)[kTileRows * 4]) const {
    const uint8_t* q = Record(i, b) + kAmxPackedScaleBytes;
    if constexpr (!F::kPairs) {
      return q;
    } else {
      const __m512i mask = _mm512_set1_epi8(0x0f);
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_load_si512(q + 64 * j);
        const __m512i lo = _mm512_and_si512(v, mask);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
        // Bytes <= 15: the 16-bit shift moves no bits across bytes.
        const __m512i lo16 = _mm512_slli_epi16(lo, 4), hi16 = _mm512_slli_epi16(hi, 4);
        _mm512_store_si512(scratch[4 * j], _mm512_unpacklo_epi8(lo, lo16));
        _mm512_store_si512(scratch[4 * j + 1], _mm512_unpackhi_epi8(lo, lo16));
        _mm512_store_si512(scratch[4 * j + 2], _mm512_unpacklo_epi8(hi, hi16));
        _mm512_store_si512(scratch[4 * j + 3], _mm512_unpackhi_epi8(hi, hi16));
      }
      return scratch[0];
    }
  }
  void Scales(int i, int64_t b, __m512* dw, __m512* ow) const {
    const uint8_t* r = Record(i, b);
    *dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(r)));
    *ow = F::kOffsetIsMin
              ? _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(r + 32)))
              : *dw;
  }
  // Block b of the next kTiles row tiles, into L2: it is read one row-tile pass later (a decode
  // step reads every weight from DRAM once; without this the tile loads wait for it).
  void Prefetch(int64_t b) const {
    constexpr size_t kRecord = AmxPackedRecordBytes(F::kType);
    for (int i = 0; i < kTiles; ++i) {
      const uint8_t* next = Record(kTiles + i, b);
      for (size_t l = 0; l < kRecord; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + l), _MM_HINT_T1);
      }
    }
  }
};

template <class F, int kTiles, class Source>
void RowTiles(const Source& src, const PackedTokens& p, int64_t nbc, int n_valid, bool first,
              float* out, int64_t ldo) {
  WeightTiles<kTiles> wt[2];
  BlockSums sums[2][kTiles];
  __m512 acc[kTiles][kTileTokens];
  for (int i = 0; i < kTiles; ++i) {
    for (int t = 0; t < kTileTokens; ++t) acc[i][t] = _mm512_setzero_ps();
  }
  // Block b's B tiles are made one step ahead (tiles[b & 1]): a tile load cannot take data
  // from the store buffer, so loading stores just made waits for them to reach the cache.
  const uint8_t* tiles[2][kTiles];
  for (int i = 0; i < kTiles; ++i) tiles[0][i] = src.Weights(i, 0, wt[0].b[i]);
  for (int64_t b = 0; b <= nbc; ++b) {
    src.Prefetch(b);
    if (b + 1 < nbc) {
      for (int i = 0; i < kTiles; ++i) {
        tiles[(b + 1) & 1][i] = src.Weights(i, b + 1, wt[(b + 1) & 1].b[i]);
      }
    }
    if (b < nbc) MultiplyBlock<F, kTiles>(p, b, tiles[b & 1], sums[b & 1]);
    if (b == 0) continue;
    for (int i = 0; i < kTiles; ++i) {
      __m512 dw, ow;
      src.Scales(i, b - 1, &dw, &ow);
      ScaleBlock<F>(sums[(b - 1) & 1][i], p, b - 1, dw, ow, n_valid, acc[i]);
    }
  }
  for (int i = 0; i < kTiles; ++i) {
    for (int t = 0; t < n_valid; ++t) {
      float* o = out + t * ldo + i * kTileRows;
      _mm512_storeu_ps(o, first ? acc[i][t] : _mm512_add_ps(_mm512_loadu_ps(o), acc[i][t]));
    }
  }
}

// kTiles row tiles from row r0, blocks [kb0, kb0 + nbc), from the packed copy when there is one.
template <class F, int kTiles>
void RowTilesFrom(const uint8_t* w, size_t w_row_bytes, const uint8_t* packed, int64_t nb,
                  int64_t r0, int64_t kb0, const PackedTokens& p, int64_t nbc, int nt, float* out,
                  int64_t ldo) {
  if (packed != nullptr) {
    constexpr size_t kRecord = AmxPackedRecordBytes(F::kType);
    const size_t tile_bytes = static_cast<size_t>(nb) * kRecord;
    const PackedRows<F, kTiles> src{packed + (r0 / kTileRows) * tile_bytes + kb0 * kRecord,
                                    tile_bytes};
    RowTiles<F, kTiles>(src, p, nbc, nt, kb0 == 0, out, ldo);
  } else {
    const GgufRows<F, kTiles> src{
        w + static_cast<size_t>(r0) * w_row_bytes + kb0 * sizeof(typename F::Block), w_row_bytes,
        nbc};
    RowTiles<F, kTiles>(src, p, nbc, nt, kb0 == 0, out, ldo);
  }
}

// Tokens [0, n_tokens) in chunks of 16 (the last may be partial), blocks in chunks of
// kBlockChunk, rows [row_begin, row_end) in tiles of 16 (a multiple of 16 rows), from the GGUF
// rows w or, when packed is not null, from their AMX-packed copy (row_begin a multiple of 16).
template <class F>
void MatMulTiles(const uint8_t* w, size_t w_row_bytes, const uint8_t* packed, int64_t nb,
                 const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin,
                 int64_t row_end) {
  static const TileConfig config = MakeTileConfig<F>();
  _tile_loadconfig(&config);
  PackedTokens p;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
    const int nt = static_cast<int>(n_tokens - t0 < kTileTokens ? n_tokens - t0 : kTileTokens);
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
      const int64_t nbc = nb - kb0 < kBlockChunk ? nb - kb0 : kBlockChunk;
      PackTokens<F>(xq + t0 * nb + kb0, nb, nt, nbc, p);
      // Two row tiles (sharing the activation tiles) at a time, then the odd one.
      int64_t r0 = row_begin;
      for (; r0 + 2 * kTileRows <= row_end; r0 += 2 * kTileRows) {
        RowTilesFrom<F, 2>(w, w_row_bytes, packed, nb, r0, kb0, p, nbc, nt, out + t0 * ldo + r0,
                           ldo);
      }
      if (r0 < row_end) {
        RowTilesFrom<F, 1>(w, w_row_bytes, packed, nb, r0, kb0, p, nbc, nt, out + t0 * ldo + r0,
                           ldo);
      }
    }
  }
  // Hands the tile state back, so the kernel need not save it at context switches.
  _tile_release();
}

template <class F>
void MatMulFormatAmx(WeightType type, const uint8_t* w, size_t w_row_bytes, const uint8_t* packed,
                     int64_t k, const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                     int64_t row_begin, int64_t row_end) {
  const int64_t nb = k / kQuantBlock;
  const int64_t n16 = TokensInChunksOf16(n_tokens);  // the AVX-512 level's split: same bits
  const int64_t tile_end = row_begin + (row_end - row_begin) / kTileRows * kTileRows;
  if (n16 == 0 || tile_end == row_begin) {
    return MatMulQuantAvx512Vnni(type, w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                 row_end);
  }
  if (row_begin % kTileRows != 0) packed = nullptr;
  MatMulTiles<F>(w, w_row_bytes, packed, nb, xq, n16, out, ldo, row_begin, tile_end);
  if (tile_end < row_end) {
    MatMulQuantAvx512Vnni(type, w, w_row_bytes, k, xq, n16, out, ldo, tile_end, row_end);
  }
  if (n16 < n_tokens) {
    MatMulQuantAvx512Vnni(type, w, w_row_bytes, k, xq + n16 * nb, n_tokens - n16, out + n16 * ldo,
                          ldo, row_begin, row_end);
  }
}

}  // namespace

void MatMulQuantAmx(WeightType type, const uint8_t* w, size_t w_row_bytes, const uint8_t* packed,
                    int64_t k, const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                    int64_t row_begin, int64_t row_end) {
  switch (type) {
    case WeightType::kQ4_0:
      return MatMulFormatAmx<AmxQ4_0>(type, w, w_row_bytes, packed, k, xq, n_tokens, out, ldo,
                                      row_begin, row_end);
    case WeightType::kQ4_1:
      return MatMulFormatAmx<AmxQ4_1>(type, w, w_row_bytes, packed, k, xq, n_tokens, out, ldo,
                                      row_begin, row_end);
    case WeightType::kQ8_0:
      return MatMulFormatAmx<AmxQ8_0>(type, w, w_row_bytes, packed, k, xq, n_tokens, out, ldo,
                                      row_begin, row_end);
    default:
      return;
  }
}

}  // namespace streamd::kernels::cpu::internal
