// Quantized weights (Q4_0, Q4_1, Q8_0) times Q8_1 activations with AVX2 integer dot products,
// and the AVX2 activation quantizer. Compiled with -mavx2 -mfma -mf16c; reached only after the
// run-time check in isa.cc. Same math as matmul_portable.cc (see there), other f32 sum order.
//
// Work is split into tiles of kR weight rows x kT tokens: each weight block is unpacked once per
// tile and reused for kT tokens, each activation block is reused for kR rows. Per block and pair
// (r, t): one maddubs (u8 weights x s8 activations, pairs summed to i16), one madd with ones
// (i16 pairs to i32), then acc[r][t] += f32(i32) * (dw_r * dx_t). The offset terms (mw * sx for
// Q4_1, -8 dw sx for Q4_0) are accumulated per (r, t) in the odd lanes of one vector per token.
// Tokens are walked in chunks so a chunk of activations stays in L1/L2 while every row tile of
// the range passes over it.
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/matmul_internal.h"

namespace streamd::kernels::cpu::internal {
namespace {

constexpr int64_t kTokenChunk = 64;
// Software prefetch distance of the single-token kernels (measured: 4-16 KiB all help, 8 best).
constexpr int64_t kPrefetchBytes = 8192;

inline uint32_t LoadU32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 bytes of packed nibbles -> 32 bytes in [0, 15]: value j (low nibble of byte j) in the low
// lane, value j + 16 (high nibble) in the high lane, matching the activation layout.
inline __m256i UnpackNibbles(const uint8_t* qs) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i shifted = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f));
}

// f16 (d, m) of up to 4 blocks (the first 4 bytes of each) -> [d0 m0 d1 m1 d2 m2 d3 m3] f32.
// For Q4_0 / Q8_0 the "m" slot holds the first quant bytes: callers only use the even lanes.
inline __m256 LoadScalePairs(const uint8_t* const* blocks, int n) {
  __m128i v[4];
  for (int r = 0; r < 4; ++r) {
    v[r] = r < n ? _mm_cvtsi32_si128(static_cast<int>(LoadU32(blocks[r]))) : _mm_setzero_si128();
  }
  const __m128i lo = _mm_unpacklo_epi32(v[0], v[1]);
  const __m128i hi = _mm_unpacklo_epi32(v[2], v[3]);
  return _mm256_cvtph_ps(_mm_unpacklo_epi64(lo, hi));
}

// Weight formats. Each provides its block type, whether it has a per-block offset term, the
// per-row data prepared once per block (Prepare) and the i32 lane sums of one (row, token) dot.
struct Q4_1Format {
  using Block = BlockQ4_1;
  struct Row {
    __m256i q;  // 32 x u8 in [0, 15]
  };
  static Row Prepare(const Block* b) { return {UnpackNibbles(b->qs)}; }
  static __m256i Dot(const Row& w, const int8_t* y) {
    const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.q, yv), _mm256_set1_epi16(1));
  }
  // [dw_r, mw_r] pairs, times [dx, sx]: even lanes dw*dx, odd lanes the offset mw*sx.
  static __m256 Scales(__m256 pairs) { return pairs; }
  static __m256 TokenFactors(__m256 dxs) { return dxs; }
  // Quad tiles: offset term = OffsetWeight lane of pairs (mw) * kOffsetFactor * sx.
  static constexpr int kOffsetLane = 1;
  static constexpr float kOffsetFactor = 1.0f;
};

struct Q4_0Format {
  using Block = BlockQ4_0;
  using Row = Q4_1Format::Row;
  static Row Prepare(const Block* b) { return {UnpackNibbles(b->qs)}; }
  static __m256i Dot(const Row& w, const int8_t* y) { return Q4_1Format::Dot(w, y); }
  // [dw, dw] pairs times [dx, -8 sx]: the offset of q - 8 is -8 dw sx.
  static __m256 Scales(__m256 pairs) { return _mm256_moveldup_ps(pairs); }
  static __m256 TokenFactors(__m256 dxs) {
    return _mm256_mul_ps(dxs, _mm256_setr_ps(1, -8, 1, -8, 1, -8, 1, -8));
  }
  static constexpr int kOffsetLane = 0;  // dw
  static constexpr float kOffsetFactor = -8.0f;
};

