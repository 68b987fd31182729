// The AVX2 kernels for quantized weights x Q16_1 activations that read the activations in their
// token-major layout: the 1-token GEMV, the 4-token folding tile and the general small tile, with
// their drivers. Part of matmul_quant_kernels.h (which states the math, the overflow bounds and
// which kernel runs when); include only through it.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <utility>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu::internal {
namespace {

// Tokens per pass over the rows, so a chunk of activations stays in L1/L2.
constexpr int64_t kTokenChunk = 64;
// TileQuad: rows x groups of 4 tokens per tile (measured: 3 x 2 best of 7 shapes, 1x4 to 4x1).
constexpr int kQuadRows = 3;
constexpr int kQuadGroups = 2;
// Software prefetch distance of the 1-token kernels (measured: 4-16 KiB all help, 8 KiB best).
constexpr int64_t kPrefetchBytes = 8192;

// i32 lanes summing to sum_j w_j y_j over one block (y: BlockQ16_1::qs). Mac::MulAdd(acc, a, b):
// acc + the i32 sums of adjacent i16 products of a and b.
template <class Mac>
inline __m256i Dot(const WeightI16& w, const int16_t* y) {
  const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
  const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 16));
  return Mac::MulAdd(_mm256_madd_epi16(w.lo, y0), w.hi, y1);
}

// [sum p0, sum p1, sum p2, sum p3] of each 128-bit half: [p0 p1 p2 p3 | p0 p1 p2 p3].
inline __m256i Fold4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
}

// ---- Weight formats ---------------------------------------------------------------------------
// Widen: the block's quants as WeightI16. Scales: LoadScalePairs lanes -> [dw, ow] per row.
// TokenFactors: [dx, sx] -> [dx, os]; Os: sx -> os. kOffset: whether the ow * os term exists;
// kOffsetIsMin: whether ow is the block's second f16 (m), else dw.

struct Q4_1Format {
  using Block = BlockQ4_1;
  static constexpr bool kOffset = true, kOffsetIsMin = true;
  static WeightI16 Widen(const Block* b) { return UnpackNibbles(b->qs); }
  static __m256 Scales(__m256 pairs) { return pairs; }  // [dw, mw]
  static __m256 TokenFactors(__m256 ds) { return ds; }  // [dx, sx]
  static float Os(float sx) { return sx; }
};

struct Q4_0Format {
  using Block = BlockQ4_0;
  static constexpr bool kOffset = true, kOffsetIsMin = false;
  static WeightI16 Widen(const Block* b) { return UnpackNibbles(b->qs); }
  static __m256 Scales(__m256 pairs) { return _mm256_moveldup_ps(pairs); }  // [dw, dw]
  static __m256 TokenFactors(__m256 ds) {                                   // [dx, -8 sx]
    return _mm256_mul_ps(ds, _mm256_setr_ps(1, -8, 1, -8, 1, -8, 1, -8));
  }
  static float Os(float sx) { return -8.0f * sx; }
};

struct Q8_0Format {
  using Block = BlockQ8_0;
  static constexpr bool kOffset = false, kOffsetIsMin = false;
  static WeightI16 Widen(const Block* b) { return WidenBytes(b->qs); }
  static __m256 Scales(__m256 pairs) { return _mm256_moveldup_ps(pairs); }  // [dw, dw]
  static __m256 TokenFactors(__m256 ds) {                                   // [dx, 0]
    return _mm256_blend_ps(ds, _mm256_setzero_ps(), 0xaa);
  }
  static float Os(float) { return 0.0f; }
};

