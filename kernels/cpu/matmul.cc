// Public entry points of matmul.h: shape checks, then dispatch on the weight type and the
// active instruction set (isa.cc). Broken preconditions (k not a multiple of 32 for quantized
// weights, empty or inverted ranges) are caller bugs and abort.
#include "kernels/cpu/matmul.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "kernels/common/check.h"
#include "kernels/cpu/dequantize_reference.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu {
namespace {

using internal::IsQuantized;
using internal::StorageBlockValues;

// IsaSupported, asked once per level (it queries cpuid; MatMulRowsAt runs per work item).
bool SupportedOnce(Isa isa) {
  static const auto supported = [] {
    std::array<bool, std::size(kAllIsas)> s{};
    for (Isa level : kAllIsas) s[static_cast<size_t>(level)] = IsaSupported(level);
    return s;
  }();
  return supported[static_cast<size_t>(isa)];
}

void CheckK(WeightType type, int64_t k) {
  STREAMD_CHECK_MSG(k > 0, "k must be positive");
  STREAMD_CHECK_MSG(!IsQuantized(type) || k % kQuantBlock == 0,
                    "quantized k must be a multiple of 32");
  STREAMD_CHECK_MSG(k % StorageBlockValues(type) == 0, "Q6_K and Q4_K k must be multiples of 256");
}

// Q4_K has 8-bit products only (matmul.h).
void CheckTwelveBitProducts(WeightType type) {
  STREAMD_CHECK_MSG(type != WeightType::kQ4_K,
                    "Q4_K weights have 8-bit products only (MatMulRows8); convert them to Q4_1");
}

}  // namespace

size_t WeightRowBytes(WeightType type, int64_t k) {
  CheckK(type, k);
  const auto n = static_cast<size_t>(k);
  switch (type) {
    case WeightType::kF32:
      return n * sizeof(float);
    case WeightType::kF16:
    case WeightType::kBF16:
      return n * sizeof(uint16_t);
    case WeightType::kQ4_0:
      return n / kQuantBlock * sizeof(BlockQ4_0);
    case WeightType::kQ4_1:
      return n / kQuantBlock * sizeof(BlockQ4_1);
    case WeightType::kQ8_0:
      return n / kQuantBlock * sizeof(BlockQ8_0);
    case WeightType::kQ5_0:
      return n / kQuantBlock * sizeof(BlockQ5_0);
    case WeightType::kQ5_1:
      return n / kQuantBlock * sizeof(BlockQ5_1);
    case WeightType::kQ6_K:
      return n / kQ6_KValues * sizeof(BlockQ6_K);
    case WeightType::kQ4_K:
      return n / kQ4_KValues * sizeof(BlockQ4_K);
  }
  STREAMD_CHECK_UNREACHABLE("unknown weight type");
}

size_t ActivationBytes(WeightType type, int64_t n_tokens, int64_t k) {
  CheckK(type, k);
  CheckTwelveBitProducts(type);
  STREAMD_CHECK_MSG(n_tokens >= 0, "negative n_tokens");
  const auto rows = static_cast<size_t>(n_tokens);
  if (IsQuantized(type)) return rows * static_cast<size_t>(k / kQuantBlock) * sizeof(BlockQ16_1);
  return rows * static_cast<size_t>(k) * sizeof(float);
}

