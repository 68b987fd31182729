#include "engine/model/llama_config.h"

#include <cmath>
#include <string_view>

namespace streamd {
namespace {

// Reads "<arch>.<suffix>" as a positive int32 within [1, limit].
StatusOr<int32_t> ReadDim(const gguf::GgufFile& file, const std::string& arch,
                          std::string_view suffix, uint32_t limit) {
  const std::string key = arch + "." + std::string(suffix);
  STREAMD_ASSIGN_OR_RETURN(uint32_t v, file.GetU32(key));
  if (v == 0 || v > limit) {
    return InvalidArgumentError(key + " = " + std::to_string(v) + " is outside [1, " +
                                std::to_string(limit) + "]");
  }
  return static_cast<int32_t>(v);
}

Status ReadRope(const gguf::GgufFile& file, const std::string& arch, LlamaConfig& c) {
  STREAMD_ASSIGN_OR_RETURN(c.rope_base, file.GetF32Or(arch + ".rope.freq_base", 10000.0f));
  if (!std::isfinite(c.rope_base) || c.rope_base <= 1.0f) {
    return InvalidArgumentError(arch + ".rope.freq_base = " + std::to_string(c.rope_base) +
                                " must be finite and > 1");
  }
  STREAMD_ASSIGN_OR_RETURN(uint32_t rope_dim,
                           file.GetU32Or(arch + ".rope.dimension_count", c.head_dim));
  if (rope_dim != static_cast<uint32_t>(c.head_dim)) {
    return UnimplementedError(arch + ".rope.dimension_count = " + std::to_string(rope_dim) +
                              ": partial rotary embeddings are not supported (head_dim " +
                              std::to_string(c.head_dim) + ")");
  }
  c.rope_dim = static_cast<int32_t>(rope_dim);

  STREAMD_ASSIGN_OR_RETURN(std::string type, file.GetStringOr(arch + ".rope.scaling.type", "none"));
  if (type == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
    STREAMD_ASSIGN_OR_RETURN(c.rope_scaling_factor,
                             file.GetF32Or(arch + ".rope.scaling.factor", 1.0f));
    if (!std::isfinite(c.rope_scaling_factor) || c.rope_scaling_factor <= 0.0f) {
      return InvalidArgumentError(arch + ".rope.scaling.factor = " +
                                  std::to_string(c.rope_scaling_factor) + " must be > 0");
    }
  } else if (type != "none") {
    return UnimplementedError(arch + ".rope.scaling.type = \"" + type +
                              "\" is not supported (supported: none, linear, and Llama-3 "
                              "frequency factors through the rope_freqs tensor)");
  }

  // Llama 3.x frequency scaling: converters store one divisor per frequency as a tensor.
  if (const gguf::TensorInfo* t = file.FindTensor("rope_freqs.weight")) {
    if (t->type != gguf::TensorType::kF32 || t->num_elements != c.head_dim / 2) {
      return InvalidArgumentError("tensor 'rope_freqs.weight' must be F32 with head_dim/2 = " +
                                  std::to_string(c.head_dim / 2) + " elements");
    }
    const auto* f = reinterpret_cast<const float*>(t->data);
    c.rope_freq_factors.assign(f, f + t->num_elements);
    for (float v : c.rope_freq_factors) {
      if (!std::isfinite(v) || v <= 0.0f) {
        return InvalidArgumentError("tensor 'rope_freqs.weight' holds a non-positive factor");
      }
    }
  }
  return OkStatus();
}

}  // namespace

bool IsSupportedArchitecture(std::string_view architecture) {
  return FindModelFamily(architecture) != nullptr;
}

std::string SupportedArchitectureNames() { return SupportedArchitectures(); }

bool UsesPlainLlamaLayer(const LlamaConfig& c) {
  const ModelFamily& f = c.family;
  return !f.qkv_bias && !f.qk_norm && f.rope_style == RopeStyle::kNormal && !f.sandwich_norms &&
         !f.embedding_scaled && f.ffn_activation == FfnActivation::kSilu && f.local_period == 0 &&
         c.q_dim() == c.dim;
}

StatusOr<LlamaConfig> ReadLlamaConfig(const gguf::GgufFile& file) {
  LlamaConfig c;
  STREAMD_ASSIGN_OR_RETURN(c.architecture, file.GetString("general.architecture"));
  const ModelFamily* family = FindModelFamily(c.architecture);
  if (family == nullptr) {
    return UnimplementedError("architecture \"" + c.architecture +
                              "\" is not supported (supported: " + SupportedArchitectures() + ")");
  }
  c.family = *family;
  const std::string& a = c.architecture;
  STREAMD_ASSIGN_OR_RETURN(c.name, file.GetStringOr("general.name", "unnamed"));
  STREAMD_ASSIGN_OR_RETURN(c.n_layers, ReadDim(file, a, "block_count", 1024));
  STREAMD_ASSIGN_OR_RETURN(c.dim, ReadDim(file, a, "embedding_length", 65536));
  STREAMD_ASSIGN_OR_RETURN(c.n_heads, ReadDim(file, a, "attention.head_count", 1024));
  STREAMD_ASSIGN_OR_RETURN(uint32_t kv, file.GetU32Or(a + ".attention.head_count_kv", c.n_heads));
  c.n_kv_heads = static_cast<int32_t>(kv);
  if (c.n_kv_heads == 0 || c.n_heads % c.n_kv_heads != 0) {
    return InvalidArgumentError(a + ".attention.head_count_kv = " + std::to_string(kv) +
                                " must divide head_count = " + std::to_string(c.n_heads));
  }
  // Without attention.key_length a head is dim / n_heads wide; Qwen3 states a wider one (its
  // q_dim = n_heads * head_dim then differs from dim, which the projections' shapes follow).
  if (file.Find(a + ".attention.key_length") == nullptr && c.dim % c.n_heads != 0) {
    return InvalidArgumentError(a + ".embedding_length = " + std::to_string(c.dim) +
                                " is not a multiple of head_count = " + std::to_string(c.n_heads));
  }
  STREAMD_ASSIGN_OR_RETURN(uint32_t key_len,
                           file.GetU32Or(a + ".attention.key_length", c.dim / c.n_heads));
  STREAMD_ASSIGN_OR_RETURN(uint32_t value_len,
                           file.GetU32Or(a + ".attention.value_length", key_len));
  if (key_len != value_len || key_len == 0 || key_len % 2 != 0 || key_len > 512) {
    return UnimplementedError("head dimension " + std::to_string(key_len) + " (values " +
                              std::to_string(value_len) +
                              ") is not supported (keys and values alike, even, at most 512)");
  }
  c.head_dim = static_cast<int32_t>(key_len);
  STREAMD_ASSIGN_OR_RETURN(c.ffn_dim, ReadDim(file, a, "feed_forward_length", 1 << 20));
  STREAMD_ASSIGN_OR_RETURN(c.context_length, ReadDim(file, a, "context_length", 1 << 24));
  STREAMD_ASSIGN_OR_RETURN(c.rms_eps,
                           file.GetF32Or(a + ".attention.layer_norm_rms_epsilon", 1e-5f));
  if (!std::isfinite(c.rms_eps) || c.rms_eps <= 0.0f || c.rms_eps > 1.0f) {
    return InvalidArgumentError(a + ".attention.layer_norm_rms_epsilon = " +
                                std::to_string(c.rms_eps) + " is outside (0, 1]");
  }

  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return InvalidArgumentError("tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != c.dim) {
    return InvalidArgumentError("tensor 'token_embd.weight' must have shape [" +
                                std::to_string(c.dim) + ", vocab]");
  }
  c.vocab_size = static_cast<int32_t>(embd->dims[1]);
  c.tied_output = file.FindTensor("output.weight") == nullptr;

  STREAMD_RETURN_IF_ERROR(ReadRope(file, a, c));

  if (c.family.local_period > 0) {
    STREAMD_ASSIGN_OR_RETURN(c.sliding_window,
                             ReadDim(file, a, "attention.sliding_window", 1 << 24));
  }
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // Gemma 3 scales scores by query_pre_attn_scalar^-1/2, which its GGUFs do not store: it is
  // head_dim in every size but the 27B (62 layers), where it is dim / n_heads (llama.cpp tells the
  // sizes apart by the same layer count).
  if (c.architecture == "gemma3" && c.n_layers == 62) {
    c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.dim / c.n_heads));
  }
  return c;
}

}  // namespace streamd