// Q5_0 and Q5_1 blocks: their nibbles (UnpackNibbles) and, lane for lane, all ones where the
// value's fifth bit in qh is set (lo: bit j for values 0-15, hi: bit 16 + j for 16-31).
struct Q5Lanes {
  WeightI16 nibbles;
  __m256i lo_set, hi_set;
};
inline Q5Lanes UnpackQ5(const uint8_t* qs, const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof qh);
  const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                        8192, 16384, static_cast<int16_t>(-32768));
  return {UnpackNibbles(qs),
          _mm256_cmpeq_epi16(
              _mm256_and_si256(_mm256_set1_epi16(static_cast<int16_t>(qh & 0xffffu)), bit), bit),
          _mm256_cmpeq_epi16(
              _mm256_and_si256(_mm256_set1_epi16(static_cast<int16_t>(qh >> 16)), bit), bit)};
}

// Q5_0: the value is nibble - 16 where the fifth bit is clear, the nibble where it is set: values
// in [-16, 15], no offset term (the sums stay below Q8_0's overflow bound).
struct Q5_0Format {
  using Block = BlockQ5_0;
  static constexpr bool kOffset = false, kOffsetIsMin = false;
  static WeightI16 Widen(const Block* b) {
    const Q5Lanes q = UnpackQ5(b->qs, b->qh);
    const __m256i sixteen = _mm256_set1_epi16(16);
    return {_mm256_sub_epi16(q.nibbles.lo, _mm256_andnot_si256(q.lo_set, sixteen)),
            _mm256_sub_epi16(q.nibbles.hi, _mm256_andnot_si256(q.hi_set, sixteen))};
  }
  static __m256 Scales(__m256 pairs) { return _mm256_moveldup_ps(pairs); }  // [dw, dw]
  static __m256 TokenFactors(__m256 ds) {                                   // [dx, 0]
    return _mm256_blend_ps(ds, _mm256_setzero_ps(), 0xaa);
  }
  static float Os(float) { return 0.0f; }
};

// Q5_1: 16 added where the fifth bit is set: values in [0, 31]; [dw, mw] and the offset term as
// Q4_1 (its d and m are the block's first 4 bytes too).
struct Q5_1Format {
  using Block = BlockQ5_1;
  static constexpr bool kOffset = true, kOffsetIsMin = true;
  static WeightI16 Widen(const Block* b) {
    const Q5Lanes q = UnpackQ5(b->qs, b->qh);
    const __m256i sixteen = _mm256_set1_epi16(16);
    return {_mm256_add_epi16(q.nibbles.lo, _mm256_and_si256(q.lo_set, sixteen)),
            _mm256_add_epi16(q.nibbles.hi, _mm256_and_si256(q.hi_set, sixteen))};
  }
  static __m256 Scales(__m256 pairs) { return pairs; }  // [dw, mw]
  static __m256 TokenFactors(__m256 ds) { return ds; }  // [dx, sx]
  static float Os(float sx) { return sx; }
};

// Q6_K: block b is an eighth of the super-block b / 8 (kBlocksPerUnit), values sc (q - 32) in
// [-4096, 4096] with sc the i8 scale of each 16 values (lo: values 0-15, hi: 16-31), d the
// super-block's f16, no offset term. i32 sums of one block stay below 2^28 (matmul_portable.cc);
// the f32 conversion of a sum may round, identically at every level.
struct Q6_KFormat {
  using Block = BlockQ6_K;
  static constexpr int kBlocksPerUnit = kQ6_KValues / kQuantBlock;
  static constexpr bool kOffset = false, kOffsetIsMin = false;
  // Block `sub` (0-7) of super-block s, laid out as quant_blocks.h says: half n, quarter j.
  static WeightI16 Widen(const Block* s, int sub) {
    const int n = sub >> 2, j = sub & 3;
    const __m256i ql =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s->ql + 64 * n + 32 * (j & 1)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s->qh + 32 * n));
    // 16-bit shifts: the bits a byte takes from its neighbour are masked off.
    const __m256i low = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (j >> 1))),
                                         _mm256_set1_epi8(0x0f));
    const __m256i high = _mm256_slli_epi16(
        _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3)), 4);
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
    const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
    const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
    return {_mm256_mullo_epi16(lo, _mm256_set1_epi16(s->sc[8 * n + 2 * j])),
            _mm256_mullo_epi16(hi, _mm256_set1_epi16(s->sc[8 * n + 2 * j + 1]))};
  }
  // [d, d] of up to 4 super-blocks, zeros for blocks n..3: LoadScalePairs's lanes (which would
  // read 2 bytes past the last super-block).
  static __m256 ScalePairs(const uint8_t* const* units, int n) {
    alignas(16) uint16_t d[8] = {};
    for (int r = 0; r < n; ++r) {
      std::memcpy(&d[2 * r], units[r] + offsetof(Block, d), sizeof(uint16_t));
      d[2 * r + 1] = d[2 * r];
    }
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
  }
  static __m256 TokenFactors(__m256 ds) {  // [dx, 0]
    return _mm256_blend_ps(ds, _mm256_setzero_ps(), 0xaa);
  }
  static float Os(float) { return 0.0f; }
};

