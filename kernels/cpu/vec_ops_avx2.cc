// vec_ops.h with AVX2 + FMA + F16C (this file is compiled with -mavx2 -mfma -mf16c and only
// reached when isa.cc found those on the CPU). Tails shorter than 8 go through a zero-padded
// stack buffer so the vector code handles them too.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/exp_poly.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/query_groups.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd::kernels::cpu::internal {
namespace {

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

__m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Copies the last n % 8 elements into zero-padded buffers of 8.
template <typename T>
void LoadTail(const T* p, int64_t count, T (&buf)[8]) {
  std::memset(buf, 0, sizeof buf);
  std::memcpy(buf, p, static_cast<size_t>(count) * sizeof(T));
}

}  // namespace

float DotF32Avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  if (i < n) {
    float ta[8], tb[8];
    LoadTail(a + i, n - i, ta);
    LoadTail(b + i, n - i, tb);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(ta), _mm256_loadu_ps(tb), acc1);
  }
  return HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

float DotF32F16Avx2(const float* a, const uint16_t* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LoadHalf8(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), LoadHalf8(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), LoadHalf8(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), LoadHalf8(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LoadHalf8(b + i), acc0);
  }
  if (i < n) {
    float ta[8];
    uint16_t tb[8];
    LoadTail(a + i, n - i, ta);
    LoadTail(b + i, n - i, tb);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(ta), LoadHalf8(tb), acc1);
  }
  return HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

void AxpyF32Avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  if (i < n) {
    float tx[8], ty[8];
    LoadTail(x + i, n - i, tx);
    LoadTail(y + i, n - i, ty);
    _mm256_storeu_ps(ty, _mm256_fmadd_ps(va, _mm256_loadu_ps(tx), _mm256_loadu_ps(ty)));
    std::memcpy(y + i, ty, static_cast<size_t>(n - i) * sizeof(float));
  }
}

void AxpyF16Avx2(float alpha, const uint16_t* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, LoadHalf8(x + i), _mm256_loadu_ps(y + i)));
  }
  if (i < n) {
    uint16_t tx[8];
    float ty[8];
    LoadTail(x + i, n - i, tx);
    LoadTail(y + i, n - i, ty);
    _mm256_storeu_ps(ty, _mm256_fmadd_ps(va, LoadHalf8(tx), _mm256_loadu_ps(ty)));
    std::memcpy(y + i, ty, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// ---- Attention rows (vec_ops.h: DotRowsF16, AxpyRowsF16) ----
//
// Scores: a tile of KR keys x QG queries keeps QG * KR <= 8 accumulators of 8 lanes; each key
// chunk is converted once and multiplied into the QG queries' accumulators. The tile's dot
// products are then finished together by LaneSums8 (one vector of 8 sums) instead of one
// horizontal sum per (query, key). The tile sizes keep accumulators + QG query vectors + one key
// in the 16 ymm registers. Runs of keys that are not a multiple of KR finish with KR/2, KR/4,
// ... tiles.
//
// Accumulation: QG queries x DC chunks of 8 outputs stay in registers over all the rows; each
// row chunk is converted once for the QG queries.

namespace {

template <int QG>
constexpr int kScoreKeys = QG == 1   ? 8
                           : QG == 2 ? 4
                                     : 2;
template <int QG>
constexpr int kAccumulateChunks = QG == 1   ? 8
                                  : QG == 2 ? 4
                                            : 2;

// Lane L of the result = the sum of the 8 lanes of acc[L % N] (lanes >= N repeat earlier ones).
// A transposing tree: the 128-bit halves of pairs, then pairs of lanes, then single lanes, each
// level one add per output vector on two shuffles. Feeding v[2m + k] = acc[4k + m] puts acc[L]
// in lane L. When N < 8 the repeated inputs make whole subtrees identical and GCC keeps one copy
// of each: N = 1, 2, 8 compile to 9, 12, 21 shuffles and adds.
template <int N>
[[gnu::always_inline]] inline __m256 LaneSums8(const __m256* acc) {
  __m256 v[8];
  for (int i = 0; i < 8; ++i) v[i] = acc[(4 * (i % 2) + i / 2) % N];
  __m256 x[4];
  for (int j = 0; j < 4; ++j) {
    x[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x31));
  }
  __m256 y[2];
  for (int j = 0; j < 2; ++j) {
    y[j] = _mm256_add_ps(_mm256_unpacklo_ps(x[2 * j], x[2 * j + 1]),
                         _mm256_unpackhi_ps(x[2 * j], x[2 * j + 1]));
  }
  const __m256d a = _mm256_castps_pd(y[0]), b = _mm256_castps_pd(y[1]);
  return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                       _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
}

// out[i * ldo + r] for QG queries x KR keys (hd % 8 == 0).
template <int QG, int KR>
[[gnu::always_inline]] inline void ScoreTile(const float* q, const uint16_t* k, int64_t hd,
                                             float scale, float* out, int64_t ldo) {
  __m256 acc[QG * KR];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; d += 8) {
    __m256 qv[QG];
    for (int i = 0; i < QG; ++i) qv[i] = _mm256_loadu_ps(q + i * hd + d);
    for (int r = 0; r < KR; ++r) {
      const __m256 kv = LoadHalf8(k + r * hd + d);
      for (int i = 0; i < QG; ++i) acc[i * KR + r] = _mm256_fmadd_ps(qv[i], kv, acc[i * KR + r]);
    }
  }
  const __m256 sums = _mm256_mul_ps(LaneSums8<QG * KR>(acc), _mm256_set1_ps(scale));
  if constexpr (QG * KR == 8 && QG == 1) {
    _mm256_storeu_ps(out, sums);
  } else {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sums);
    for (int i = 0; i < QG; ++i) {
      for (int r = 0; r < KR; ++r) out[i * ldo + r] = lanes[i * KR + r];
    }
  }
}

