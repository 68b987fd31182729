// What sets one Llama-like architecture apart from another, as data: the one forward pass
// (llama_model.cc), the plain reference and the loader read these flags, so supporting a
// family means describing it here, not forking the forward pass.
//
//   llama  (Llama 1-3, Mistral, SmolLM): normal RoPE, no biases, no q/k norm; Llama 3.x
//          frequency scaling arrives as the rope_freqs tensor (llama_config.cc).
//   qwen2  (Qwen2, Qwen2.5):  q/k/v projection biases; NEOX RoPE.
//   qwen3  (Qwen3 dense):     per-head RMSNorm of q and k before RoPE; NEOX RoPE; head_dim may
//                             differ from dim / n_heads (attention.key_length).
// GGUF metadata keys are prefixed by the architecture name (qwen2.context_length, ...).
#pragma once

#include <string>
#include <string_view>

namespace streamd {

// Which dimensions of a head RoPE rotates together. Both are 2-D rotations of d/2 pairs by the
// same angles pos * theta_i, so q(a) . k(b) depends on a - b alone either way: the streaming
// cache's position handling (keys rotated once, queries by cache position) holds for both.
enum class RopeStyle {
  kNormal,  // pairs (2i, 2i + 1): GGML's "normal" mode, Llama
  kNeox,    // pairs (i, i + d/2): GPT-NeoX's layout, Qwen
};

struct ModelFamily {
  std::string_view architecture;  // general.architecture
  RopeStyle rope_style = RopeStyle::kNormal;
  bool qkv_bias = false;  // blk.N.attn_{q,k,v}.bias, added after the projections
  bool qk_norm = false;   // blk.N.attn_{q,k}_norm.weight [head_dim], RMSNorm per head
};

// The family of `architecture`, or null when streamd does not support it.
const ModelFamily* FindModelFamily(std::string_view architecture);
// "llama, qwen2, qwen3": for the error that rejects any other architecture.
std::string SupportedArchitectures();

}  // namespace streamd