// ---- Block addressing -------------------------------------------------------------------------
// Most formats store each 32-value block whole (Block), so block b of a row is the b-th Block.
// Q6_K stores 8 of them per super-block (F::kBlocksPerUnit): the kernels address the super-block
// ("unit") and pass the block's index in it to Widen. kBlockChunk is a multiple of every
// kBlocksPerUnit, so a chunk starts at a unit.

template <class F>
constexpr int BlocksPerUnit() {
  if constexpr (requires { F::kBlocksPerUnit; }) {
    return F::kBlocksPerUnit;
  } else {
    return 1;
  }
}
static_assert(kBlockChunk % (kQ6_KValues / kQuantBlock) == 0);

// Byte offset in a row of the unit holding block b.
template <class F>
constexpr size_t UnitOffset(int64_t b) {
  return static_cast<size_t>(b / BlocksPerUnit<F>()) * sizeof(typename F::Block);
}

// Block b of a row, given its unit.
template <class F>
inline WeightI16 WidenAt(const uint8_t* unit, int64_t b) {
  const auto* block = reinterpret_cast<const typename F::Block*>(unit);
  if constexpr (BlocksPerUnit<F>() == 1) {
    return F::Widen(block);
  } else {
    return F::Widen(block, static_cast<int>(b % BlocksPerUnit<F>()));
  }
}

// [dw0 ow0 dw1 ow1 ...] of up to 4 rows' units.
template <class F>
inline __m256 ScalePairsAt(const uint8_t* const* units, int n) {
  if constexpr (requires { F::ScalePairs(units, n); }) {
    return F::ScalePairs(units, n);
  } else {
    return F::Scales(LoadScalePairs(units, n));
  }
}

// ---- Kernels ----------------------------------------------------------------------------------
// Shared arguments: w is the first block of the tile's first row, rows w_stride bytes apart; x is
// the first block of the tile's first token, tokens nb blocks apart; out is element (first token,
// first row), tokens ldo floats apart.

// Prefetches the bytes one block step of a kRows-row tile consumes, kPrefetchBytes ahead (rows
// are contiguous, so that is a later tile; past the matrix end it is the next tensor or nothing,
// and prefetches never fault).
template <class F, int kRows>
inline void PrefetchStep(const uint8_t* w, int64_t b) {
  constexpr int kStep = kRows * static_cast<int>(sizeof(typename F::Block)) / BlocksPerUnit<F>();
  const uint8_t* p = w + kPrefetchBytes + b * kStep;
  for (int l = 0; l < (kStep + 63) / 64 + 1; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + 64 * l), _MM_HINT_T0);
  }
}

