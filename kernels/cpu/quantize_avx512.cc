// AVX-512 activation quantizer: quantize_avx2.cc's rule on one 32-value block per pair of zmm
// registers, bit-identical to it and to QuantizeRowQ16_1Portable (the same f32 division,
// reciprocal and products, the same flush of blocks whose d would be subnormal; the conversion
// rounds half to even by its embedded rounding mode). A batched decode step quantizes every
// layer's inputs per token: 4 rows x 30 layers x 16 tokens per step at 16 sessions.
#include <immintrin.h>

#include <cfloat>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"

namespace streamd::kernels::cpu::internal {

void QuantizeRowQ16_1Avx512(const float* x, int64_t k, BlockQ16_1* out) {
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
    BlockQ16_1& o = out[b];
    // NaN or infinite: not below infinity (an unordered compare is true for NaN).
    if ((_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) !=
        0) {
      o.d = o.s = __builtin_nanf("");
      std::memset(o.qs, 0, sizeof o.qs);
      continue;
    }
    float d = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) / static_cast<float>(kQ16Max);
    if (!(d >= FLT_MIN)) d = 0.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    constexpr int kNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512i q0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, id), kNearestEven);
    const __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, id), kNearestEven);
    // |q| <= 2047: the truncating narrowing is exact.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs), _mm512_cvtepi32_epi16(q0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs + 16), _mm512_cvtepi32_epi16(q1));
    o.d = d;
    o.s = d * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
  }
}

}  // namespace streamd::kernels::cpu::internal
