// Hyper-parameters of a Llama-family model, read from GGUF metadata and checked for sanity.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/model/model_family.h"
#include "engine/util/status.h"

namespace streamd {

enum class RopeScaling { kNone, kLinear };

struct LlamaConfig {
  std::string architecture;  // general.architecture: one of SupportedArchitectures()
  ModelFamily family;        // what the architecture changes in the forward pass
  std::string name;          // general.name, for logs
  int32_t n_layers = 0;
  int32_t dim = 0;  // embedding length
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;  // grouped-query attention: n_heads % n_kv_heads == 0
  int32_t head_dim = 0;    // attention.key_length, else dim / n_heads
  int32_t ffn_dim = 0;
  int32_t vocab_size = 0;
  int32_t context_length = 0;  // trained context
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int32_t rope_dim = 0;  // rotated dimensions per head (== head_dim)
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scaling_factor = 1.0f;  // positions are divided by this for kLinear
  // Per-frequency divisors (Llama 3.x "rope_freqs" tensor); empty when the model has none.
  std::vector<float> rope_freq_factors;
  bool tied_output = false;  // output head shares token_embd.weight
  // The local layers' native window (<arch>.attention.sliding_window) when the family has local
  // layers (ModelFamily::local_period), else 0.
  int32_t sliding_window = 0;
  // The attention's score scale: 1 / sqrt(head_dim), except where a family says otherwise.
  float attention_scale = 0.0f;

  int32_t q_dim() const { return n_heads * head_dim; }
  int32_t kv_dim() const { return n_kv_heads * head_dim; }
  // Whether layer l is a local (sliding-window) layer: its keys are only the last
  // sliding_window tokens, and it rotates with the family's local RoPE base.
  bool IsLocalLayer(int32_t l) const {
    const int32_t period = family.local_period;
    return period > 0 && l % period != period - 1;
  }
};

// Whether the model's layer is the plain Llama one (no biases, no q/k norms, RoPE over adjacent
// pairs, q_dim == dim, none of Gemma's extras): the only layer the CUDA kernels run so far.
bool UsesPlainLlamaLayer(const LlamaConfig& config);

// Reads and validates the config. Unsupported architectures are rejected by name.
StatusOr<LlamaConfig> ReadLlamaConfig(const gguf::GgufFile& file);

// The values of general.architecture ReadLlamaConfig reads, and their list for errors
// ("llama"): model_check.h names an unsupported one beside the file's other problems.
bool IsSupportedArchitecture(std::string_view architecture);
std::string SupportedArchitectureNames();

}  // namespace streamd