void PrepareActivations(WeightType type, const float* x, int64_t ldx, int64_t k,
                        int64_t token_begin, int64_t token_end, void* xq) {
  CheckK(type, k);
  CheckTwelveBitProducts(type);
  STREAMD_CHECK_MSG(token_begin >= 0 && token_end >= token_begin && ldx >= k,
                    "bad activation range");
  if (IsQuantized(type)) {
    const int64_t nb = k / kQuantBlock;
    auto* blocks = static_cast<BlockQ16_1*>(xq);
    const bool avx512 = ActiveIsa() >= Isa::kAvx512Vnni;
    const bool avx2 = ActiveIsa() != Isa::kPortable;
    for (int64_t t = token_begin; t < token_end; ++t) {
      if (avx512) {
        internal::QuantizeRowQ16_1Avx512(x + t * ldx, k, blocks + t * nb);
      } else if (avx2) {
        internal::QuantizeRowQ16_1Avx2(x + t * ldx, k, blocks + t * nb);
      } else {
        internal::QuantizeRowQ16_1Portable(x + t * ldx, k, blocks + t * nb);
      }
    }
    return;
  }
  auto* rows = static_cast<float*>(xq);
  for (int64_t t = token_begin; t < token_end; ++t) {
    std::memcpy(rows + t * k, x + t * ldx, static_cast<size_t>(k) * sizeof(float));
  }
}

void MatMulRows(WeightType type, const void* w, size_t w_row_bytes, int64_t k, const void* xq,
                int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end,
                const void* amx_packed) {
  MatMulRowsAt(ActiveIsa(), type, w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end,
               amx_packed);
}

void MatMulRowsAt(Isa level, WeightType type, const void* w, size_t w_row_bytes, int64_t k,
                  const void* xq, int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin,
                  int64_t row_end, const void* amx_packed) {
  static_cast<void>(amx_packed);  // read only at the AMX level, which a build may lack
  // Levels are not a chain (AVX-512 VNNI without AVX-VNNI exists): a level above the active one,
  // or one this CPU lacks, runs at the active one, never at something in between.
  const Isa isa = level <= ActiveIsa() && SupportedOnce(level) ? level : ActiveIsa();
  CheckK(type, k);
  CheckTwelveBitProducts(type);
  STREAMD_CHECK_MSG(row_begin >= 0 && row_end >= row_begin && n_tokens >= 0,
                    "bad row or token range");
  STREAMD_CHECK_MSG(n_tokens <= 1 || ldo >= row_end, "ldo smaller than row_end");
  STREAMD_CHECK_MSG(w_row_bytes >= WeightRowBytes(type, k), "w_row_bytes smaller than one row");
  if (row_begin == row_end || n_tokens == 0) return;
  const auto* w_bytes = static_cast<const uint8_t*>(w);
  const bool avx2 = isa != Isa::kPortable;
  if (IsQuantized(type)) {
    const auto* x_blocks = static_cast<const BlockQ16_1*>(xq);
#if !defined(STREAMD_NO_AMX)
    // No AMX form of Q5_0, Q5_1 or Q6_K (AmxPackable refuses them): their products stay at the
    // AVX-512 VNNI level, which the AMX level includes.
    if (isa == Isa::kAmx && type != WeightType::kQ5_0 && type != WeightType::kQ5_1 &&
        type != WeightType::kQ6_K) {
      internal::MatMulQuantAmx(type, w_bytes, w_row_bytes, static_cast<const uint8_t*>(amx_packed),
                               k, x_blocks, n_tokens, out, ldo, row_begin, row_end);
      return;
    }
#endif
    if (isa == Isa::kAvx512Vnni || isa == Isa::kAmx) {
      internal::MatMulQuantAvx512Vnni(type, w_bytes, w_row_bytes, k, x_blocks, n_tokens, out, ldo,
                                      row_begin, row_end);
    } else if (isa == Isa::kAvxVnni) {
      internal::MatMulQuantAvxVnni(type, w_bytes, w_row_bytes, k, x_blocks, n_tokens, out, ldo,
                                   row_begin, row_end);
    } else if (avx2) {
      internal::MatMulQuantAvx2(type, w_bytes, w_row_bytes, k, x_blocks, n_tokens, out, ldo,
                                row_begin, row_end);
    } else {
      internal::MatMulQuantPortable(type, w_bytes, w_row_bytes, k, x_blocks, n_tokens, out, ldo,
                                    row_begin, row_end);
    }
    return;
  }
  const auto* x_rows = static_cast<const float*>(xq);
  if (avx2) {
    internal::MatMulFloatAvx2(type, w_bytes, w_row_bytes, k, x_rows, n_tokens, out, ldo, row_begin,
                              row_end);
  } else {
    internal::MatMulFloatPortable(type, w_bytes, w_row_bytes, k, x_rows, n_tokens, out, ldo,
                                  row_begin, row_end);
  }
}

