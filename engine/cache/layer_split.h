// LayerSplit: where each layer of a model keeps its K/V when its local layers (a native sliding
// window: Gemma 3) keep caches of their own (session_cache.h, "Local layers"). Then there are two
// pools: the other layers' (the main pool) and the local layers', each holding its layers in
// model order. A plain value the engine, the CPU model and the K/V images agree on.
#pragma once

#include <cstdint>
#include <vector>

namespace streamd {

struct LayerSplit {
  std::vector<uint8_t> local;  // per model layer: 1 when its K/V are in the local pool
  std::vector<int32_t> index;  // per model layer: its layer in its pool
  int32_t n_local = 0;
  int32_t n_main = 0;

  // From `local`, one flag per model layer.
  static LayerSplit Of(std::vector<uint8_t> local) {
    LayerSplit split;
    split.local = std::move(local);
    for (uint8_t is_local : split.local) {
      split.index.push_back(is_local ? split.n_local++ : split.n_main++);
    }
    return split;
  }
  int32_t n_layers() const { return static_cast<int32_t>(local.size()); }
  bool empty() const { return n_local == 0; }
};

}  // namespace streamd