template <class Mac, class F>
void GemvQuad(const uint8_t* w, size_t w_stride, const BlockQ16_1* x, int64_t nb, float* out) {
  __m256 acc = _mm256_setzero_ps();     // [r0 r1 r2 r3 | r0 r1 r2 r3] scaled dots
  __m256 offset = _mm256_setzero_ps();  // odd lane 2r: offset terms of row r
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  for (int64_t b = 0; b < nb; ++b) {
    PrefetchStep<F, 4>(w, b);
    const uint8_t* blocks[4];  // the rows' units of block b
    for (int r = 0; r < 4; ++r) blocks[r] = w + r * w_stride + UnitOffset<F>(b);
    __m256i sums;
    if constexpr (requires { F::Dot4(blocks, x[b].qs); }) {
      // A format's own 4-row dot (the AVX-512 level's Q5_0, matmul_quant_avx512.cc), which
      // must give exactly the lanes below.
      sums = F::Dot4(blocks, x[b].qs);
    } else {
      __m256i p[4];
      for (int r = 0; r < 4; ++r) {
        p[r] = Dot<Mac>(WidenAt<F>(blocks[r], b), x[b].qs);
      }
      sums = Fold4(p[0], p[1], p[2], p[3]);
    }
    const __m256 dot = _mm256_cvtepi32_ps(sums);
    const __m256 scales =
        _mm256_mul_ps(ScalePairsAt<F>(blocks, 4), F::TokenFactors(BroadcastDs(&x[b].d)));
    if constexpr (F::kOffset) offset = _mm256_add_ps(offset, scales);
    acc = _mm256_fmadd_ps(dot, _mm256_permutevar8x32_ps(scales, even), acc);
  }
  alignas(32) float a[8], o[8];
  _mm256_store_ps(a, acc);
  _mm256_store_ps(o, offset);
  for (int r = 0; r < 4; ++r) out[r] = (a[r] + a[r + 4]) + o[2 * r + 1];
}

// Scales of one group of 4 tokens at one block: dx[t] and os[t] of token t.
struct GroupFactors {
  alignas(16) float dx[4];
  alignas(16) float os[4];
};

// kR rows x kG groups of 4 tokens over nbc blocks. f: [kG, ldf] the groups' factors for these
// blocks. Writes out, or adds to it unless first (later block chunks of the same tile).
template <class Mac, class F, int kR, int kG>
void TileQuad(const uint8_t* w, size_t w_stride, const BlockQ16_1* x, int64_t nb, int64_t nbc,
              const GroupFactors* f, int64_t ldf, bool first, float* out, int64_t ldo) {
  static_assert(kR <= 4);
  __m256 acc[kR][kG];  // tokens 4g..4g+3 in lanes 0-3 and (other partial sums) 4-7
  for (int r = 0; r < kR; ++r) {
    for (int g = 0; g < kG; ++g) acc[r][g] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nbc; ++b) {
    // A decode step of 4-5 sessions streams every weight from DRAM once, as one session's does:
    // without this prefetch a 4-token step took 16.4 ms against 4.0 for one token (2 threads,
    // `streamd bench --sessions 1,2,3,4,5 --decode-steps 30`); with it 10.5 ms.
    PrefetchStep<F, kR>(w, b);
    const uint8_t* blocks[kR];
    WeightI16 wq[kR];
    for (int r = 0; r < kR; ++r) {
      blocks[r] = w + r * w_stride + UnitOffset<F>(b);
      wq[r] = WidenAt<F>(blocks[r], b);
    }
    const __m256 pairs = ScalePairsAt<F>(blocks, kR);  // [dw0 ow0 dw1 ow1 ...]
    for (int g = 0; g < kG; ++g) {
      const BlockQ16_1* xg = x + 4 * g * nb + b;
      const GroupFactors& fg = f[g * ldf + b];
      const __m256 dx = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(fg.dx));
      const __m256 os = _mm256_castps128_ps256(_mm_load_ps(fg.os));  // upper half zeroed
      for (int r = 0; r < kR; ++r) {
        const __m256i h = Fold4(Dot<Mac>(wq[r], xg[0].qs), Dot<Mac>(wq[r], xg[nb].qs),
                                Dot<Mac>(wq[r], xg[2 * nb].qs), Dot<Mac>(wq[r], xg[3 * nb].qs));
        const __m256 dw = _mm256_permutevar8x32_ps(pairs, _mm256_set1_epi32(2 * r));
        acc[r][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_mul_ps(dw, dx), acc[r][g]);
        if constexpr (F::kOffset) {
          const __m256 ow = _mm256_permutevar8x32_ps(pairs, _mm256_set1_epi32(2 * r + 1));
          acc[r][g] = _mm256_fmadd_ps(ow, os, acc[r][g]);
        }
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int g = 0; g < kG; ++g) {
      alignas(16) float v[4];
      _mm_store_ps(
          v, _mm_add_ps(_mm256_castps256_ps128(acc[r][g]), _mm256_extractf128_ps(acc[r][g], 1)));
      for (int t = 0; t < 4; ++t) {
        float& o = out[(4 * g + t) * ldo + r];
        o = first ? v[t] : o + v[t];
      }
    }
  }
}