template <int QG, int KR>
void ScoreRows(const float* q, const uint16_t* k, int64_t n_rows, int64_t hd, float scale,
               float* out, int64_t ldo) {
  int64_t r = 0;
  for (; r + KR <= n_rows; r += KR) ScoreTile<QG, KR>(q, k + r * hd, hd, scale, out + r, ldo);
  if constexpr (KR > 1) {
    if (r < n_rows) ScoreRows<QG, KR / 2>(q, k + r * hd, n_rows - r, hd, scale, out + r, ldo);
  }
}

// y[i * hd + c] += sum_r w[i * ldw + r] * v[r * hd + c] for c < 8 * DC (v, y at the chunk).
template <int QG, int DC>
[[gnu::always_inline]] inline void AccumulateTile(const float* w, int64_t ldw, const uint16_t* v,
                                                  int64_t n_rows, int64_t hd, float* y) {
  __m256 acc[QG][DC];
  for (int i = 0; i < QG; ++i) {
    for (int j = 0; j < DC; ++j) acc[i][j] = _mm256_loadu_ps(y + i * hd + 8 * j);
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    __m256 wv[QG];
    for (int i = 0; i < QG; ++i) wv[i] = _mm256_broadcast_ss(w + i * ldw + r);
    for (int j = 0; j < DC; ++j) {
      const __m256 vv = LoadHalf8(v + r * hd + 8 * j);
      for (int i = 0; i < QG; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], vv, acc[i][j]);
    }
  }
  for (int i = 0; i < QG; ++i) {
    for (int j = 0; j < DC; ++j) _mm256_storeu_ps(y + i * hd + 8 * j, acc[i][j]);
  }
}

// Columns [0, cols) of the rows (cols % 8 == 0), DC chunks at a time, then DC/2, ...
template <int QG, int DC>
void AccumulateCols(const float* w, int64_t ldw, const uint16_t* v, int64_t n_rows, int64_t hd,
                    int64_t cols, float* y) {
  int64_t c = 0;
  for (; c + 8 * DC <= cols; c += 8 * DC) AccumulateTile<QG, DC>(w, ldw, v + c, n_rows, hd, y + c);
  if constexpr (DC > 1) {
    if (c < cols) AccumulateCols<QG, DC / 2>(w, ldw, v + c, n_rows, hd, cols - c, y + c);
  }
}

}  // namespace

void DotRowsF16Avx2(const float* q, int64_t n_q, const uint16_t* k, int64_t n_rows, int64_t hd,
                    float scale, float* out, int64_t ldo) {
  if (hd % 8 != 0) {
    for (int64_t i = 0; i < n_q; ++i) {
      for (int64_t r = 0; r < n_rows; ++r) {
        out[i * ldo + r] = DotF32F16Avx2(q + i * hd, k + r * hd, hd) * scale;
      }
    }
    return;
  }
  ForEachQuerySubGroup(n_q, [&]<int QG>(int64_t i) {
    ScoreRows<QG, kScoreKeys<QG>>(q + i * hd, k, n_rows, hd, scale, out + i * ldo, ldo);
  });
}

