#include "engine/cache/kv_scales.h"

#include <cmath>
#include <string>

#include "kernels/cpu/quant_blocks.h"

namespace streamd {

StatusOr<std::shared_ptr<const KvInt8Scales>> KvInt8Scales::Make(int32_t n_layers,
                                                                 int32_t n_kv_heads,
                                                                 int32_t head_dim,
                                                                 std::vector<float> k,
                                                                 std::vector<float> v) {
  if (n_layers < 1 || n_kv_heads < 1 || head_dim < 1) {
    return InvalidArgumentError("int8 KV scales need at least one layer, head and channel");
  }
  const size_t n = static_cast<size_t>(n_layers) * n_kv_heads * head_dim;
  for (const auto& [name, s] : {std::pair<const char*, const std::vector<float>*>{"k", &k},
                                {"v", &v}}) {
    if (s->size() != n) {
      return InvalidArgumentError(std::string("int8 KV scales: ") + name + " has " +
                                  std::to_string(s->size()) + " values; " +
                                  std::to_string(n_layers) + " layers x " +
                                  std::to_string(n_kv_heads) + " KV heads x " +
                                  std::to_string(head_dim) + " channels need " +
                                  std::to_string(n));
    }
    for (size_t i = 0; i < n; ++i) {
      // Scales far below any real activation would make 1 / scale overflow.
      if (!std::isfinite((*s)[i]) || !((*s)[i] >= 1e-30f)) {
        return InvalidArgumentError(std::string("int8 KV scales: ") + name + "[" +
                                    std::to_string(i) + "] = " + std::to_string((*s)[i]) +
                                    " is not a finite number >= 1e-30");
      }
    }
  }
  std::shared_ptr<KvInt8Scales> s(new KvInt8Scales());
  s->n_layers_ = n_layers;
  s->n_kv_heads_ = n_kv_heads;
  s->head_dim_ = head_dim;
  s->k_inv_.resize(n);
  s->v_inv_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s->k_inv_[i] = 1.0f / k[i];
    s->v_inv_[i] = 1.0f / v[i];
  }
  s->k_ = std::move(k);
  s->v_ = std::move(v);
  return std::shared_ptr<const KvInt8Scales>(std::move(s));
}

void DequantizeRowsToF16(const int8_t* q, int64_t rows, int32_t head_dim, const float* scale,
                         uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < head_dim; ++c) {
      out[r * head_dim + c] = kernels::FloatToHalf(scale[c] * q[r * head_dim + c]);
    }
  }
}

void QuantizeRowsFromF16(const uint16_t* in, int64_t rows, int32_t head_dim,
                         const float* inverse, int8_t* q) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < head_dim; ++c) {
      const float x = std::nearbyint(kernels::HalfToFloat(in[r * head_dim + c]) * inverse[c]);
      q[r * head_dim + c] = static_cast<int8_t>(x > 127.0f ? 127.0f : x >= -127.0f ? x : -127.0f);
    }
  }
}

}  // namespace streamd
