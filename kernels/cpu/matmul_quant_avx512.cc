// Quantized weights (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q6_K) times Q16_1 activations, AVX-512 VNNI
// level.
//
// Batches of many tokens (decode steps of many sessions, prefill chunks) are bound by the i16
// multiply-accumulates. Measured on this project's Sapphire Rapids machine, vpdpwssd issues two
// per cycle at both vector widths, and its 5-cycle latency needs 10+ independent accumulators to
// reach that rate; the AVX2 tokens-in-lanes kernel (OuterTile, matmul_quant_kernels.h) has only
// 6 (16 vector registers) and runs latency-bound at half rate. Here OuterTile16 puts 16 tokens in
// the lanes of one zmm register (twice the products per instruction), folds each weight pair into
// the instruction as an embedded broadcast (DpwssdBroadcast), and keeps two accumulators per row
// (even and odd pairs of the block) for 2 * kRows16 independent chains in the 32 zmm registers, and
// prefetches the next tile's weights (decode steps stream every weight from DRAM once).
//
// Measured (kernels_cpu_bench BM_ModelMatmuls, or a whole-model loop of all 30 layers' products
// and the head, single thread, CPU time): 16 tokens 1.8 ms/token against 2.8 for AVX-VNNI
// (1.55x), 64 tokens 1.7 against 2.6; 1 token unchanged (~10 ms: DRAM-bound).
//
// Same math as the other levels: exact i32 sums of one block (even + odd halves: the overflow
// bound of matmul_quant_kernels.h holds for the whole block), scaled in f32 per block:
//   acc = fma(f32(sum), dw * dx, acc); acc = fma(ow, os, acc)
// in the same order and with the same block chunks as OuterTile, so chunks of 16 tokens give the
// AVX2 level's results bit for bit. 1-token products and small remainders run the AVX2 kernels
// (with the EVEX encoding of vpdpwssd, which may use all 32 registers).
//
// Compiled with -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni; reached only
// after the run-time check in isa.cc.
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/matmul_quant_kernels.h"

namespace streamd::kernels::cpu::internal {
namespace {

struct DpwssdEvex {
  static __m256i MulAdd(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpwssd_epi32(acc, a, b);
  }
};

// Per 128-bit quarter q of the 4 rows' vpmaddwd lanes of one 32-value block: [p0 p1 p2 p3],
// each the sum of that quarter's 4 lanes (values 8 q .. 8 q + 7 of the block).
inline __m512i FoldQuarters(const __m512i* p) {
  const __m512i u =
      _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
  const __m512i v =
      _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u, v), _mm512_unpackhi_epi64(u, v));
}
// Quarters 0 + 2 (values 0-7 and 16-23) and 1 + 3: Fold4's two 128-bit halves.
inline __m256i AddQuarterPairs(__m512i w) {
  return _mm512_castsi512_si256(_mm512_add_epi32(w, _mm512_shuffle_i32x4(w, w, 0x4e)));
}
// The 4 rows' vpmaddwd lanes of one 32-value block (lanes 0-7: values 0-15, 8-15: values 16-31)
// as Fold4(Dot(row 0), .., Dot(row 3)) of the AVX2 kernels gives them: [r0 r1 r2 r3 | r0 r1 r2
// r3], each half the sum of the same values' pairs (exact i32: the same bits).
inline __m256i Fold4Zmm(const __m512i* p) { return AddQuarterPairs(FoldQuarters(p)); }

// Q5_0 and Q5_1 blocks in zmm registers: the 32 nibbles widened to i16 at once (values 0-15 in
// lanes 0-15, 16-31 in lanes 16-31, by a variable shift), and the fifth bits as a mask register
// straight from qh.
inline __m512i NibblesZmm(const uint8_t* qs) {
  const __m256i bytes =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  return _mm512_and_si512(_mm512_srlv_epi16(_mm512_cvtepu8_epi16(bytes), shift),
                          _mm512_set1_epi16(0x0f));
}
inline __mmask32 FifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  return _cvtu32_mask32(bits);
}

