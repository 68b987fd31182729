// Quantized weights (Q4_0, Q4_1, Q8_0) times Q16_1 activations on AMX tile multiplies.
//
// A batched decode step (one token per session) is bound by the integer multiply-accumulates:
// at the AVX-512 VNNI level (matmul_quant_avx512.cc) vpdpwssd retires 64 i16 products per cycle
// and the per-block weight widening and scaling roughly halve that. An AMX TMUL instruction
// multiplies a 16x32 byte tile by a 32x16 one (K = 32: exactly one quant block) in ~16 cycles;
// the vector units keep the weight transpose and the per-block scaling. Measured (matmul_bench
// BM_ModelMatmuls, all 30 layers' products from DRAM, one thread): 16 tokens 17.1 ms against
// 23.0 at the AVX-512 level, 64 tokens 58.5 against 80.2.
//
// The 16-bit activations are split exactly into bytes, q = 256 * hi + lo with hi = q >> 8
// (signed) and lo = q & 255 (unsigned), and the block's integer sum is rebuilt exactly as
// (sum w hi << 8) + sum w lo (|sum| <= 32 * 128 * 32767 < 2^31, the bound of
// matmul_quant_kernels.h). So this level computes the same i32 block sums as every other level
// and then the same f32 operations in the same order as OuterTile16 (per block
// acc = fma(f32(sum), dw * dx, acc), then acc = fma(ow, os, acc); blocks in chunks of
// kBlockChunk whose partial sums are added to out): its output is bit-identical to the AVX-512
// VNNI level's for every token count (tested in matmul_test.cc). Parts of a product this level
// does not take (fewer than kMinPaddedChunk tokens, rows not in a whole tile of 16) are handed to
// that level, which splits the same way.
//
// Tiles (C[token][row] += A[token][k] * B[k][row], one quant block per multiply):
//   A: 16 tokens x 32 bytes: the hi (tile 2) or lo (tile 3) bytes of the tokens' block, packed
//      once per chunk of tokens and blocks (PackTokens), reused by every row tile;
//   B: 8 x 64 bytes: 16 weight rows x 32 values in the VNNI order (4 consecutive values of a row
//      per 32-bit lane; tile 4), transposed from the rows' blocks for each (row tile, block);
//   C: 16 tokens x 16 rows of i32 (tiles 0 and 1 for hi and lo), stored to memory and scaled
//      with AVX-512, with the 16 rows of one token in one zmm, so results go straight to out.
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
    c.bytes_per_row[t] = kQuantBlock;
  }
  const int weights[] = {STREAMD_TILE_WEIGHTS_0, STREAMD_TILE_WEIGHTS_1};
  for (int t : weights) {
    c.rows[t] = kQuantBlock / 4;
    c.bytes_per_row[t] = kTileRows * 4;
  }
  return c;
}

// Per-format pieces: where a block's quants start, whether they are signed, and the offset
// term's factors (ow, os) of matmul_quant_kernels.h.
struct AmxQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false, kOffset = true, kOffsetIsMin = true;
  static float Os(float sx) { return sx; }
};
struct AmxQ4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kSigned = false, kOffset = true, kOffsetIsMin = false;
  static float Os(float sx) { return -8.0f * sx; }
};
struct AmxQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kSigned = true, kOffset = false, kOffsetIsMin = false;
  static float Os(float) { return 0.0f; }
};

// Activations of 16 tokens over up to kBlockChunk blocks, as the A tiles want them.
struct PackedTokens {
  alignas(64) int8_t hi[kBlockChunk][kTileTokens][kQuantBlock];
  alignas(64) uint8_t lo[kBlockChunk][kTileTokens][kQuantBlock];
  alignas(64) float dx[kBlockChunk][kTileTokens];
  alignas(64) float os[kBlockChunk][kTileTokens];
};

// Tokens [0, n_valid) of x, blocks [0, nbc); missing tokens get zero bytes and factors.
template <class F>
void PackTokens(const BlockQ16_1* x, int64_t nb, int n_valid, int64_t nbc, PackedTokens& p) {
  for (int64_t b = 0; b < nbc; ++b) {
    for (int t = 0; t < kTileTokens; ++t) {
      __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
      float dx = 0.0f, os = 0.0f;
      if (t < n_valid) {
        const BlockQ16_1& xb = x[t * nb + b];
        const __m512i q = _mm512_loadu_si512(xb.qs);
        lo = _mm512_cvtepi16_epi8(q);  // truncation keeps the low byte
        hi = _mm512_cvtepi16_epi8(_mm512_srai_epi16(q, 8));
        dx = xb.d;
        os = F::Os(xb.s);
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.hi[b][t]), hi);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.lo[b][t]), lo);
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
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * stride)),
                           2);
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 3 * stride)),
                           3);
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

// One block of 16 rows as the B tile: row kk holds values 4kk .. 4kk+3 of every row.
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
    for (int j = 0; j < 4; ++j) {
      _mm512_store_si512(b[j], _mm512_and_si512(v[j], mask));
      _mm512_store_si512(b[4 + j], _mm512_and_si512(_mm512_srli_epi16(v[j], 4), mask));
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
  alignas(64) uint8_t b[kTiles][kQuantBlock / 4][kTileRows * 4];
};