struct Q8_0Format {
  using Block = BlockQ8_0;
  struct Row {
    __m256i q;    // 32 x s8
    __m256i abs;  // |q| as u8 (|-128| = 128 fits)
  };
  static Row Prepare(const Block* b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
    return {q, _mm256_abs_epi8(q)};
  }
  // maddubs needs one unsigned operand: |w| * (y * sign(w)). |y| <= 127 so pairs never saturate.
  static __m256i Dot(const Row& w, const int8_t* y) {
    const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
    const __m256i ys = _mm256_sign_epi8(yv, w.q);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.abs, ys), _mm256_set1_epi16(1));
  }
  static __m256 Scales(__m256 pairs) { return _mm256_moveldup_ps(pairs); }
  // No offset term: odd lanes get dw * 0.
  static __m256 TokenFactors(__m256 dxs) {
    return _mm256_blend_ps(dxs, _mm256_setzero_ps(), 0xaa);
  }
};

// One tile: rows [r0, r0 + kR) x tokens [t0, t0 + kT), all nb blocks.
// w: row r0's first block, rows w_stride bytes apart. x: token t0's first block, tokens nb
// blocks apart. out: element (t0, r0), tokens ldo floats apart.
template <class F, int kR, int kT>
void Tile(const uint8_t* w, size_t w_stride, const BlockQ8_1* x, int64_t nb, float* out,
          int64_t ldo) {
  using Block = typename F::Block;
  constexpr int kG = (kR + 3) / 4;  // groups of 4 rows share one scale vector
  __m256 acc[kR][kT];
  __m256 offset[kG][kT];  // odd lane 2r: offset terms of row 4g + r
  for (int t = 0; t < kT; ++t) {
    for (int g = 0; g < kG; ++g) offset[g][t] = _mm256_setzero_ps();
    for (int r = 0; r < kR; ++r) acc[r][t] = _mm256_setzero_ps();
  }
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = w + r * w_stride;
  // Decode streams the weights from DRAM once: the hardware prefetchers alone reach well under
  // half the bandwidth of this access pattern, so each block step also prefetches the bytes the
  // tile consumes per step, kPrefetchBytes ahead (rows are contiguous: that is a later tile).
  const uint8_t* pf = w + kPrefetchBytes;
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kT == 1) {
      constexpr int kLines = (kR * sizeof(Block) + 63) / 64 + 1;
      for (int l = 0; l < kLines; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + b * kR * sizeof(Block) + 64 * l),
                     _MM_HINT_T0);
      }
    }
    const uint8_t* blocks[kR];
    typename F::Row wr[kR];
    for (int r = 0; r < kR; ++r) {
      blocks[r] = rows[r] + b * sizeof(Block);
      wr[r] = F::Prepare(reinterpret_cast<const Block*>(blocks[r]));
    }
    __m256 pairs[kG];
    for (int g = 0; g < kG; ++g) {
      pairs[g] = F::Scales(LoadScalePairs(blocks + 4 * g, kR - 4 * g < 4 ? kR - 4 * g : 4));
    }
    for (int t = 0; t < kT; ++t) {
      const BlockQ8_1& xb = x[t * nb + b];
      // [dx, sx] in every pair of lanes.
      const __m256 dxs = F::TokenFactors(
          _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(&xb.d))));
      __m256 scales[kG];
      for (int g = 0; g < kG; ++g) {
        scales[g] = _mm256_mul_ps(pairs[g], dxs);
        offset[g][t] = _mm256_add_ps(offset[g][t], scales[g]);
      }
      for (int r = 0; r < kR; ++r) {
        const __m256 scale =
            _mm256_permutevar8x32_ps(scales[r / 4], _mm256_set1_epi32(2 * (r % 4)));
        const __m256 dot = _mm256_cvtepi32_ps(F::Dot(wr[r], xb.qs));
        acc[r][t] = _mm256_fmadd_ps(dot, scale, acc[r][t]);
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    alignas(32) float off[kG][8];
    for (int g = 0; g < kG; ++g) _mm256_store_ps(off[g], offset[g][t]);
    for (int r = 0; r < kR; ++r) {
      out[t * ldo + r] = HorizontalSum(acc[r][t]) + off[r / 4][2 * (r % 4) + 1];
    }
  }
}


