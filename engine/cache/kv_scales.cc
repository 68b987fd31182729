#include "engine/cache/kv_scales.h"

#include <cmath>
#include <string>

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
  for (const auto& [name, s] :
       {std::pair<const char*, const std::vector<float>*>{"k", &k}, {"v", &v}}) {
    if (s->size() != n) {
      return InvalidArgumentError(
          std::string("int8 KV scales: ") + name + " has " + std::to_string(s->size()) +
          " values; " + std::to_string(n_layers) + " layers x " + std::to_string(n_kv_heads) +
          " KV heads x " + std::to_string(head_dim) + " channels need " + std::to_string(n));
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

}  // namespace streamd