// Tile multiplies of one block for kTiles (1 or 2) row tiles: s[i] = block sums of row tile i.
template <class F, int kTiles>
inline void MultiplyBlock(const PackedTokens& p, int64_t b, const WeightTiles<kTiles>& wt,
                          BlockSums* s) {
  // The tile loads' asm statements do not tell the compiler they read memory: make the stores
  // to wt happen first.
  asm volatile("" ::: "memory");
  _tile_loadd(STREAMD_TILE_ACT_HI, p.hi[b], kQuantBlock);
  _tile_loadd(STREAMD_TILE_ACT_LO, p.lo[b], kQuantBlock);
  _tile_loadd(STREAMD_TILE_WEIGHTS_0, wt.b[0], kTileRows * 4);
  _tile_zero(STREAMD_TILE_SUM_HI_0);
  _tile_zero(STREAMD_TILE_SUM_LO_0);
  if constexpr (kTiles == 2) {
    _tile_loadd(STREAMD_TILE_WEIGHTS_1, wt.b[kTiles - 1], kTileRows * 4);
    _tile_zero(STREAMD_TILE_SUM_HI_1);
    _tile_zero(STREAMD_TILE_SUM_LO_1);
  }
  if constexpr (F::kSigned) {
    _tile_dpbssd(STREAMD_TILE_SUM_HI_0, STREAMD_TILE_ACT_HI, STREAMD_TILE_WEIGHTS_0);
    _tile_dpbusd(STREAMD_TILE_SUM_LO_0, STREAMD_TILE_ACT_LO, STREAMD_TILE_WEIGHTS_0);
    if constexpr (kTiles == 2) {
      _tile_dpbssd(STREAMD_TILE_SUM_HI_1, STREAMD_TILE_ACT_HI, STREAMD_TILE_WEIGHTS_1);
      _tile_dpbusd(STREAMD_TILE_SUM_LO_1, STREAMD_TILE_ACT_LO, STREAMD_TILE_WEIGHTS_1);
    }
  } else {
    _tile_dpbsud(STREAMD_TILE_SUM_HI_0, STREAMD_TILE_ACT_HI, STREAMD_TILE_WEIGHTS_0);
    _tile_dpbuud(STREAMD_TILE_SUM_LO_0, STREAMD_TILE_ACT_LO, STREAMD_TILE_WEIGHTS_0);
    if constexpr (kTiles == 2) {
      _tile_dpbsud(STREAMD_TILE_SUM_HI_1, STREAMD_TILE_ACT_HI, STREAMD_TILE_WEIGHTS_1);
      _tile_dpbuud(STREAMD_TILE_SUM_LO_1, STREAMD_TILE_ACT_LO, STREAMD_TILE_WEIGHTS_1);
    }
  }
  constexpr int kStride = kTileRows * sizeof(int32_t);
  _tile_stored(STREAMD_TILE_SUM_HI_0, s[0].hi, kStride);
  _tile_stored(STREAMD_TILE_SUM_LO_0, s[0].lo, kStride);
  if constexpr (kTiles == 2) {
    _tile_stored(STREAMD_TILE_SUM_HI_1, s[kTiles - 1].hi, kStride);
    _tile_stored(STREAMD_TILE_SUM_LO_1, s[kTiles - 1].lo, kStride);
  }
}

// acc[t] (16 rows of token t) += the scaled block sums of tokens [0, n_valid).
template <class F>
inline void ScaleBlock(const BlockSums& s, const PackedTokens& p, int64_t b, const uint8_t* block,
                       __m512i row_offsets, int n_valid, __m512* acc) {
  __m512 dw, ow;
  RowScales<F>(block, row_offsets, &dw, &ow);
  for (int t = 0; t < n_valid; ++t) {
    const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(s.hi[t]), 8),
                                         _mm512_load_si512(s.lo[t]));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(p.dx[b][t])),
                             acc[t]);
    if constexpr (F::kOffset) acc[t] = _mm512_fmadd_ps(ow, _mm512_set1_ps(p.os[b][t]), acc[t]);
  }
}

