// Float weights (F32, F16, BF16) times f32 activations with AVX2 + FMA (F16C for F16). Compiled
// with -mavx2 -mfma -mf16c; reached only after the run-time check in isa.cc.
//
// Tiles of kR rows x kT tokens: 8 weights of each row are converted to f32 once and used for kT
// tokens; acc[r][t] holds 8 partial sums. A k % 8 tail goes through zero-padded stack copies.
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/matmul_internal.h"

namespace streamd::kernels::cpu::internal {
namespace {

constexpr int64_t kTokenChunk = 64;
constexpr int64_t kPrefetchBytes = 8192;

struct F32Format {
  static constexpr size_t kBytes = 4;
  static __m256 Load8(const uint8_t* p) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
};
struct F16Format {
  static constexpr size_t kBytes = 2;
  static __m256 Load8(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};
struct Bf16Format {
  static constexpr size_t kBytes = 2;
  static __m256 Load8(const uint8_t* p) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
};

// rows [r0, r0 + kR) x tokens [t0, t0 + kT). w: row r0 (rows w_stride bytes apart); x: token t0
// (tokens k floats apart); out: element (t0, r0), tokens ldo floats apart.
template <class F, int kR, int kT>
void Tile(const uint8_t* w, size_t w_stride, const float* x, int64_t k, float* out, int64_t ldo) {
  __m256 acc[kR][kT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kT; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t i = 0; i < k8; i += 8) {
    if constexpr (kT == 1) {
      // One token streams the weights once: prefetch the bytes this step consumes, a few tiles
      // ahead (rows are contiguous), as the quantized kernels do.
      constexpr int kStep = kR * 8 * static_cast<int>(F::kBytes);
      const uint8_t* p = w + kPrefetchBytes + i / 8 * kStep;
      for (int l = 0; l < (kStep + 63) / 64 + 1; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(p + 64 * l), _MM_HINT_T0);
      }
    }
    __m256 wv[kR];
    for (int r = 0; r < kR; ++r) wv[r] = F::Load8(w + r * w_stride + i * F::kBytes);
    for (int t = 0; t < kT; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * k + i);
      for (int r = 0; r < kR; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (k8 < k) {
    const size_t tail = static_cast<size_t>(k - k8);
    for (int r = 0; r < kR; ++r) {
      alignas(32) uint8_t wt[8 * 4] = {};
      std::memcpy(wt, w + r * w_stride + k8 * F::kBytes, tail * F::kBytes);
      const __m256 wv = F::Load8(wt);
      for (int t = 0; t < kT; ++t) {
        alignas(32) float xt[8] = {};
        std::memcpy(xt, x + t * k + k8, tail * sizeof(float));
        acc[r][t] = _mm256_fmadd_ps(wv, _mm256_load_ps(xt), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    for (int r = 0; r < kR; ++r) out[t * ldo + r] = HorizontalSum(acc[r][t]);
  }
}

using TileFn = void (*)(const uint8_t*, size_t, const float*, int64_t, float*, int64_t);

constexpr int kMaxR = 4;
constexpr int kMaxT = 3;

template <class F, int kR, int... kTs>
constexpr void FillRow(TileFn (&table)[kMaxR + 1][kMaxT + 1], std::integer_sequence<int, kTs...>) {
  ((table[kR][kTs + 1] = &Tile<F, kR, kTs + 1>), ...);
}

template <class F, int... kRs>
constexpr auto MakeTable(std::integer_sequence<int, kRs...>) {
  struct Table {
    TileFn fn[kMaxR + 1][kMaxT + 1] = {};
  } table;
  (FillRow<F, kRs + 1>(table.fn, std::make_integer_sequence<int, kMaxT>{}), ...);
  return table;
}

template <class F>
void MatMul(const uint8_t* w, size_t w_row_bytes, int64_t k, const float* xq, int64_t n_tokens,
            float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  static constexpr auto kTable = MakeTable<F>(std::make_integer_sequence<int, kMaxR>{});
  for (int64_t c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
    const int64_t c1 = c0 + kTokenChunk < n_tokens ? c0 + kTokenChunk : n_tokens;
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kMaxR) {
      const int64_t nr = row_end - r0 < kMaxR ? row_end - r0 : kMaxR;
      for (int64_t t0 = c0; t0 < c1; t0 += kMaxT) {
        const int64_t nt = c1 - t0 < kMaxT ? c1 - t0 : kMaxT;
        kTable.fn[nr][nt](w + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, xq + t0 * k, k,
                          out + t0 * ldo + r0, ldo);
      }
    }
  }
}

}  // namespace

void MatMulFloatAvx2(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                     const float* xq, int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin,
                     int64_t row_end) {
  switch (type) {
    case WeightType::kF32:
      return MatMul<F32Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    case WeightType::kF16:
      return MatMul<F16Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    case WeightType::kBF16:
      return MatMul<Bf16Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    default:
      return;
  }
}

}  // namespace streamd::kernels::cpu::internal