void AxpyRowsF16Avx2(const float* w, int64_t ldw, int64_t n_q, const uint16_t* v, int64_t n_rows,
                     int64_t hd, float* y) {
  if (hd % 8 != 0) {
    for (int64_t i = 0; i < n_q; ++i) {
      for (int64_t r = 0; r < n_rows; ++r) AxpyF16Avx2(w[i * ldw + r], v + r * hd, y + i * hd, hd);
    }
    return;
  }
  ForEachQuerySubGroup(n_q, [&]<int QG>(int64_t i) {
    AccumulateCols<QG, kAccumulateChunks<QG>>(w + i * ldw, ldw, v, n_rows, hd, hd, y + i * hd);
  });
}

// ---- Softmax helpers ----

namespace {

// exp of 8 lanes (exp_poly.h); 2^n through the exponent bits.
__m256 Exp8(__m256 x) {
  using namespace exp_poly;
  // Constant first: vmaxps/vminps return the second operand when one is NaN.
  const __m256 xc = _mm256_min_ps(_mm256_set1_ps(kHigh), _mm256_max_ps(_mm256_set1_ps(kLow), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kTaylor[i]));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  // Ordered compare: false for NaN, which keeps its NaN.
  return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_LT_OQ), e);
}

}  // namespace

float MaxF32Avx2(const float* x, int64_t n) {
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
  float m = HorizontalMax(_mm256_max_ps(m0, m1));
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float ExpShiftedSumAvx2(float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    const __m256 e1 = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s));
    _mm256_storeu_ps(x + i, e0);
    _mm256_storeu_ps(x + i + 8, e1);
    sum0 = _mm256_add_ps(sum0, e0);
    sum1 = _mm256_add_ps(sum1, e1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    sum0 = _mm256_add_ps(sum0, e);
  }
  if (i < n) {
    float t[8];
    LoadTail(x + i, n - i, t);
    // Lanes past the end hold exp(0 - shift): keep them out of the sum.
    const __m256 live = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7),
                                      _mm256_set1_ps(static_cast<float>(n - i)), _CMP_LT_OQ);
    const __m256 e = _mm256_and_ps(live, Exp8(_mm256_sub_ps(_mm256_loadu_ps(t), s)));
    _mm256_storeu_ps(t, e);
    std::memcpy(x + i, t, static_cast<size_t>(n - i) * sizeof(float));
    sum1 = _mm256_add_ps(sum1, e);
  }
  return HorizontalSum(_mm256_add_ps(sum0, sum1));
}

void FloatToHalfRowAvx2(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) {
    float tx[8];
    uint16_t to[8];
    LoadTail(x + i, n - i, tx);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to),
                     _mm256_cvtps_ph(_mm256_loadu_ps(tx), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(out + i, to, static_cast<size_t>(n - i) * sizeof(uint16_t));
  }
}

void HalfToFloatRowAvx2(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, LoadHalf8(x + i));
  if (i < n) {
    uint16_t tx[8];
    float to[8];
    LoadTail(x + i, n - i, tx);
    _mm256_storeu_ps(to, LoadHalf8(tx));
    std::memcpy(out + i, to, static_cast<size_t>(n - i) * sizeof(float));
  }
}

namespace {

// gate[i] = gate[i] / (1 + exp(-z(gate[i]))) * up[i]: SiLU with z(g) = g, GELU (tanh) with
// z(g) = 2u(g). `z` maps 8 gates at once.
template <class Z>
void GatedMulAvx2(float* gate, const float* up, int64_t n, Z z) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), z(g)));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    float tg[8], tu[8];
    LoadTail(gate + i, n - i, tg);
    LoadTail(up + i, n - i, tu);
    GatedMulAvx2(tg, tu, 8, z);
    std::memcpy(gate + i, tg, static_cast<size_t>(n - i) * sizeof(float));
  }
}

}  // namespace

void SiluMulAvx2(float* gate, const float* up, int64_t n) {
  GatedMulAvx2(gate, up, n, [](__m256 g) { return g; });
}

void GeluTanhMulAvx2(float* gate, const float* up, int64_t n) {
  const __m256 c0 = _mm256_set1_ps(kGeluC0);
  const __m256 c1 = _mm256_set1_ps(kGeluC1);
  GatedMulAvx2(gate, up, n, [&](__m256 g) {
    return _mm256_mul_ps(g, _mm256_fmadd_ps(_mm256_mul_ps(g, g), c1, c0));
  });
}

}  // namespace streamd::kernels::cpu::internal
