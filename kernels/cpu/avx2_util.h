// Small AVX2 helpers shared by the *_avx2.cc kernels. Include only from files compiled with
// -mavx2 -mfma -mf16c. Everything here has internal linkage (anonymous namespace), so no copy
// built with these flags can be picked by the linker for a portable caller.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace streamd::kernels::cpu::internal {
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One 32-value weight block widened to i16 for _mm256_madd_epi16 against a BlockQ16_1: lo holds
// values 0-15 (pairing with activation qs[0..15]), hi values 16-31 (qs[16..31]).
struct WeightI16 {
  __m256i lo, hi;
};

// 16 bytes of packed nibbles (value j low nibble of byte j, value j + 16 high nibble) -> [0, 15].
inline WeightI16 UnpackNibbles(const uint8_t* qs) {
  const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return {_mm256_and_si256(v, _mm256_set1_epi16(0x0f)), _mm256_srli_epi16(v, 4)};
}

// 32 signed bytes -> [-128, 127].
inline WeightI16 WidenBytes(const int8_t* qs) {
  return {_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs))),
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16)))};
}

// The first 4 bytes (f16 d, f16 m) of up to 4 weight blocks -> [d0 m0 d1 m1 d2 m2 d3 m3] f32,
// zeros for blocks n..3. For Q4_0 / Q8_0 the odd lanes decode quant bytes: callers ignore them.
inline __m256 LoadScalePairs(const uint8_t* const* blocks, int n) {
  __m128i v[4];
  for (int r = 0; r < 4; ++r) {
    uint32_t bits = 0;
    if (r < n) std::memcpy(&bits, blocks[r], sizeof bits);
    v[r] = _mm_cvtsi32_si128(static_cast<int>(bits));
  }
  const __m128i lo = _mm_unpacklo_epi32(v[0], v[1]);
  const __m128i hi = _mm_unpacklo_epi32(v[2], v[3]);
  return _mm256_cvtph_ps(_mm_unpacklo_epi64(lo, hi));
}

// (d, s) of one activation block in every pair of lanes: [d s d s d s d s].
inline __m256 BroadcastDs(const float* ds) {
  return _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(ds)));
}

}  // namespace
}  // namespace streamd::kernels::cpu::internal
