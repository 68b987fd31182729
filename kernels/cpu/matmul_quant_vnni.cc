// Quantized weights (Q4_0, Q4_1, Q8_0) times Q16_1 activations, AVX-VNNI level: the kernels of
// matmul_quant_kernels.h with _mm256_dpwssd_avx_epi32, which multiplies i16 pairs and adds them
// to an i32 accumulator in one instruction (the AVX2 level needs a madd and an add). Measured on
// Sapphire Rapids (matmul_bench.cc): ~10% faster 1-token products and ~14% faster 64-token ones
// than the AVX2 level. Compiled with -mavx2 -mfma -mf16c -mavxvnni; reached only after the
// run-time check in isa.cc.
#include <immintrin.h>

#include "kernels/cpu/matmul_quant_kernels.h"

namespace streamd::kernels::cpu::internal {
namespace {

struct DpwssdVnni {
  // acc + the i32 pair sums of a * b, in one instruction.
  static __m256i MulAdd(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpwssd_avx_epi32(acc, a, b);
  }
};

}  // namespace

void MatMulQuantAvxVnni(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                        const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo,
                        int64_t row_begin, int64_t row_end) {
  MatMulQuant<DpwssdVnni>(type, w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
}

}  // namespace streamd::kernels::cpu::internal