// Fold4(Dot(row 0), .., Dot(row 3)) of the AVX2 kernels for 4 blocks of F (F::Widen512: one
// block's 32 values as i16): one vpmaddwd per row (the pair sums alone; a vpdpwssd would need a
// zeroed accumulator first), the four rows' 128-bit quarters folded by Fold4Zmm.
template <class F>
inline __m256i Dot4Zmm(const uint8_t* const* blocks, const int16_t* y) {
  const __m512i yv = _mm512_loadu_si512(reinterpret_cast<const void*>(y));
  __m512i p[4];
  for (int r = 0; r < 4; ++r) {
    p[r] =
        _mm512_madd_epi16(F::Widen512(reinterpret_cast<const typename F::Block*>(blocks[r])), yv);
  }
  return Fold4Zmm(p);
}

// Q5_0 with its 1-token dots in zmm registers (Dot4Zmm), so the result stays the AVX2 level's bit
// for bit: ~8 instructions per row and block where the AVX2 widening and hadds take ~20; the
// 1-token product of Qwen2.5-Coder-0.5B's Q5_0 matrices is compute-bound at AVX2's
// (docs/PERFORMANCE.md). The 16-token lanes and the tiles take Widen: the fifth bits as mask
// registers (AVX-512 BW and VL) instead of AVX2's broadcast, and, compare and select; the same
// values.
struct Q5_0FormatZmm : Q5_0Format {
  static WeightI16 Widen(const BlockQ5_0* b) {
    const __mmask32 set = FifthBits(b->qh);
    WeightI16 v = UnpackNibbles(b->qs);
    const __m256i sixteen = _mm256_set1_epi16(16);
    v.lo = _mm256_mask_sub_epi16(v.lo, static_cast<__mmask16>(~set & 0xffffu), v.lo, sixteen);
    v.hi = _mm256_mask_sub_epi16(v.hi, static_cast<__mmask16>(~set >> 16), v.hi, sixteen);
    return v;
  }
  // nibble - 16 where the fifth bit is clear, the nibble + 16 - 16 where it is set.
  static __m512i Widen512(const BlockQ5_0* b) {
    const __m512i nibbles = NibblesZmm(b->qs);
    return _mm512_mask_blend_epi16(FifthBits(b->qh),
                                   _mm512_sub_epi16(nibbles, _mm512_set1_epi16(16)), nibbles);
  }
  static __m256i Dot4(const uint8_t* const* blocks, const int16_t* y) {
    return Dot4Zmm<Q5_0FormatZmm>(blocks, y);
  }
};

// Q5_1 the same way: its values 0-31 (16 added where the fifth bit is set), its offset term as
// Q4_1's.
struct Q5_1FormatZmm : Q5_1Format {
  static WeightI16 Widen(const BlockQ5_1* b) {
    const __mmask32 set = FifthBits(b->qh);
    WeightI16 v = UnpackNibbles(b->qs);
    const __m256i sixteen = _mm256_set1_epi16(16);
    v.lo = _mm256_mask_add_epi16(v.lo, static_cast<__mmask16>(set & 0xffffu), v.lo, sixteen);
    v.hi = _mm256_mask_add_epi16(v.hi, static_cast<__mmask16>(set >> 16), v.hi, sixteen);
    return v;
  }
  static __m512i Widen512(const BlockQ5_1* b) {
    const __m512i nibbles = NibblesZmm(b->qs);
    return _mm512_mask_add_epi16(nibbles, FifthBits(b->qh), nibbles, _mm512_set1_epi16(16));
  }
  static __m256i Dot4(const uint8_t* const* blocks, const int16_t* y) {
    return Dot4Zmm<Q5_1FormatZmm>(blocks, y);
  }
};

// Q6_K's 1-token product in zmm registers. Block by block (GemvQuad with Q6_KFormat) each row's
// 32 values take ~18 instructions to widen, and the product ran 2.4x the Q8_0 copy's time in
// cache. Here a row's half super-block (4 blocks, 128 values) is widened at once: its 64 ql and
// 32 qh bytes are loaded once, the 6-bit values made in bytes (one mask or shift per 64), then
// sign-extended to i16. The four rows' quarter sums are folded (FoldQuarters), multiplied by
// their 16-value scales in i32, added as Fold4Zmm adds them and scaled in f32 exactly as
// GemvQuad does: the same integers, so the result is the AVX2 level's bit for bit.
struct Q6_KHalfZmm {
  __m512i v[4];  // blocks j = 0..3 of the half: the i16 values q - 32, or sc (q - 32)
};