// Four tokens at once for the 4-bit formats: the i16 maddubs results of the 4 tokens are folded
// with three hadds (|sum| <= 8 * 15 * 127 fits i16) and one madd into [t0 t1 t2 t3 | t0 t1 t2 t3]
// (lanes: low / high half of the block), so one cvt + fma serves 4 (row, token) pairs.
// acc[r][g] lanes hold tokens 4g..4g+3 twice (low / high 16 values); summed at the end.
template <class F, int kR, int kG>
void TileQuad(const uint8_t* w, size_t w_stride, const BlockQ8_1* x, int64_t nb, float* out,
              int64_t ldo) {
  static_assert(kR <= 4);
  using Block = typename F::Block;
  __m256 acc[kR][kG];
  for (int r = 0; r < kR; ++r) {
    for (int g = 0; g < kG; ++g) acc[r][g] = _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blocks[kR];
    __m256i wq[kR];
    for (int r = 0; r < kR; ++r) {
      blocks[r] = w + r * w_stride + b * sizeof(Block);
      wq[r] = UnpackNibbles(reinterpret_cast<const Block*>(blocks[r])->qs);
    }
    const __m256 pairs = LoadScalePairs(blocks, kR);  // [d0 m0 d1 m1 ...]
    for (int g = 0; g < kG; ++g) {
      const BlockQ8_1* xg = x + 4 * g * nb + b;
      const __m128 ds01 = _mm_castpd_ps(_mm_loadh_pd(
          _mm_load_sd(reinterpret_cast<const double*>(&xg[0].d)),
          reinterpret_cast<const double*>(&xg[nb].d)));
      const __m128 ds23 = _mm_castpd_ps(_mm_loadh_pd(
          _mm_load_sd(reinterpret_cast<const double*>(&xg[2 * nb].d)),
          reinterpret_cast<const double*>(&xg[3 * nb].d)));
      const __m128 d4 = _mm_shuffle_ps(ds01, ds23, _MM_SHUFFLE(2, 0, 2, 0));
      const __m128 s4 = _mm_mul_ps(_mm_shuffle_ps(ds01, ds23, _MM_SHUFFLE(3, 1, 3, 1)),
                                   _mm_set1_ps(F::kOffsetFactor));
      const __m256 dx = _mm256_set_m128(d4, d4);
      const __m256 sx = _mm256_insertf128_ps(_mm256_setzero_ps(), s4, 0);
      for (int r = 0; r < kR; ++r) {
        const __m256i p0 = _mm256_maddubs_epi16(wq[r], _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(xg[0].qs)));
        const __m256i p1 = _mm256_maddubs_epi16(wq[r], _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(xg[nb].qs)));
        const __m256i p2 = _mm256_maddubs_epi16(wq[r], _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(xg[2 * nb].qs)));
        const __m256i p3 = _mm256_maddubs_epi16(wq[r], _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(xg[3 * nb].qs)));
        const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(p0, p1), _mm256_hadd_epi16(p2, p3));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(h, ones));
        const __m256 dw = _mm256_permutevar8x32_ps(pairs, _mm256_set1_epi32(2 * r));
        const __m256 ow =
            _mm256_permutevar8x32_ps(pairs, _mm256_set1_epi32(2 * r + F::kOffsetLane));
        acc[r][g] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dw, dx), acc[r][g]);
        acc[r][g] = _mm256_fmadd_ps(ow, sx, acc[r][g]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int g = 0; g < kG; ++g) {
      alignas(16) float v[4];
      _mm_store_ps(v, _mm_add_ps(_mm256_castps256_ps128(acc[r][g]),
                                 _mm256_extractf128_ps(acc[r][g], 1)));
      for (int t = 0; t < 4; ++t) out[(4 * g + t) * ldo + r] = v[t];
    }
  }
}

using TileFn = void (*)(const uint8_t*, size_t, const BlockQ8_1*, int64_t, float*, int64_t);

template <int kMaxR, int kMaxT>
struct TileTable {
  TileFn fn[kMaxR + 1][kMaxT + 1] = {};
};

template <class F, int kMaxR, int kMaxT, int kR, int... kTs>
constexpr void FillRow(TileTable<kMaxR, kMaxT>& table, std::integer_sequence<int, kTs...>) {
  ((table.fn[kR][kTs + 1] = &Tile<F, kR, kTs + 1>), ...);
}

template <class F, int kMaxR, int kMaxT, int... kRs>
constexpr TileTable<kMaxR, kMaxT> MakeTable(std::integer_sequence<int, kRs...>) {
  TileTable<kMaxR, kMaxT> table;
  (FillRow<F, kMaxR, kMaxT, kRs + 1>(table, std::make_integer_sequence<int, kMaxT>{}), ...);
  return table;
}

