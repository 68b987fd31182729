// AVX2 activation quantizer: f32 rows -> BlockQ16_1 (d = amax / 2047, qs = round-half-even(
// x * (1/d)), s = d * sum(qs)). Bit-identical to QuantizeRowQ16_1Portable: same f32 division,
// reciprocal and products, the same flush of blocks whose d would be subnormal, and
// _mm256_round_ps rounds half to even like std::nearbyint. |x * (1/d)| <= 2047 + 0.001, so the
// rounded values fit 12 bits and the saturating pack never clips.
#include <immintrin.h>

#include <cfloat>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"

namespace streamd::kernels::cpu::internal {

void QuantizeRowQ16_1Avx2(const float* x, int64_t k, BlockQ16_1* out) {
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
    BlockQ16_1& o = out[b];
    if (_mm256_movemask_ps(bad) != 0) {
      o.d = o.s = __builtin_nanf("");
      std::memset(o.qs, 0, sizeof o.qs);
      continue;
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    float d = _mm_cvtss_f32(m) / static_cast<float>(kQ16Max);
    if (!(d >= FLT_MIN)) d = 0.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    const __m256i sum32 =
        _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    // Packing interleaves 128-bit lanes: [0-3 8-11 | 4-7 12-15]; the 64-bit permute restores
    // element order.
    const __m256i lo = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8);
    const __m256i hi = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs + 16), hi);
    o.d = d;
    o.s = d * static_cast<float>(_mm_cvtsi128_si32(s));
  }
}

}  // namespace streamd::kernels::cpu::internal