// kTiles x 16 rows x tokens [0, n_valid) of the packed chunk over nbc blocks: out[t * ldo + r]
// is written (first block chunk) or added to.
//
// Costs per 16 rows x 16 tokens x one block, measured on this project's Sapphire Rapids machine
// (one 1536 x 576 Q4_1 matrix in L2, each part left out in turn): weight transpose 14 ns, tile
// loads + multiplies + stores 21 ns, scaling 23 ns; 54 ns together against 83 ns for the AVX-512
// VNNI kernel. The parts add up: the vector code did not run while the tile unit worked, even
// with the loop software-pipelined by one block as here (the multiplies of block b issued before
// block b - 1 is scaled) and with two row tiles sharing the activation tiles.
template <class F, int kTiles>
void RowTiles(const uint8_t* w, size_t w_stride, const PackedTokens& p, int64_t nbc, int n_valid,
              bool first, float* out, int64_t ldo) {
  using Block = typename F::Block;
  WeightTiles<kTiles> wt[2];
  BlockSums sums[2][kTiles];
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(w_stride)));
  const size_t tile_stride = kTileRows * w_stride;
  __m512 acc[kTiles][kTileTokens];
  for (int i = 0; i < kTiles; ++i) {
    for (int t = 0; t < kTileTokens; ++t) acc[i][t] = _mm512_setzero_ps();
  }
  // The next row tiles follow these in memory: stream them into L2 while these compute (a
  // decode step reads every weight from DRAM once). Measured on the 30-layer matmul benchmark
  // at 16 tokens: no prefetch 22.0 ms, into L1 20.3, into L2 17.1, L2 two tiles ahead 19.7.
  const uint8_t* next = w + kTiles * tile_stride;
  const int64_t lines_per_step =
      (static_cast<int64_t>(kTiles * tile_stride) / 64 + nbc - 1) / nbc;
  for (int64_t b = 0; b <= nbc; ++b) {
    for (int64_t l = 0; l < lines_per_step; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(next + 64 * (b * lines_per_step + l)),
                   _MM_HINT_T1);
    }
    if (b < nbc) {
      for (int i = 0; i < kTiles; ++i) {
        PackWeights<F>(w + i * tile_stride + b * sizeof(Block), w_stride, wt[b & 1].b[i]);
      }
      MultiplyBlock<F, kTiles>(p, b, wt[b & 1], sums[b & 1]);
    }
    if (b == 0) continue;
    for (int i = 0; i < kTiles; ++i) {
      ScaleBlock<F>(sums[(b - 1) & 1][i], p, b - 1, w + i * tile_stride + (b - 1) * sizeof(Block),
                    row_offsets, n_valid, acc[i]);
    }
  }
  for (int i = 0; i < kTiles; ++i) {
    for (int t = 0; t < n_valid; ++t) {
      float* o = out + t * ldo + i * kTileRows;
      _mm512_storeu_ps(o, first ? acc[i][t] : _mm512_add_ps(_mm512_loadu_ps(o), acc[i][t]));
    }
  }
}

// Tokens [0, n_tokens) in chunks of 16 (the last may be partial), blocks in chunks of
// kBlockChunk, rows [row_begin, row_end) in tiles of 16 (a multiple of 16 rows).
template <class F>
void MatMulTiles(const uint8_t* w, size_t w_row_bytes, int64_t nb, const BlockQ16_1* xq,
                 int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  static const TileConfig config = MakeTileConfig();
  _tile_loadconfig(&config);
  PackedTokens p;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
    const int nt = static_cast<int>(n_tokens - t0 < kTileTokens ? n_tokens - t0 : kTileTokens);
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
      const int64_t nbc = nb - kb0 < kBlockChunk ? nb - kb0 : kBlockChunk;
      PackTokens<F>(xq + t0 * nb + kb0, nb, nt, nbc, p);
      const uint8_t* wb = w + static_cast<size_t>(kb0) * sizeof(typename F::Block);
      int64_t r0 = row_begin;
      for (; r0 + 2 * kTileRows <= row_end; r0 += 2 * kTileRows) {
        RowTiles<F, 2>(wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, p, nbc, nt,
                       kb0 == 0, out + t0 * ldo + r0, ldo);
      }
      if (r0 < row_end) {
        RowTiles<F, 1>(wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, p, nbc, nt,
                       kb0 == 0, out + t0 * ldo + r0, ldo);
      }
    }
  }
  // Hands the tile state back, so the kernel need not save it at context switches.
  _tile_release();
}

template <class F>
void MatMulFormatAmx(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                     const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                     int64_t row_begin, int64_t row_end) {
  const int64_t nb = k / kQuantBlock;
  const int64_t n16 = TokensInChunksOf16(n_tokens);  // the AVX-512 level's split: same bits
  const int64_t tile_end = row_begin + (row_end - row_begin) / kTileRows * kTileRows;
  if (n16 == 0 || tile_end == row_begin) {
    return MatMulQuantAvx512Vnni(type, w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                 row_end);
  }
  MatMulTiles<F>(w, w_row_bytes, nb, xq, n16, out, ldo, row_begin, tile_end);
  if (tile_end < row_end) {
    MatMulQuantAvx512Vnni(type, w, w_row_bytes, k, xq, n16, out, ldo, tile_end, row_end);
  }
  if (n16 < n_tokens) {
    MatMulQuantAvx512Vnni(type, w, w_row_bytes, k, xq + n16 * nb, n_tokens - n16,
                          out + n16 * ldo, ldo, row_begin, row_end);
  }
}

}  // namespace

void MatMulQuantAmx(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                    const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                    int64_t row_begin, int64_t row_end) {
  switch (type) {
    case WeightType::kQ4_0:
      return MatMulFormatAmx<AmxQ4_0>(type, w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                      row_end);
    case WeightType::kQ4_1:
      return MatMulFormatAmx<AmxQ4_1>(type, w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                      row_end);
    case WeightType::kQ8_0:
      return MatMulFormatAmx<AmxQ8_0>(type, w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                      row_end);
    default:
      return;
  }
}

}  // namespace streamd::kernels::cpu::internal
