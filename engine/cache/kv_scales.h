// KvInt8Scales: the static scales of an int8 KV cache. A cached K or V value is stored as
// q = round(x / scale) in [-127, 127] and read back as scale * q, with one scale per (layer,
// kv head, channel) for K and for V, calibrated once by `streamd build` (engine/build_plan/
// kv_calibration.h) and kept in the plan. Static scales keep a block's bytes plain int8 (half
// of f16: twice the sessions per GiB), attention folds them into the query and the output
// (kernels/cpu/paged_attention.h), and a row is written without looking at other rows.
//
// Outside the pool the K/V keep their encoding: a K/V image (kv_image.h) and a snapshot of an
// int8 session hold the int8 values as the pool stores them plus these scales (half the bytes
// of f16, nothing converted). Restoring into a pool with the same scales copies the bytes; into
// one with other scales, or an f16 pool (the CUDA backend's included), converts them
// (kv_convert.h). Quantizing a row dequantized with the same scales gives the same int8 values
// (|error of the f16 rounding| < 0.06 scale < 0.5 scale), so a session can pass through an f16
// pool and back unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/util/status.h"

namespace streamd {

class KvInt8Scales {
 public:
  // k, v: [n_layers][n_kv_heads][head_dim], each finite and > 0. Errors name the first bad
  // entry or the size that does not match the shape.
  static StatusOr<std::shared_ptr<const KvInt8Scales>> Make(int32_t n_layers, int32_t n_kv_heads,
                                                            int32_t head_dim, std::vector<float> k,
                                                            std::vector<float> v);

  int32_t n_layers() const { return n_layers_; }
  int32_t n_kv_heads() const { return n_kv_heads_; }
  int32_t head_dim() const { return head_dim_; }
  const std::vector<float>& k() const { return k_; }
  const std::vector<float>& v() const { return v_; }
  // One layer's [n_kv_heads][head_dim] scales (kv 0 = K, 1 = V) and their inverses.
  const float* scales(int32_t layer, int32_t kv) const { return At(kv == 0 ? k_ : v_, layer); }
  const float* inverses(int32_t layer, int32_t kv) const {
    return At(kv == 0 ? k_inv_ : v_inv_, layer);
  }

 private:
  KvInt8Scales() = default;
  const float* At(const std::vector<float>& s, int32_t layer) const {
    return s.data() + static_cast<int64_t>(layer) * n_kv_heads_ * head_dim_;
  }
  int32_t n_layers_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  std::vector<float> k_, v_, k_inv_, v_inv_;
};

}  // namespace streamd