// The half's values q - 32 as i16, not yet times their scales.
inline Q6_KHalfZmm Q6_KHalfValues(const BlockQ6_K* s, int n) {
  const __m512i ql = _mm512_loadu_si512(s->ql + 64 * n);  // j = 0 | 1 low nibbles, 2 | 3 high
  const __m512i qh =
      _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s->qh + 32 * n)));
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  // Bits 2 j, 2 j + 1 of qh to bits 4-5 of each byte: j = 0 | 1 shift left by 4 | 2, j = 2 | 3
  // right by 0 | 2 (16-bit shifts: what crosses a byte is masked off).
  const __m512i left = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i right = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i h01 = _mm512_and_si512(_mm512_sllv_epi16(qh, left), m30);
  const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(qh, right), m30);
  const __m512i thirty_two = _mm512_set1_epi8(32);
  const __m512i q01 = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(ql, m4), h01), thirty_two);
  const __m512i q23 = _mm512_sub_epi8(
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), h23), thirty_two);
  Q6_KHalfZmm h;
  const __m256i q[4] = {_mm512_castsi512_si256(q01), _mm512_extracti64x4_epi64(q01, 1),
                        _mm512_castsi512_si256(q23), _mm512_extracti64x4_epi64(q23, 1)};
  for (int j = 0; j < 4; ++j) h.v[j] = _mm512_cvtepi8_epi16(q[j]);
  return h;
}

// The half's values sc (q - 32) as i16 (each block's two 16-value scales multiplied in).
inline Q6_KHalfZmm WidenQ6_KHalf(const BlockQ6_K* s, int n) {
  Q6_KHalfZmm h = Q6_KHalfValues(s, n);
  // The half's 8 scales as i16; block j takes sc[2 j] for values 0-15 and sc[2 j + 1] for 16-31.
  int64_t sc8;
  std::memcpy(&sc8, s->sc + 8 * n, sizeof sc8);
  const __m512i sc = _mm512_castsi128_si512(_mm_cvtepi8_epi16(_mm_cvtsi64_si128(sc8)));
  for (int j = 0; j < 4; ++j) {
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * j)),
                                           _mm256_set1_epi16(static_cast<int16_t>(2 * j + 1)), 1);
    h.v[j] = _mm512_mullo_epi16(h.v[j], _mm512_permutexvar_epi16(idx, sc));
  }
  return h;
}

// The 16-value scales of 4 rows' half super-blocks as FoldQuarters lays out their sums: for block
// j, [sc_r[2 j] for rows r = 0..3 | the same | sc_r[2 j + 1] for r = 0..3 | the same] as i32.
inline void QuarterScales(const uint8_t* const* units, int n, __m512i* scales) {
  int64_t sc8[4];
  for (int r = 0; r < 4; ++r) {
    std::memcpy(&sc8[r], reinterpret_cast<const BlockQ6_K*>(units[r])->sc + 8 * n, sizeof sc8[r]);
  }
  // i16 lane 8 r + k: row r's scale k of the half.
  const __m512i all = _mm512_cvtepi8_epi16(_mm256_setr_epi64x(sc8[0], sc8[1], sc8[2], sc8[3]));
  for (int j = 0; j < 4; ++j) {
    const auto lo = static_cast<int16_t>(2 * j), hi = static_cast<int16_t>(2 * j + 1);
    const __m512i idx = _mm512_zextsi256_si512(
        _mm256_setr_epi16(lo, 8 + lo, 16 + lo, 24 + lo, lo, 8 + lo, 16 + lo, 24 + lo, hi, 8 + hi,
                          16 + hi, 24 + hi, hi, 8 + hi, 16 + hi, 24 + hi));
    scales[j] = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, all)));
  }
}

