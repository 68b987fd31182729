// 8-bit activations (matmul.h, BlockQ8A): the public entry points, the portable quantizer and
// the portable reference product, which the AVX-512 VNNI kernel (matmul_quant8_avx512.cc)
// equals bit for bit: per (token, row) the exact i32 sum of each block, then in block order
//   acc = fma(f32(sum), dw * dx, acc); acc = fma(ow, os, acc)   (the offset term: Q4_0, Q4_1)
// with the block chunks of kBlockChunk the multi-token kernels use.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu {
namespace internal {

void QuantizeRowQ8APortable(const float* x, int64_t k, BlockQ8A* out) {
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float inv = amax > 0 ? static_cast<float>(kQ8Max) / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQuantBlock; ++j) {
      const int32_t q = static_cast<int32_t>(std::nearbyint(xb[j] * inv));
      out[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = amax / static_cast<float>(kQ8Max);
    out[b].s = out[b].d * static_cast<float>(sum);
  }
}

namespace {

// Block b of one weight row as 32 values in element order, its scale dw and offset factor ow
// (Q4_1: m; Q4_0: dw, with os = -8 sx; Q8_0: none).
struct RowBlock {
  int32_t q[kQuantBlock];
  float dw = 0, ow = 0;
  bool offset = false;
  float os_factor = 1;  // os = os_factor * sx
};

RowBlock LoadBlock(WeightType type, const uint8_t* row, int64_t b) {
  RowBlock r;
  if (type == WeightType::kQ8_0) {
    const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
    for (int j = 0; j < kQuantBlock; ++j) r.q[j] = blk.qs[j];
    r.dw = HalfToFloat(blk.d);
    return r;
  }
  const uint8_t* qs;
  if (type == WeightType::kQ4_1) {
    const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
    qs = blk.qs;
    r.dw = HalfToFloat(blk.d);
    r.ow = HalfToFloat(blk.m);
  } else {
    const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
    qs = blk.qs;
    r.dw = HalfToFloat(blk.d);
    r.ow = r.dw;
    r.os_factor = -8.0f;
  }
  r.offset = true;
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    r.q[j] = qs[j] & 0xf;
    r.q[j + kQuantBlock / 2] = qs[j] >> 4;
  }
  return r;
}

}  // namespace

void MatMulQuant8Portable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                          const BlockQ8A* xq, int64_t n_tokens, float* out, int64_t ldo,
                          int64_t row_begin, int64_t row_end) {
  const int64_t nb = k / kQuantBlock;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * w_row_bytes;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const BlockQ8A* x = xq + t * nb;
      float total = 0;
      for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
        const int64_t end = kb0 + kBlockChunk < nb ? kb0 + kBlockChunk : nb;
        float acc = 0;
        for (int64_t b = kb0; b < end; ++b) {
          const RowBlock rb = LoadBlock(type, row, b);
          int32_t sum = 0;
          for (int j = 0; j < kQuantBlock; ++j) sum += rb.q[j] * x[b].qs[j];
          acc = std::fma(static_cast<float>(sum), rb.dw * x[b].d, acc);
          if (rb.offset) acc = std::fma(rb.ow, rb.os_factor * x[b].s, acc);
        }
        total = kb0 == 0 ? acc : total + acc;
      }
      out[t * ldo + r] = total;
    }
  }
}

}  // namespace internal

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "streamd kernels/cpu: %s\n", what);
  std::abort();
}

bool Int8Type(WeightType type) {
  return type == WeightType::kQ4_0 || type == WeightType::kQ4_1 || type == WeightType::kQ8_0;
}

}  // namespace

size_t ActivationBytes8(int64_t n_tokens, int64_t k) {
  if (k <= 0 || k % kQuantBlock != 0 || n_tokens < 0) Fail("bad 8-bit activation shape");
  return static_cast<size_t>(n_tokens) * static_cast<size_t>(k / kQuantBlock) * sizeof(BlockQ8A);
}

void PrepareActivations8(const float* x, int64_t ldx, int64_t k, int64_t token_begin,
                         int64_t token_end, void* xq8) {
  if (k <= 0 || k % kQuantBlock != 0 || token_begin < 0 || token_end < token_begin || ldx < k) {
    Fail("bad 8-bit activation range");
  }
  const int64_t nb = k / kQuantBlock;
  auto* blocks = static_cast<BlockQ8A*>(xq8);
  const bool avx512 = ActiveIsa() >= Isa::kAvx512Vnni;
  for (int64_t t = token_begin; t < token_end; ++t) {
    if (avx512) {
      internal::QuantizeRowQ8AAvx512(x + t * ldx, k, blocks + t * nb);
    } else {
      internal::QuantizeRowQ8APortable(x + t * ldx, k, blocks + t * nb);
    }
  }
}

bool FastInt8Activations(WeightType type) {
  return Int8Type(type) && ActiveIsa() >= Isa::kAvx512Vnni;
}

void MatMulRows8(WeightType type, const void* w, size_t w_row_bytes, int64_t k, const void* xq8,
                 int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  if (!Int8Type(type)) Fail("8-bit activations need Q4_0, Q4_1 or Q8_0 weights");
  if (k <= 0 || k % kQuantBlock != 0) Fail("quantized k must be a multiple of 32");
  if (row_begin < 0 || row_end < row_begin || n_tokens < 0) Fail("bad row or token range");
  if (n_tokens > 1 && ldo < row_end) Fail("ldo smaller than row_end");
  if (w_row_bytes < WeightRowBytes(type, k)) Fail("w_row_bytes smaller than one row");
  if (row_begin == row_end || n_tokens == 0) return;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const BlockQ8A*>(xq8);
  if (FastInt8Activations(type)) {
    internal::MatMulQuant8Avx512Vnni(type, wb, w_row_bytes, k, x, n_tokens, out, ldo, row_begin,
                                     row_end);
  } else {
    internal::MatMulQuant8Portable(type, wb, w_row_bytes, k, x, n_tokens, out, ldo, row_begin,
                                   row_end);
  }
}

}  // namespace streamd::kernels::cpu
