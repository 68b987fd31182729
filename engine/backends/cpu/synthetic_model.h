// Synthetic Llama models with random weights, built in memory as GGUF bytes: for tests of the
// forward pass and the cache on awkward shapes, and for benchmarks of a real model's shape
// where its file is not at hand (e.g. on a GPU machine that cannot bring 98 MB along).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/gguf/gguf_file.h"
#include "engine/util/status.h"

namespace streamd {

struct SyntheticModelSpec {
  int32_t n_layers = 2;
  int32_t dim = 64;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t ffn_dim = 96;
  int32_t vocab_size = 256;
  int32_t context_length = 4096;
  float rope_base = 10000.0f;
  // general.architecture, a family of model_family.h: "qwen2" adds random q/k/v biases,
  // "qwen3" random per-head q/k norm weights; both rotate NEOX-style. "gemma3" adds qwen3's norms
  // and random post-attention / post-FFN norms, and its local layers see sliding_window tokens.
  std::string architecture = "llama";
  int32_t sliding_window = 16;  // gemma3's attention.sliding_window
  int32_t head_dim = 0;  // 0: dim / n_heads; else written as attention.key_length (Qwen3-style)
  // Llama 3.x frequency divisors written as rope_freqs.weight ([head_dim / 2]); empty: none.
  std::vector<float> rope_freq_factors;
  gguf::TensorType weight_type = gguf::TensorType::kF32;     // projections
  gguf::TensorType embedding_type = gguf::TensorType::kF32;  // token_embd (tied output head)
  // Set: an untied output head (output.weight) of this type; unset: the head is token_embd.
  std::optional<gguf::TensorType> output_type;
  uint64_t seed = 1;
  // With a vocabulary (byte-level BPE without merges: ids 0..255 are the bytes, then
  // <|endoftext|>, <|im_start|>, <|im_end|> as control tokens, then filler tokens) the model
  // also serves the tokenizer and the engine. Needs vocab_size >= 259.
  bool with_vocab = false;
};

inline constexpr int32_t kSyntheticEndOfText = 256;
inline constexpr int32_t kSyntheticImEnd = 258;

// SmolLM2-135M's shape and types: 30 layers, dim 576, 9 heads / 3 kv heads, ffn 1536,
// vocab 49152, context 8192, Q4_1 projections, Q8_0 tied embedding.
SyntheticModelSpec SmolLm2Shape();
// Llama-3-8B's shape: 32 layers, dim 4096, 32 / 8 heads, ffn 14336, vocab 128256.
SyntheticModelSpec Llama3_8BShape();
// Gemma 3's shape in small: gemma3, Qwen's RoPE base, a head of 32 (wider than dim / n_heads),
// 7 layers (0-4 and 6 local, 5 global) and a native window of 13 tokens.
SyntheticModelSpec SmallGemma3Shape();

// GGUF bytes of a model with uniform random weights scaled like a trained network's
// (|w| <= sqrt(3 / fan_in)), unit norm weights and tied embeddings unless output_type is set.
// Weight types: F32, F16, Q8_0, Q4_0, Q4_1 (quantized from the uniform values), and the types
// converted at load (K-quants, Q5_0, Q5_1, IQ4_NL, IQ4_XS: random blocks whose values reach about
// the same bound; K-quants need dim and ffn_dim multiples of 256).
StatusOr<std::vector<uint8_t>> BuildSyntheticModel(const SyntheticModelSpec& spec);
// The same GGUF with every tensor of a type converted at load replaced by its reference
// dequantization (kernels/cpu/dequantize_reference.h) as F32: the model the conversion must match.
StatusOr<std::vector<uint8_t>> DequantizeConvertedTensors(const std::vector<uint8_t>& bytes);
// The same, loaded: the model owns the bytes.
StatusOr<std::unique_ptr<LlamaModel>> MakeSyntheticModel(const SyntheticModelSpec& spec);

}  // namespace streamd