// GemvQuad<DpwssdEvex, Q6_KFormat> by half super-blocks, for kT tokens at once: 4 rows from w
// (rows w_stride apart), tokens nb blocks apart in x and ldo floats apart in out. Each token's
// figures are computed as the 1-token product computes them (the AVX2 level's bits), so a
// token's result does not depend on the batch it came in; the widening is shared by the batch.
template <int kT>
void GemvQuadQ6_K(const uint8_t* w, size_t w_stride, const BlockQ16_1* x, int64_t nb, float* out,
                  int64_t ldo) {
  using F = Q6_KFormat;
  __m256 acc[kT];  // per token: [r0 r1 r2 r3 | r0 r1 r2 r3] scaled dots
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  for (int64_t s = 0; s < nb / F::kBlocksPerUnit; ++s) {
    const uint8_t* units[4];
    for (int r = 0; r < 4; ++r) units[r] = w + r * w_stride + s * sizeof(BlockQ6_K);
    // [d0 d1 d2 d3 | d0 d1 d2 d3]: GemvQuad's scale pairs permuted as its products take them
    // (d_r dx: the same products), once per super-block rather than per block and token.
    const __m256 d = _mm256_permutevar8x32_ps(F::ScalePairs(units, 4), even);
    for (int n = 0; n < 2; ++n) {
      // The values unscaled, and each quarter's sum times its scale after the fold (exact in
      // i32, so the same sums): one vpmulld per block and token where scaling the values took
      // a vpmullw and a vpermw per block and row (the 1.5B's output head and ffn_down at 1 token:
      // docs/PERFORMANCE.md).
      Q6_KHalfZmm h[4];
      for (int r = 0; r < 4; ++r) {
        h[r] = Q6_KHalfValues(reinterpret_cast<const BlockQ6_K*>(units[r]), n);
      }
      __m512i quarter_scales[4];
      QuarterScales(units, n, quarter_scales);
      for (int j = 0; j < 4; ++j) {
        const int64_t b = s * F::kBlocksPerUnit + 4 * n + j;
        PrefetchStep<F, 4>(w, b);
        for (int t = 0; t < kT; ++t) {
          const BlockQ16_1& xb = x[t * nb + b];
          const __m512i yv = _mm512_loadu_si512(reinterpret_cast<const void*>(xb.qs));
          __m512i p[4];
          for (int r = 0; r < 4; ++r) p[r] = _mm512_madd_epi16(h[r].v[j], yv);
          const __m256 dot = _mm256_cvtepi32_ps(
              AddQuarterPairs(_mm512_mullo_epi32(FoldQuarters(p), quarter_scales[j])));
          acc[t] = _mm256_fmadd_ps(dot, _mm256_mul_ps(d, _mm256_set1_ps(xb.d)), acc[t]);
        }
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    alignas(32) float a[8];
    _mm256_store_ps(a, acc[t]);
    // + 0.0f: GemvQuad's (zero) offset term, which turns a -0 sum into +0 there too.
    for (int r = 0; r < 4; ++r) out[t * ldo + r] = (a[r] + a[r + 4]) + 0.0f;
  }
}

// Products of 1 to kMaxSmallQ6_K tokens (those the 16-token lanes leave: TokensInChunksOf16):
// rows 4 at a time with GemvQuadQ6_K, the rest with the AVX2 tiles (Tile, which for 1 token is
// what MatMulGemv runs there too).
constexpr int kMaxSmallQ6_K = kMinPaddedChunk - 1;
void MatMulSmallQ6_K(const uint8_t* w, size_t w_row_bytes, int64_t k, const BlockQ16_1* xq,
                     int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin,
                     int64_t row_end) {
  static_assert(kMaxSmallQ6_K == 5);
  using Fn = void (*)(const uint8_t*, size_t, const BlockQ16_1*, int64_t, float*, int64_t);
  static constexpr Fn kByTokens[kMaxSmallQ6_K + 1] = {nullptr,          &GemvQuadQ6_K<1>,
                                                      &GemvQuadQ6_K<2>, &GemvQuadQ6_K<3>,
                                                      &GemvQuadQ6_K<4>, &GemvQuadQ6_K<5>};
  const int64_t nb = k / kQuantBlock;
  int64_t r0 = row_begin;
  for (; r0 + 4 <= row_end; r0 += 4) {
    kByTokens[n_tokens](w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, xq, nb, out + r0,
                        ldo);
  }
  if (r0 < row_end) {
    MatMulTiled<DpwssdEvex, Q6_KFormat>(w, w_row_bytes, nb, xq, n_tokens, out, ldo, r0, row_end);
  }
}

constexpr int kLanes16 = 16;
// Rows per tile: 2 * kRows16 i32 chains + kRows16 f32 accumulators + 2 activation vectors fit in
// the 32 registers. Measured (kernels_cpu_bench, the 1.5B's [8960, 1536] and [1536, 8960] at 16
// tokens, Zen 4): 6 best for the formats of one block per row (4 and 8 no better, 4 up to 7%
// slower); Q6_K, whose widening holds a half super-block per row, 4 (4% faster than 6).
template <class F>
constexpr int kRows16 = std::is_same_v<F, Q6_KFormat> ? 4 : 6;

// Activations of 16 tokens over up to kBlockChunk blocks, tokens in lanes.
struct PackedChunk16 {
  // [block][pair i][lane]: the i16 pair (y_2i, y_2i+1) of token `lane`, as i32.
  alignas(64) int32_t y[kBlockChunk][kQuantBlock / 2][kLanes16];
  alignas(64) float dx[kBlockChunk][kLanes16];  // block scales
  alignas(64) float os[kBlockChunk][kLanes16];  // offset factors (F::Os)
};

// Packs tokens [0, n_valid) of x, blocks [0, nbc); lanes of missing tokens get y = dx = os = 0.
// x: first token's first block of the chunk, tokens nb blocks apart.
template <class F>
void PackChunk16(const BlockQ16_1* x, int64_t nb, int n_valid, int64_t nbc, PackedChunk16& p) {
  for (int64_t b = 0; b < nbc; ++b) {
    for (int half = 0; half < 2; ++half) {
      __m256i lo[8], hi[8];  // pairs 0-7 and 8-15 of tokens 8 half + l
      for (int l = 0; l < 8; ++l) {
        const int t = 8 * half + l;
        if (t < n_valid) {
          const BlockQ16_1& xb = x[t * nb + b];
          lo[l] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
          hi[l] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs + 16));
          p.dx[b][t] = xb.d;
          p.os[b][t] = F::Os(xb.s);
        } else {
          lo[l] = hi[l] = _mm256_setzero_si256();
          p.dx[b][t] = p.os[b][t] = 0.0f;
        }
      }
      Transpose8x8(lo);
      Transpose8x8(hi);
      for (int i = 0; i < 8; ++i) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(&p.y[b][i][8 * half]), lo[i]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(&p.y[b][i + 8][8 * half]), hi[i]);
      }
    }
  }
}

