#include "engine/model/model_family.h"

namespace streamd {
namespace {

constexpr ModelFamily kFamilies[] = {
    {.architecture = "llama", .rope_style = RopeStyle::kNormal},
    {.architecture = "qwen2", .rope_style = RopeStyle::kNeox, .qkv_bias = true},
    {.architecture = "qwen3", .rope_style = RopeStyle::kNeox, .qk_norm = true},
    // Gemma 3's pattern and local base are fixed by the architecture, not stored in its GGUFs:
    // five sliding-window layers, then one global, with local RoPE base 10000 (Gemma 3's config:
    // sliding_window_pattern 6, rope_local_base_freq 10000).
    {.architecture = "gemma3",
     .rope_style = RopeStyle::kNeox,
     .qk_norm = true,
     .sandwich_norms = true,
     .embedding_scaled = true,
     .ffn_activation = FfnActivation::kGeluTanh,
     .local_period = 6,
     .local_rope_base = 10000.0f},
};

}  // namespace

const ModelFamily* FindModelFamily(std::string_view architecture) {
  for (const ModelFamily& f : kFamilies) {
    if (f.architecture == architecture) return &f;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::string out;
  for (const ModelFamily& f : kFamilies) {
    if (!out.empty()) out += ", ";
    out += f.architecture;
  }
  return out;
}

}  // namespace streamd
