// vec_ops.h's attention rows and softmax helpers with AVX-512 F/BW/VL/DQ + F16C (this file is
// compiled with those flags and only reached at Isa::kAvx512Vnni and above, whose CPUs all have
// DQ too). Same algorithms as vec_ops_avx2.cc at twice the width, with 32 registers for larger
// tiles, and masked loads and stores in place of the AVX2 file's tails: any hd takes the vector
// path here.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/exp_poly.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/query_groups.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd::kernels::cpu::internal {
namespace {

// ---- Attention rows (vec_ops.h: DotRowsF16, AxpyRowsF16) ----
//
// Scores: a tile of KR keys x QG queries keeps QG * KR <= 16 accumulators of 16 lanes (plus QG
// query vectors and one key: at most 21 of the 32 registers); each 16-value key chunk is
// converted once for the QG queries, and LaneSums16 finishes the tile's dot products together
// (one vector of 16 sums). Accumulation: QG queries x DC chunks of 16 outputs stay in registers
// over all the rows, each row chunk converted once for the QG queries.
template <int QG>
constexpr int kScoreKeys = QG == 1   ? 16
                           : QG == 2 ? 8
                                     : 4;
template <int QG>
constexpr int kAccumulateChunks = QG <= 2 ? 8 : 4;

__m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

__m512 Load16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

// 16 int8 values of an int8 KV row as floats (exact).
__m512 Load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

__m512 Load16(const int8_t* p, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

// Lane L of the result = the sum of the 16 lanes of acc[L % N] (lanes >= N repeat earlier
// ones). A transposing tree of four levels (256-bit halves of pairs, 128-bit quarters, pairs of
// lanes, single lanes), each one add per output vector on two shuffles: 15 adds and 30 shuffles
// for 16 sums, against 4 adds and 4 shuffles each (64 + 64) for separate horizontal sums.
// Feeding v[4m + k] = acc[4k + m] puts acc[L] in lane L. When N < 16 the repeated inputs make
// whole subtrees identical and GCC keeps one copy of each: N = 1, 2, 4 compile to 11, 17, 33
// shuffles and adds (a plain horizontal sum is 8), so the tail tiles of a run stay cheap.
template <int N>
[[gnu::always_inline]] inline __m512 LaneSums16(const __m512* acc) {
  __m512 v[16];
  for (int i = 0; i < 16; ++i) v[i] = acc[(4 * (i % 4) + i / 4) % N];
  __m512 x[8];
  for (int j = 0; j < 8; ++j) {
    x[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 y[4];
  for (int j = 0; j < 4; ++j) {
    y[j] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  __m512 z[2];
  for (int j = 0; j < 2; ++j) {
    z[j] = _mm512_add_ps(_mm512_unpacklo_ps(y[2 * j], y[2 * j + 1]),
                         _mm512_unpackhi_ps(y[2 * j], y[2 * j + 1]));
  }
  const __m512d a = _mm512_castps_pd(z[0]), b = _mm512_castps_pd(z[1]);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

// out[i * ldo + r] for QG queries x KR keys. With kTail, hd's last partial chunk of 16 is loaded
// masked (zeros past hd); without, hd % 16 == 0. Separate instantiations because the masked
// code in the same function made GCC keep the accumulators in memory (and zero them with
// rep stos) for both paths: 18% of this function's time at hd = 64 when it did.
template <int QG, int KR, bool kTail, class T>
[[gnu::always_inline]] inline void ScoreTile(const float* q, const T* k, int64_t hd, float scale,
                                             float* out, int64_t ldo) {
  __m512 acc[QG * KR];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const int64_t full = kTail ? hd / 16 * 16 : hd;
  for (int64_t d = 0; d < full; d += 16) {
    __m512 qv[QG];
    for (int i = 0; i < QG; ++i) qv[i] = _mm512_loadu_ps(q + i * hd + d);
    for (int r = 0; r < KR; ++r) {
      const __m512 kv = Load16(k + r * hd + d);
      for (int i = 0; i < QG; ++i) acc[i * KR + r] = _mm512_fmadd_ps(qv[i], kv, acc[i * KR + r]);
    }
  }
  if constexpr (kTail) {
    const auto m = static_cast<__mmask16>((1u << (hd - full)) - 1);
    __m512 qv[QG];
    for (int i = 0; i < QG; ++i) qv[i] = _mm512_maskz_loadu_ps(m, q + i * hd + full);
    for (int r = 0; r < KR; ++r) {
      const __m512 kv = Load16(k + r * hd + full, m);
      for (int i = 0; i < QG; ++i) acc[i * KR + r] = _mm512_fmadd_ps(qv[i], kv, acc[i * KR + r]);
    }
  }
  const __m512 sums = _mm512_mul_ps(LaneSums16<QG * KR>(acc), _mm512_set1_ps(scale));
  // Query i's KR sums sit in lanes i * KR ..: rotate them down to lane 0 and store KR lanes.
  constexpr auto kKeys = static_cast<__mmask16>((1u << KR) - 1);
  _mm512_mask_storeu_ps(out, kKeys, sums);
  if constexpr (QG > 1) {
    const __m512i s = _mm512_castps_si512(sums);
    _mm512_mask_storeu_ps(out + ldo, kKeys, _mm512_castsi512_ps(_mm512_alignr_epi32(s, s, KR)));
    if constexpr (QG > 2) {
      _mm512_mask_storeu_ps(out + 2 * ldo, kKeys,
                            _mm512_castsi512_ps(_mm512_alignr_epi32(s, s, 2 * KR)));
    }
    if constexpr (QG > 3) {
      _mm512_mask_storeu_ps(out + 3 * ldo, kKeys,
                            _mm512_castsi512_ps(_mm512_alignr_epi32(s, s, 3 * KR)));
    }
  }
}

// Rows [0, n_rows), KR at a time, then KR/2, KR/4, ... for the rest.
template <int QG, int KR, bool kTail, class T>
void ScoreRows(const float* q, const T* k, int64_t n_rows, int64_t hd, float scale, float* out,
               int64_t ldo) {
  int64_t r = 0;
  for (; r + KR <= n_rows; r += KR) {
    ScoreTile<QG, KR, kTail>(q, k + r * hd, hd, scale, out + r, ldo);
  }
  if constexpr (KR > 1) {
    if (r < n_rows) {
      ScoreRows<QG, KR / 2, kTail>(q, k + r * hd, n_rows - r, hd, scale, out + r, ldo);
    }
  }
}

template <int QG, class T>
void ScoreRowsAnyHd(const float* q, const T* k, int64_t n_rows, int64_t hd, float scale, float* out,
                    int64_t ldo) {
  if (hd % 16 == 0) {
    ScoreRows<QG, kScoreKeys<QG>, false>(q, k, n_rows, hd, scale, out, ldo);
  } else {
    ScoreRows<QG, kScoreKeys<QG>, true>(q, k, n_rows, hd, scale, out, ldo);
  }
}

// y[i * hd + c] += sum_r w[i * ldw + r] * v[r * hd + c] for the DC chunks of 16 columns at v, y;
// with kPartial the last chunk only in the lanes of `last`.
template <int QG, int DC, bool kPartial, class T>
[[gnu::always_inline]] inline void AccumulateTile(const float* w, int64_t ldw, const T* v,
                                                  int64_t n_rows, int64_t hd, float* y,
                                                  __mmask16 last) {
  __m512 acc[QG][DC];
  for (int i = 0; i < QG; ++i) {
    for (int j = 0; j < DC; ++j) {
      const float* yj = y + i * hd + 16 * j;
      acc[i][j] = kPartial && j == DC - 1 ? _mm512_maskz_loadu_ps(last, yj) : _mm512_loadu_ps(yj);
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    __m512 wv[QG];
    for (int i = 0; i < QG; ++i) wv[i] = _mm512_set1_ps(w[i * ldw + r]);
    for (int j = 0; j < DC; ++j) {
      const T* vj = v + r * hd + 16 * j;
      const __m512 vv = kPartial && j == DC - 1 ? Load16(vj, last) : Load16(vj);
      for (int i = 0; i < QG; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], vv, acc[i][j]);
    }
  }
  for (int i = 0; i < QG; ++i) {
    for (int j = 0; j < DC; ++j) {
      float* yj = y + i * hd + 16 * j;
      if (kPartial && j == DC - 1) {
        _mm512_mask_storeu_ps(yj, last, acc[i][j]);
      } else {
        _mm512_storeu_ps(yj, acc[i][j]);
      }
    }
  }
}

// Columns [0, cols), DC chunks of 16 at a time, then DC/2, ..., then a masked partial chunk.
template <int QG, int DC, class T>
void AccumulateCols(const float* w, int64_t ldw, const T* v, int64_t n_rows, int64_t hd,
                    int64_t cols, float* y) {
  int64_t c = 0;
  for (; c + 16 * DC <= cols; c += 16 * DC) {
    AccumulateTile<QG, DC, false>(w, ldw, v + c, n_rows, hd, y + c, 0xffff);
  }
  if (c == cols) return;
  if constexpr (DC > 1) {
    AccumulateCols<QG, DC / 2>(w, ldw, v + c, n_rows, hd, cols - c, y + c);
  } else {
    const auto m = static_cast<__mmask16>((1u << (cols - c)) - 1);
    AccumulateTile<QG, 1, true>(w, ldw, v + c, n_rows, hd, y + c, m);
  }
}

// ---- Softmax helpers: the exp of vec_ops_avx2.cc (exp_poly.h: same constants, same bits) ----

__m512 Exp16(__m512 x) {
  using namespace exp_poly;
  // Constant first: vmaxps/vminps return the second operand when one is NaN.
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(kHigh), _mm512_max_ps(_mm512_set1_ps(kLow), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kTaylor[i]));
  // p * 2^n in one instruction (n in [-126, 127]: the same single rounding as the AVX2 file's
  // multiply by 2^n), zero where x < kLow (an ordered compare: false for NaN).
  const __mmask16 low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLow), _CMP_LT_OQ);
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~low), p, n);
}

}  // namespace

