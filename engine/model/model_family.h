// What sets one Llama-like architecture apart from another, as data: the one forward pass
// (llama_model.cc), the plain reference and the loader read these flags, so supporting a
// family means describing it here, not forking the forward pass.
//
//   llama  (Llama 1-3, Mistral, SmolLM): normal RoPE, no biases, no q/k norm; Llama 3.x
//          frequency scaling arrives as the rope_freqs tensor (llama_config.cc).
//   qwen2  (Qwen2, Qwen2.5):  q/k/v projection biases; NEOX RoPE.
//   qwen3  (Qwen3 dense):     per-head RMSNorm of q and k before RoPE; NEOX RoPE; head_dim may
//                             differ from dim / n_heads (attention.key_length).
//   gemma3 (Gemma 3 text):    qwen3's q/k norms and NEOX RoPE, plus: the embedding scaled by
//                             sqrt(dim); a second RMSNorm on each block's output before it joins
//                             the residual ("sandwich" norms); a GELU (tanh) gated FFN; and five
//                             of every six layers local, attending only to their last
//                             attention.sliding_window tokens, with RoPE base 10000 (the others
//                             global, with the file's rope.freq_base and scaling). The GGUF's
//                             norm weights already hold Gemma's (1 + w).
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

// The gate's activation in the gated FFN: down(act(gate(x)) * up(x)).
enum class FfnActivation {
  kSilu,      // x * sigmoid(x): Llama, Qwen
  kGeluTanh,  // GELU, tanh approximation: Gemma
};

struct ModelFamily {
  std::string_view architecture;  // general.architecture
  RopeStyle rope_style = RopeStyle::kNormal;
  bool qkv_bias = false;  // blk.N.attn_{q,k,v}.bias, added after the projections
  bool qk_norm = false;   // blk.N.attn_{q,k}_norm.weight [head_dim], RMSNorm per head
  // blk.N.post_attention_norm / post_ffw_norm [dim]: RMSNorm of the attention's and the FFN's
  // outputs before each is added to the residual stream.
  bool sandwich_norms = false;
  bool embedding_scaled = false;  // the embedding row times sqrt(dim) before the first layer
  FfnActivation ffn_activation = FfnActivation::kSilu;
  // Local (sliding-window) layers: every layer but each local_period-th (l % period != period-1)
  // attends only to its last <arch>.attention.sliding_window tokens and rotates with
  // local_rope_base, unscaled. 0: every layer is global.
  int32_t local_period = 0;
  float local_rope_base = 0.0f;
};

// The family of `architecture`, or null when streamd does not support it.
const ModelFamily* FindModelFamily(std::string_view architecture);
// "llama, qwen2, qwen3": for the error that rejects any other architecture.
std::string SupportedArchitectures();

}  // namespace streamd
