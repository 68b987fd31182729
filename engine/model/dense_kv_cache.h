// One sequence's keys and values in one contiguous f16 buffer per layer: the plain cache used
// for single-stream generation and for reference computations. Keys are stored after RoPE.
//
// Layout: k[layer][position][kv_head][head_dim], v likewise (f16 bit patterns).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/llama_config.h"

namespace streamd {

class DenseKvCache {
 public:
  DenseKvCache(const LlamaConfig& config, int32_t capacity)
      : capacity_(capacity),
        kv_dim_(config.kv_dim()),
        layer_stride_(static_cast<int64_t>(capacity) * config.kv_dim()),
        k_(layer_stride_ * config.n_layers),
        v_(layer_stride_ * config.n_layers) {}

  int32_t capacity() const { return capacity_; }
  int32_t length() const { return length_; }
  void set_length(int32_t n) { length_ = n; }
  void Clear() { length_ = 0; }
  int64_t bytes() const { return static_cast<int64_t>(k_.size() + v_.size()) * 2; }

  // [kv_heads, head_dim] of one position
  uint16_t* key(int32_t layer, int32_t pos) { return &k_[layer * layer_stride_ + pos * kv_dim_]; }
  uint16_t* value(int32_t layer, int32_t pos) { return &v_[layer * layer_stride_ + pos * kv_dim_]; }
  int64_t kv_dim() const { return kv_dim_; }

 private:
  int32_t capacity_;
  int32_t length_ = 0;
  int64_t kv_dim_;
  int64_t layer_stride_;
  std::vector<uint16_t> k_;
  std::vector<uint16_t> v_;
};

}  // namespace streamd