void DotRowsF16Avx512(const float* q, int64_t n_q, const uint16_t* k, int64_t n_rows, int64_t hd,
                      float scale, float* out, int64_t ldo) {
  ForEachQuerySubGroup(n_q, [&]<int QG>(int64_t i) {
    ScoreRowsAnyHd<QG>(q + i * hd, k, n_rows, hd, scale, out + i * ldo, ldo);
  });
}

void AxpyRowsF16Avx512(const float* w, int64_t ldw, int64_t n_q, const uint16_t* v, int64_t n_rows,
                       int64_t hd, float* y) {
  ForEachQuerySubGroup(n_q, [&]<int QG>(int64_t i) {
    AccumulateCols<QG, kAccumulateChunks<QG>>(w + i * ldw, ldw, v, n_rows, hd, hd, y + i * hd);
  });
}

// paged_attention.h's QuantizeRowI8, 16 values at a time: the same rounding (to nearest even),
// and the same saturation, NaN included (vmaxps with NaN first returns the -127).
void QuantizeRowI8Avx512(const float* x, const float* inv_scale, int64_t n, int8_t* out) {
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, x + i),
                                   _mm512_maskz_loadu_ps(live, inv_scale + i));
    const __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 c = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
    _mm_mask_storeu_epi8(out + i, live, _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(c)));
  }
}