template <class Mac, class F, int kR, int kT>
void Tile(const uint8_t* w, size_t w_stride, const BlockQ16_1* x, int64_t nb, float* out,
          int64_t ldo) {
  static_assert(kR <= 4);
  __m256 acc[kR][kT];
  __m256 offset[kT];  // odd lane 2r: offset terms of row r
  for (int t = 0; t < kT; ++t) {
    offset[t] = _mm256_setzero_ps();
    for (int r = 0; r < kR; ++r) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    PrefetchStep<F, kR>(w, b);  // every token count: 2 tokens took 12.3 ms a step without
    const uint8_t* blocks[kR];
    WeightI16 wq[kR];
    for (int r = 0; r < kR; ++r) {
      blocks[r] = w + r * w_stride + UnitOffset<F>(b);
      wq[r] = WidenAt<F>(blocks[r], b);
    }
    const __m256 pairs = ScalePairsAt<F>(blocks, kR);
    for (int t = 0; t < kT; ++t) {
      const BlockQ16_1& xb = x[t * nb + b];
      const __m256 scales = _mm256_mul_ps(pairs, F::TokenFactors(BroadcastDs(&xb.d)));
      if constexpr (F::kOffset) offset[t] = _mm256_add_ps(offset[t], scales);
      for (int r = 0; r < kR; ++r) {
        const __m256 scale = _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(2 * r));
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot<Mac>(wq[r], xb.qs)), scale, acc[r][t]);
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    alignas(32) float off[8];
    _mm256_store_ps(off, offset[t]);
    for (int r = 0; r < kR; ++r) out[t * ldo + r] = HorizontalSum(acc[r][t]) + off[2 * r + 1];
  }
}

// ---- Drivers ----------------------------------------------------------------------------------

using TileFn = void (*)(const uint8_t*, size_t, const BlockQ16_1*, int64_t, float*, int64_t);
constexpr int kMaxR = 4;
constexpr int kMaxT = 2;

struct TileTable {
  TileFn fn[kMaxR + 1][kMaxT + 1] = {};
};

template <class Mac, class F, int kR, int... kTs>
constexpr void FillRow(TileTable& table, std::integer_sequence<int, kTs...>) {
  ((table.fn[kR][kTs + 1] = &Tile<Mac, F, kR, kTs + 1>), ...);
}

template <class Mac, class F, int... kRs>
constexpr TileTable MakeTable(std::integer_sequence<int, kRs...>) {
  TileTable table;
  (FillRow<Mac, F, kRs + 1>(table, std::make_integer_sequence<int, kMaxT>{}), ...);
  return table;
}

// Any rows x tokens with Tile (tails of kMaxR rows / kMaxT tokens get smaller tiles).
template <class Mac, class F>
void MatMulTiled(const uint8_t* w, size_t w_row_bytes, int64_t nb, const BlockQ16_1* xq,
                 int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  static constexpr TileTable kTable = MakeTable<Mac, F>(std::make_integer_sequence<int, kMaxR>{});
  for (int64_t c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
    const int64_t c1 = c0 + kTokenChunk < n_tokens ? c0 + kTokenChunk : n_tokens;
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kMaxR) {
      const int64_t nr = row_end - r0 < kMaxR ? row_end - r0 : kMaxR;
      for (int64_t t0 = c0; t0 < c1; t0 += kMaxT) {
        const int64_t nt = c1 - t0 < kMaxT ? c1 - t0 : kMaxT;
        kTable.fn[nr][nt](w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, xq + t0 * nb, nb,
                          out + t0 * ldo + r0, ldo);
      }
    }
  }
}