// Per-row f32 scales of one weight block: dw, and ow (the offset's weight factor; unused when
// !F::kOffset). Same values as ScalePairsAt. block: the block's unit (matmul_quant_tiles.h).
template <class F>
inline void RowScales(const uint8_t* block, float* dw, float* ow) {
  if constexpr (BlocksPerUnit<F>() > 1) {  // Q6_K: the super-block's d, no offset term
    uint16_t d;
    std::memcpy(&d, block + offsetof(typename F::Block, d), sizeof d);
    *dw = *ow = _cvtsh_ss(d);
    return;
  }
  uint16_t d, m;
  std::memcpy(&d, block, sizeof d);
  std::memcpy(&m, block + 2, sizeof m);
  *dw = _cvtsh_ss(d);
  if constexpr (F::kOffsetIsMin) {
    *ow = _cvtsh_ss(m);
  } else {
    *ow = *dw;  // Q4_0: dw * (-8 sx); Q8_0: no offset term
  }
}

// acc += the i16 pairs of y times the pair at w in every lane, as one vpdpwssd with an embedded
// broadcast ({1to16}): GCC does not fold _mm512_set1_epi32 of a load into the instruction.
[[gnu::always_inline]] inline void DpwssdBroadcast(__m512i& acc, __m512i y, const int32_t* w) {
  asm("vpdpwssd %[w]%{1to16%}, %[y], %[acc]" : [acc] "+v"(acc) : [y] "v"(y), [w] "m"(*w));
}

// How many blocks of a row OuterTile16 widens at once: Q6_K a half super-block (WidenQ6_KHalf:
// ~8 instructions per block where its block-by-block Widen takes ~17, as many as the block's 16
// vpdpwssd per row; 1.5B's ffn_down at 16 tokens: see docs/PERFORMANCE.md), the others one.
template <class F>
constexpr int kWidenBlocks = std::is_same_v<F, Q6_KFormat> ? 4 : 1;

