// Quantized weights (Q4_0, Q4_1, Q8_0) times Q16_1 activations, AVX2 level: the kernels of
// matmul_quant_kernels.h with _mm256_madd_epi16 as the i16 multiply-accumulate. Compiled with
// -mavx2 -mfma -mf16c; reached only after the run-time check in isa.cc.
#include <immintrin.h>

#include "kernels/cpu/matmul_quant_kernels.h"

namespace streamd::kernels::cpu::internal {
namespace {

struct MaddAvx2 {
  // acc + the i32 pair sums of a * b.
  static __m256i MulAdd(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
};

}  // namespace

void MatMulQuantAvx2(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                     const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                     int64_t row_begin, int64_t row_end) {
  MatMulQuant<MaddAvx2>(type, w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
}

}  // namespace streamd::kernels::cpu::internal