void DequantizeRow(WeightType type, const void* w_row, int64_t k, float* out) {
  CheckK(type, k);
  const auto* bytes = static_cast<const uint8_t*>(w_row);
  const int64_t nb = k / kQuantBlock;
  switch (type) {
    case WeightType::kF32:
      std::memcpy(out, bytes, static_cast<size_t>(k) * sizeof(float));
      return;
    case WeightType::kF16:
    case WeightType::kBF16: {
      for (int64_t i = 0; i < k; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, sizeof h);
        out[i] = type == WeightType::kF16 ? HalfToFloat(h) : Bf16ToFloat(h);
      }
      return;
    }
    case WeightType::kQ4_0:
      for (int64_t b = 0; b < nb; ++b) {
        const auto& blk = reinterpret_cast<const BlockQ4_0*>(bytes)[b];
        const float d = HalfToFloat(blk.d);
        float* o = out + b * kQuantBlock;
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          o[j] = d * static_cast<float>((blk.qs[j] & 0xf) - 8);
          o[j + kQuantBlock / 2] = d * static_cast<float>((blk.qs[j] >> 4) - 8);
        }
      }
      return;
    case WeightType::kQ4_1:
      for (int64_t b = 0; b < nb; ++b) {
        const auto& blk = reinterpret_cast<const BlockQ4_1*>(bytes)[b];
        const float d = HalfToFloat(blk.d);
        const float m = HalfToFloat(blk.m);
        float* o = out + b * kQuantBlock;
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          o[j] = d * static_cast<float>(blk.qs[j] & 0xf) + m;
          o[j + kQuantBlock / 2] = d * static_cast<float>(blk.qs[j] >> 4) + m;
        }
      }
      return;
    case WeightType::kQ8_0:
      for (int64_t b = 0; b < nb; ++b) {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(bytes)[b];
        const float d = HalfToFloat(blk.d);
        for (int j = 0; j < kQuantBlock; ++j) {
          out[b * kQuantBlock + j] = d * static_cast<float>(blk.qs[j]);
        }
      }
      return;
    case WeightType::kQ5_0:
      for (int64_t b = 0; b < nb; ++b) {
        const auto& blk = reinterpret_cast<const BlockQ5_0*>(bytes)[b];
        const float d = HalfToFloat(blk.d);
        for (int j = 0; j < kQuantBlock; ++j) {
          out[b * kQuantBlock + j] = d * static_cast<float>(Q5Value(blk.qs, blk.qh, j) - 16);
        }
      }
      return;
    case WeightType::kQ5_1:
      for (int64_t b = 0; b < nb; ++b) {
        const auto& blk = reinterpret_cast<const BlockQ5_1*>(bytes)[b];
        const float d = HalfToFloat(blk.d), m = HalfToFloat(blk.m);
        for (int j = 0; j < kQuantBlock; ++j) {
          out[b * kQuantBlock + j] = d * static_cast<float>(Q5Value(blk.qs, blk.qh, j)) + m;
        }
      }
      return;
    case WeightType::kQ6_K:
      // The plain reference decode (the gguf package's numpy, bit for bit): this path serves
      // embedding lookups and tests, not the products.
      DequantizeReference(ConvertedQuant::kQ6_K, bytes, k / kQ6_KValues, out);
      return;
    case WeightType::kQ4_K:
      DequantizeReference(ConvertedQuant::kQ4_K, bytes, k / kQ4_KValues, out);
      return;
  }
  STREAMD_CHECK_UNREACHABLE("unknown weight type");
}

}  // namespace streamd::kernels::cpu