// The int8 rows: the same tiles, each 16 values widened to f32 instead of converted from f16.
void DotRowsI8Avx512(const float* q, int64_t n_q, const int8_t* k, int64_t n_rows, int64_t hd,
                     float scale, float* out, int64_t ldo) {
  ForEachQuerySubGroup(n_q, [&]<int QG>(int64_t i) {
    ScoreRowsAnyHd<QG>(q + i * hd, k, n_rows, hd, scale, out + i * ldo, ldo);
  });
}

void AxpyRowsI8Avx512(const float* w, int64_t ldw, int64_t n_q, const int8_t* v, int64_t n_rows,
                      int64_t hd, float* y) {
  ForEachQuerySubGroup(n_q, [&]<int QG>(int64_t i) {
    AccumulateCols<QG, kAccumulateChunks<QG>>(w + i * ldw, ldw, v, n_rows, hd, hd, y + i * hd);
  });
}

float MaxF32Avx512(const float* x, int64_t n) {
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    m0 = _mm512_mask_max_ps(m0, live, m0, _mm512_maskz_loadu_ps(live, x + i));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

float ExpShiftedSumAvx512(float* x, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    const __m512 e1 = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), s));
    _mm512_storeu_ps(x + i, e0);
    _mm512_storeu_ps(x + i + 16, e1);
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
  }
  for (; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, x + i), s));
    _mm512_mask_storeu_ps(x + i, live, e);
    sum0 = _mm512_mask_add_ps(sum0, live, sum0, e);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