template <class F, int kMaxR, int kMaxT>
void MatMulTiled(const uint8_t* w, size_t w_row_bytes, int64_t k, const BlockQ8_1* xq,
                 int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  static constexpr TileTable<kMaxR, kMaxT> kTable =
      MakeTable<F, kMaxR, kMaxT>(std::make_integer_sequence<int, kMaxR>{});
  const int64_t nb = k / kQuantBlock;
  for (int64_t c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
    const int64_t c1 = c0 + kTokenChunk < n_tokens ? c0 + kTokenChunk : n_tokens;
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kMaxR) {
      const int64_t nr = row_end - r0 < kMaxR ? row_end - r0 : kMaxR;
      for (int64_t t0 = c0; t0 < c1; t0 += kMaxT) {
        const int64_t nt = c1 - t0 < kMaxT ? c1 - t0 : kMaxT;
        kTable.fn[nr][nt](w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, xq + t0 * nb,
                          nb, out + t0 * ldo + r0, ldo);
      }
    }
  }
}

template <class F, int kR, int kG>
void MatMulQuad(const uint8_t* w, size_t w_row_bytes, int64_t k, const BlockQ8_1* xq,
                int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  constexpr int kT = 4 * kG;
  const int64_t nb = k / kQuantBlock;
  const int64_t n_main = n_tokens / kT * kT;
  for (int64_t c0 = 0; c0 < n_main; c0 += kTokenChunk) {
    const int64_t c1 = c0 + kTokenChunk < n_main ? c0 + kTokenChunk : n_main;
    int64_t r0 = row_begin;
    for (; r0 + kR <= row_end; r0 += kR) {
      for (int64_t t0 = c0; t0 < c1; t0 += kT) {
        TileQuad<F, kR, kG>(w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes,
                            xq + t0 * nb, nb, out + t0 * ldo + r0, ldo);
      }
    }
    if (r0 < row_end) {
      MatMulTiled<F, 4, 2>(w, w_row_bytes, k, xq + c0 * nb, c1 - c0, out + c0 * ldo, ldo, r0,
                           row_end);
    }
  }
  if (n_main < n_tokens) {
    MatMulTiled<F, 4, 2>(w, w_row_bytes, k, xq + n_main * nb, n_tokens - n_main,
                         out + n_main * ldo, ldo, row_begin, row_end);
  }
}

// Tile shapes (measured on Sapphire Rapids, see matmul_bench.cc): one token uses 4-row tiles;
// more tokens use 2 rows x 8 tokens quad tiles for the 4-bit formats (Q8_0's i16 sums cannot be
// folded, it keeps 4 x 2 tiles), the generic tiles picking up the remainders.
template <class F>
void MatMul(const uint8_t* w, size_t w_row_bytes, int64_t k, const BlockQ8_1* xq,
            int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  if (n_tokens == 1) {
    return MatMulTiled<F, 4, 1>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
  }
  if constexpr (!std::is_same_v<F, Q8_0Format>) {
    if (n_tokens >= 8) {
      return MatMulQuad<F, 2, 2>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    }
  }
  return MatMulTiled<F, 4, 2>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
}

}  // namespace

void QuantizeRowQ8_1Avx2(const float* x, int64_t k, BlockQ8_1* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    __m256 bad = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      const __m256 a = _mm256_andnot_ps(sign, v[i]);
      amax = _mm256_max_ps(amax, a);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // NaN or infinite
    }
    BlockQ8_1& o = out[b];
    if (_mm256_movemask_ps(bad) != 0) {
      o.d = o.s = __builtin_nanf("");
      std::memset(o.qs, 0, sizeof o.qs);
      continue;
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    const __m256i sum32 =
        _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    // Packing interleaves 128-bit lanes; the permute restores element order.
    const __m256i p16a = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs), p8);
    o.d = d;
    o.s = d * static_cast<float>(_mm_cvtsi128_si32(s));
  }
}

void MatMulQuantAvx2(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                     const BlockQ8_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                     int64_t row_begin, int64_t row_end) {
  switch (type) {
    case WeightType::kQ4_0:
      return MatMul<Q4_0Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    case WeightType::kQ4_1:
      return MatMul<Q4_1Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    case WeightType::kQ8_0:
      return MatMul<Q8_0Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    default:
      return;
  }
}

}  // namespace streamd::kernels::cpu::internal
