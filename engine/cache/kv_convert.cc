#include "engine/cache/kv_convert.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd {

// Through f32 rows, with the kernels' vector f16 conversions (scalar ones made an int8 session's
// capture ~20x slower than an f16 one's).
void DequantizeRowsToF16(const int8_t* q, int64_t rows, int32_t head_dim, const float* scale,
                         uint16_t* out) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(head_dim));
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < head_dim; ++c) row[c] = scale[c] * q[r * head_dim + c];
    kernels::cpu::FloatToHalfRow(row.data(), out + r * head_dim, head_dim);
  }
}

void QuantizeRowsFromF16(const uint16_t* in, int64_t rows, int32_t head_dim, const float* inverse,
                         int8_t* q) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(head_dim));
  for (int64_t r = 0; r < rows; ++r) {
    kernels::cpu::HalfToFloatRow(in + r * head_dim, row.data(), head_dim);
    kernels::cpu::QuantizeRowI8(row.data(), inverse, head_dim, q + r * head_dim);
  }
}

void RequantizeRows(const int8_t* in, int64_t rows, int32_t head_dim, const float* scale,
                    const float* inverse, int8_t* out) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(head_dim));
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < head_dim; ++c) row[c] = scale[c] * in[r * head_dim + c];
    kernels::cpu::QuantizeRowI8(row.data(), inverse, head_dim, out + r * head_dim);
  }
}

StatusOr<KvImage> DequantizedKv(const KvView& kv) {
  STREAMD_RETURN_IF_ERROR(CheckKvView(kv));
  KvImage out;
  out.n_layers = kv.n_layers;
  out.n_kv_heads = kv.n_kv_heads;
  out.head_dim = kv.head_dim;
  out.n_tokens = kv.n_tokens;
  if (kv.dtype != kernels::KvDtype::kInt8) {
    out.data.assign(kv.data, kv.data + kv.size);
    return out;
  }
  out.data.resize(static_cast<size_t>(kv.elements()));
  for (int32_t layer = 0; layer < kv.n_layers; ++layer) {
    for (int32_t k = 0; k < 2; ++k) {
      for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
        const int64_t at = kv.Offset(layer, k, h, 0);
        DequantizeRowsToF16(kv.data_i8 + at, kv.n_tokens, kv.head_dim,
                            kv.scales->scales(layer, k) + h * kv.head_dim, out.data.data() + at);
      }
    }
  }
  return out;
}

}  // namespace streamd