// Blocks b .. b + kWidenBlocks<F> - 1 of a row (its unit at `unit`) as i16 pairs into wq, one
// block of kQuantBlock / 2 pairs after another.
template <class F>
inline void WidenBlocks(const uint8_t* unit, int64_t b, int32_t (*wq)[kQuantBlock / 2]) {
  if constexpr (kWidenBlocks<F> == 4) {
    const Q6_KHalfZmm h = WidenQ6_KHalf(reinterpret_cast<const BlockQ6_K*>(unit),
                                        static_cast<int>(b % BlocksPerUnit<F>()) / 4);
    for (int j = 0; j < 4; ++j) _mm512_store_si512(wq[j], h.v[j]);
  } else {
    const WeightI16 q = WidenAt<F>(unit, b);
    _mm256_store_si256(reinterpret_cast<__m256i*>(wq[0]), q.lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(wq[0] + 8), q.hi);
  }
}

// Streams the next tile's part of a block chunk (the same blocks of the next rows) into the cache
// while a tile computes, a few lines per block step: the rows' chunk bytes one row after another,
// spread evenly over the nbc steps. Prefetching the next rows whole, as this did before, fetched
// every later chunk's blocks too, long before their turn (the 1.5B's [1536, 8960] matrices have 9
// chunks). Same instruction count as that: a row's lines are a contiguous stretch.
class NextTileLines {
 public:
  // first: the next tile's first row at the chunk's first block; rows `stride` bytes apart,
  // `bytes` of each in the chunk.
  NextTileLines(const uint8_t* first, size_t stride, size_t bytes, int rows, int64_t steps)
      : base_(reinterpret_cast<const char*>(first)),
        stride_(stride),
        bytes_(bytes),
        rows_left_(rows),
        per_step_((rows * static_cast<int64_t>((bytes + 63) / 64 + 1) + steps - 1) / steps) {
    StartRow();
  }

  void Step() {
    for (int64_t i = 0; i < per_step_ && rows_left_ > 0; ++i) {
      _mm_prefetch(line_, _MM_HINT_T0);
      line_ += 64;
      if (line_ >= base_ + bytes_) {
        base_ += stride_;
        if (--rows_left_ > 0) StartRow();
      }
    }
  }

 private:
  void StartRow() {
    line_ = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base_) & ~uintptr_t{63});
  }

  const char* base_;  // the current row's first byte in the chunk
  const char* line_;  // its next line
  size_t stride_, bytes_;
  int rows_left_;
  int64_t per_step_;
};

// kR rows x 16 packed tokens over nbc blocks; tokens [0, n_valid) are written (or added to out
// unless first: later block chunks of the same tile).
template <class F, int kR>
void OuterTile16(const uint8_t* w, size_t w_stride, const PackedChunk16& p, int64_t nbc,
                 int n_valid, bool first, float* out, int64_t ldo) {
  __m512 acc[kR];
  for (int r = 0; r < kR; ++r) acc[r] = _mm512_setzero_ps();
  // The rows' widened blocks, as i16 pairs: kWidenBlocks<F> of them per row, widened together.
  constexpr int kWb = kWidenBlocks<F>;
  alignas(64) int32_t wq[kR][kWb][kQuantBlock / 2];
  NextTileLines ahead(w + kR * w_stride, w_stride, UnitOffset<F>(nbc), kR, nbc);
  for (int64_t b = 0; b < nbc; ++b) {
    ahead.Step();
    float dw[kR], ow[kR];
    for (int r = 0; r < kR; ++r) {
      const uint8_t* block = w + r * w_stride + UnitOffset<F>(b);
      if (b % kWb == 0) WidenBlocks<F>(block, b, wq[r]);
      RowScales<F>(block, &dw[r], &ow[r]);
    }
    // The weight pairs are broadcast from memory, folded into vpdpwssd (DpwssdBroadcast). Left
    // to itself GCC forwarded the stores through register shuffles, which compete with vpdpwssd
    // for its ports and cost a third of the speed; hiding the pointer stops that. With the
    // intrinsics it still loaded each pair with a vpbroadcastd of its own: one instruction more
    // per vpdpwssd (the asm: 3-11% faster at 16 tokens on Zen 4, the 1.5B's shapes).
    const int32_t* wp = &wq[0][b % kWb][0];
    asm volatile("" : "+r"(wp)::"memory");
    __m512i even[kR], odd[kR];
    for (int r = 0; r < kR; ++r) even[r] = odd[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int i = 0; i < kQuantBlock / 2; i += 2) {
      const __m512i y0 = _mm512_load_si512(p.y[b][i]);
      const __m512i y1 = _mm512_load_si512(p.y[b][i + 1]);
      for (int r = 0; r < kR; ++r) {
        const int32_t* wr = wp + r * kWb * (kQuantBlock / 2);
        DpwssdBroadcast(even[r], y0, wr + i);
        DpwssdBroadcast(odd[r], y1, wr + i + 1);
      }
    }
    const __m512 dx = _mm512_load_ps(p.dx[b]);
    for (int r = 0; r < kR; ++r) {
      const __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(even[r], odd[r]));
      acc[r] = _mm512_fmadd_ps(sum, _mm512_mul_ps(_mm512_set1_ps(dw[r]), dx), acc[r]);
      if constexpr (F::kOffset) {
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(ow[r]), _mm512_load_ps(p.os[b]), acc[r]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    alignas(64) float v[kLanes16];
    _mm512_store_ps(v, acc[r]);
    for (int l = 0; l < n_valid; ++l) {
      float& o = out[l * ldo + r];
      o = first ? v[l] : o + v[l];
    }
  }
}

// Tokens [0, n_tokens) in chunks of 16 (the last one may be partial), blocks in chunks of
// kBlockChunk, rows in tiles of kRows16<F> (then single rows).
template <class F>
void MatMulOuter16(const uint8_t* w, size_t w_row_bytes, int64_t nb, const BlockQ16_1* xq,
                   int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  constexpr int kR = kRows16<F>;
  PackedChunk16 p;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kLanes16) {
    const int nt = static_cast<int>(n_tokens - t0 < kLanes16 ? n_tokens - t0 : kLanes16);
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
      const int64_t nbc = nb - kb0 < kBlockChunk ? nb - kb0 : kBlockChunk;
      PackChunk16<F>(xq + t0 * nb + kb0, nb, nt, nbc, p);
      const uint8_t* wb = w + UnitOffset<F>(kb0);
      float* o = out + t0 * ldo;
      int64_t r0 = row_begin;
      for (; r0 + kR <= row_end; r0 += kR) {
        OuterTile16<F, kR>(wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, p, nbc, nt,
                           kb0 == 0, o + r0, ldo);
      }
      for (; r0 < row_end; ++r0) {
        OuterTile16<F, 1>(wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, p, nbc, nt,
                          kb0 == 0, o + r0, ldo);
      }
    }
  }
}