template <class Mac, class F>
void MatMulGemv(const uint8_t* w, size_t w_row_bytes, int64_t nb, const BlockQ16_1* xq, float* out,
                int64_t row_begin, int64_t row_end) {
  int64_t r0 = row_begin;
  for (; r0 + 4 <= row_end; r0 += 4) {
    GemvQuad<Mac, F>(w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, xq, nb, out + r0);
  }
  if (r0 < row_end) MatMulTiled<Mac, F>(w, w_row_bytes, nb, xq, 1, out, 0, r0, row_end);
}

// Tokens in groups of 4 kQuadGroups (then single groups of 4) with TileQuad, over blocks in chunks
// of kBlockChunk; leftover rows (below kQuadRows) and tokens (below 4) with Tile. xq and out start
// at the first token to compute.
template <class Mac, class F>
void MatMulQuad(const uint8_t* w, size_t w_row_bytes, int64_t nb, const BlockQ16_1* xq,
                int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  constexpr int kR = kQuadRows, kG = kQuadGroups;
  GroupFactors factors[kTokenChunk / 4 * kBlockChunk];  // [group in chunk, block in chunk]
  const int64_t n4 = n_tokens / 4 * 4;
  const int64_t quad_end = row_begin + (row_end - row_begin) / kR * kR;
  for (int64_t c0 = 0; c0 < n4; c0 += kTokenChunk) {
    const int64_t c1 = c0 + kTokenChunk < n4 ? c0 + kTokenChunk : n4;
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
      const int64_t nbc = nb - kb0 < kBlockChunk ? nb - kb0 : kBlockChunk;
      for (int64_t t = c0; t < c1; ++t) {
        GroupFactors* fg = factors + (t - c0) / 4 * kBlockChunk;
        for (int64_t b = 0; b < nbc; ++b) {
          const BlockQ16_1& xb = xq[t * nb + kb0 + b];
          fg[b].dx[(t - c0) % 4] = xb.d;
          fg[b].os[(t - c0) % 4] = F::Os(xb.s);
        }
      }
      for (int64_t r0 = row_begin; r0 < quad_end; r0 += kR) {
        const uint8_t* wr = w + static_cast<size_t>(r0) * w_row_bytes + UnitOffset<F>(kb0);
        for (int64_t t0 = c0; t0 < c1;) {
          const BlockQ16_1* x = xq + t0 * nb + kb0;
          const GroupFactors* f = factors + (t0 - c0) / 4 * kBlockChunk;
          float* o = out + t0 * ldo + r0;
          if (t0 + 4 * kG <= c1) {
            TileQuad<Mac, F, kR, kG>(wr, w_row_bytes, x, nb, nbc, f, kBlockChunk, kb0 == 0, o, ldo);
            t0 += 4 * kG;
          } else {
            TileQuad<Mac, F, kR, 1>(wr, w_row_bytes, x, nb, nbc, f, kBlockChunk, kb0 == 0, o, ldo);
            t0 += 4;
          }
        }
      }
    }
    if (quad_end < row_end) {
      MatMulTiled<Mac, F>(w, w_row_bytes, nb, xq + c0 * nb, c1 - c0, out + c0 * ldo, ldo, quad_end,
                          row_end);
    }
  }
  if (n4 < n_tokens) {
    MatMulTiled<Mac, F>(w, w_row_bytes, nb, xq + n4 * nb, n_tokens - n4, out + n4 * ldo, ldo,
                        row_begin, row_end);
  }
}

}  // namespace
}  // namespace streamd::kernels::cpu::internal
