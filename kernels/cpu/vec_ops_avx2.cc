// vec_ops.h with AVX2 + FMA + F16C (this file is compiled with -mavx2 -mfma -mf16c and only
// reached when isa.cc found those on the CPU). Tails shorter than 8 go through a zero-padded
// stack buffer so the vector code handles them too.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_internal.h"

namespace streamd::kernels::cpu::internal {
namespace {

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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

void DotRowsF16Avx2(const float* q, const uint16_t* k, int64_t n_rows, int64_t hd, float scale,
                    float* out) {
  if (hd % 8 != 0) {
    for (int64_t r = 0; r < n_rows; ++r) out[r] = DotF32F16Avx2(q, k + r * hd, hd) * scale;
    return;
  }
  // Four rows at a time: four independent accumulators, each query vector loaded once.
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    const uint16_t* k0 = k + r * hd;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < hd; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(qv, LoadHalf8(k0 + j * hd + i), acc[j]);
    }
    for (int j = 0; j < 4; ++j) out[r + j] = HorizontalSum(acc[j]) * scale;
  }
  for (; r < n_rows; ++r) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; i += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), LoadHalf8(k + r * hd + i), acc);
    }
    out[r] = HorizontalSum(acc) * scale;
  }
}

void AxpyRowsF16Avx2(const float* w, const uint16_t* v, int64_t n_rows, int64_t hd, float* y) {
  if (hd % 8 != 0) {
    for (int64_t r = 0; r < n_rows; ++r) AxpyF16Avx2(w[r], v + r * hd, y, hd);
    return;
  }
  // 32 outputs at a time stay in registers over all rows (then 8 at a time for the rest).
  int64_t c = 0;
  for (; c + 32 <= hd; c += 32) {
    __m256 acc[4];
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_loadu_ps(y + c + 8 * j);
    for (int64_t r = 0; r < n_rows; ++r) {
      const __m256 wv = _mm256_set1_ps(w[r]);
      const uint16_t* vr = v + r * hd + c;
      for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(wv, LoadHalf8(vr + 8 * j), acc[j]);
    }
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(y + c + 8 * j, acc[j]);
  }
  for (; c < hd; c += 8) {
    __m256 acc = _mm256_loadu_ps(y + c);
    for (int64_t r = 0; r < n_rows; ++r) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(w[r]), LoadHalf8(v + r * hd + c), acc);
    }
    _mm256_storeu_ps(y + c, acc);
  }
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

}  // namespace streamd::kernels::cpu::internal