template <class F>
void MatMulFormat16(const uint8_t* w, size_t w_row_bytes, int64_t k, const BlockQ16_1* xq,
                    int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  const int64_t nb = k / kQuantBlock;
  const int64_t n16 = TokensInChunksOf16(n_tokens);
  if (n16 == 0) {
    return MatMulFormat<DpwssdEvex, F>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                       row_end);
  }
  MatMulOuter16<F>(w, w_row_bytes, nb, xq, n16, out, ldo, row_begin, row_end);
  if (n16 < n_tokens) {
    MatMulFormat<DpwssdEvex, F>(w, w_row_bytes, k, xq + n16 * nb, n_tokens - n16, out + n16 * ldo,
                                ldo, row_begin, row_end);
  }
}

}  // namespace

void MatMulQuantAvx512Vnni(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                           const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                           int64_t row_begin, int64_t row_end) {
  switch (type) {
    case WeightType::kQ4_0:
      return MatMulFormat16<Q4_0Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                        row_end);
    case WeightType::kQ4_1:
      return MatMulFormat16<Q4_1Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                        row_end);
    case WeightType::kQ8_0:
      return MatMulFormat16<Q8_0Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                        row_end);
    case WeightType::kQ5_0:
      return MatMulFormat16<Q5_0FormatZmm>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                           row_end);
    case WeightType::kQ5_1:
      return MatMulFormat16<Q5_1FormatZmm>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                           row_end);
    case WeightType::kQ6_K: {
      // Chunks of 16 tokens in the lanes, as the other formats; the 1-5 tokens left (decode
      // steps of up to 5 sessions) widen each half super-block once for all of them.
      const int64_t n16 = TokensInChunksOf16(n_tokens);
      if (n16 > 0) {
        MatMulOuter16<Q6_KFormat>(w, w_row_bytes, k / kQuantBlock, xq, n16, out, ldo, row_begin,
                                  row_end);
      }
      if (n16 < n_tokens) {
        MatMulSmallQ6_K(w, w_row_bytes, k, xq + n16 * (k / kQuantBlock), n_tokens - n16,
                        out + n16 * ldo, ldo, row_begin, row_end);
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace streamd::kernels::cpu::internal