namespace {

// gate[i] = gate[i] / (1 + exp(-z(gate[i]))) * up[i]: SiLU with z(g) = g, GELU (tanh) with
// z(g) = 2u(g). `z` maps 16 gates at once.
template <class Z>
void GatedMulAvx512(float* gate, const float* up, int64_t n, Z z) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(live, gate + i);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), z(g)));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(gate + i, live, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(live, up + i)));
  }
}

}  // namespace

void SiluMulAvx512(float* gate, const float* up, int64_t n) {
  GatedMulAvx512(gate, up, n, [](__m512 g) { return g; });
}

void GeluTanhMulAvx512(float* gate, const float* up, int64_t n) {
  const __m512 c0 = _mm512_set1_ps(kGeluC0);
  const __m512 c1 = _mm512_set1_ps(kGeluC1);
  GatedMulAvx512(gate, up, n, [&](__m512 g) {
    return _mm512_mul_ps(g, _mm512_fmadd_ps(_mm512_mul_ps(g, g), c1, c0));
  });
}

void AddRmsNormRowAvx512(float* x, const float* delta, const float* weight, float eps, int64_t n,
                         float* out) {
  // Four accumulators of 8 f64 lanes: the squares are exact, so a fused multiply-add rounds
  // each sum once, like the portable level's product and sum.
  __m512d sums[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                     _mm512_setzero_pd()};
  for (int64_t i = 0; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(live, x + i);
    if (delta != nullptr) {
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(live, delta + i));
      _mm512_mask_storeu_ps(x + i, live, v);
    }
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
    const int a = static_cast<int>((i / 16) % 2) * 2;
    sums[a] = _mm512_fmadd_pd(lo, lo, sums[a]);
    sums[a + 1] = _mm512_fmadd_pd(hi, hi, sums[a + 1]);
  }
  const double sum = _mm512_reduce_add_pd(
      _mm512_add_pd(_mm512_add_pd(sums[0], sums[1]), _mm512_add_pd(sums[2], sums[3])));
  const __m512 scale = _mm512_set1_ps(RmsScale(sum, n, eps));
  for (int64_t i = 0; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, x + i), scale);
    _mm512_mask_storeu_ps(out + i, live, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(live, weight + i)));
  }
}

void RotatePairsAvx512(float* x, int64_t n_vectors, int64_t dim, const float* cos,
                       const float* sin) {
  // 8 pairs per step: each angle twice (cos at both lanes, sin negated at the even lane, so
  // that (a, b) * cos + (b, a) * sin' = (a cos - b sin, b cos + a sin)).
  const __m512i twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512 even_sign = _mm512_castsi512_ps(_mm512_set1_epi64(0x80000000LL));  // even lanes
  for (int64_t j = 0; j < dim; j += 16) {
    const auto live = static_cast<__mmask16>(dim - j >= 16 ? 0xffff : (1u << (dim - j)) - 1);
    const auto pairs = static_cast<__mmask8>(dim - j >= 16 ? 0xff : (1u << ((dim - j) / 2)) - 1);
    // The chunk's angles (pairs j / 2 ..), each in the two lanes of its pair.
    const auto each_twice = [&](const float* angles) {
      return _mm512_permutexvar_ps(
          twice, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(pairs, angles + j / 2)));
    };
    const __m512 c = each_twice(cos);
    const __m512 s = _mm512_xor_ps(each_twice(sin), even_sign);
    for (int64_t v = 0; v < n_vectors; ++v) {
      float* p = x + v * dim + j;
      const __m512 ab = _mm512_maskz_loadu_ps(live, p);
      const __m512 ba = _mm512_permute_ps(ab, 0xb1);  // swap within each pair
      // Separate products and a sum (intrinsics, so no contraction into a fused multiply-add).
      const __m512 r = _mm512_add_ps(_mm512_mul_ps(ab, c), _mm512_mul_ps(ba, s));
      _mm512_mask_storeu_ps(p, live, r);
    }
  }
}

}  // namespace streamd::kernels::cpu::internal
