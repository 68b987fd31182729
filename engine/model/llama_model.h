// A Llama-family model on the CPU: loads a GGUF file, binds its weights in place and runs
// batched forward passes (prefill and decode are the same code; decode is n_tokens == 1).
//
// Data path per layer, for all tokens of the batch at once:
//   x -> RMSNorm -> [Wq|Wk|Wv] (one activation quantization, one parallel product) -> RoPE
//     -> K,V appended to the cache (f16) -> attention per (token, head) -> Wo -> x += .
//   x -> RMSNorm -> [Wgate|Wup] -> silu(gate) * up -> Wdown -> x += .
// Every product reads each weight block once per step for the whole batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/model/dense_kv_cache.h"
#include "engine/model/llama_config.h"
#include "engine/model/llama_weights.h"
#include "engine/model/rope.h"
#include "engine/util/status.h"

namespace streamd {

enum class LogitsMode {
  kLast,  // logits of the batch's last token: [vocab]
  kAll,   // logits of every token: [n_tokens, vocab]
};

class LlamaModel {
 public:
  static StatusOr<std::unique_ptr<LlamaModel>> Load(const std::string& path);
  // Takes ownership of an already opened file (tests build synthetic models in memory).
  static StatusOr<std::unique_ptr<LlamaModel>> FromFile(std::unique_ptr<gguf::GgufFile> file);

  const LlamaConfig& config() const { return config_; }
  const gguf::GgufFile& file() const { return *file_; }
  const LlamaWeights& weights() const { return weights_; }

  // Worker threads used by Forward (default: hardware concurrency).
  void set_threads(int32_t n) { threads_ = n > 0 ? n : 1; }
  int32_t threads() const { return threads_; }

  // Appends `tokens` to `cache` at positions cache.length().. and computes their logits.
  // Errors: empty batch, a token id outside the vocabulary, or a batch that does not fit in
  // the cache's capacity (INVALID_ARGUMENT / OUT_OF_RANGE naming the value and the limit).
  Status Forward(std::span<const int32_t> tokens, DenseKvCache& cache, LogitsMode mode,
                 float* logits);

 private:
  LlamaModel() = default;
  void ReserveWorkspace(int64_t n_tokens, int32_t cache_capacity);

  std::unique_ptr<gguf::GgufFile> file_;
  LlamaConfig config_;
  LlamaWeights weights_;
  std::unique_ptr<RopeTable> rope_;
  int32_t threads_ = 1;

  // Scratch reused across calls; sized for the largest batch seen so far.
  struct Workspace {
    int64_t n_tokens = 0;
    std::vector<float> x, xb, q, k, v, attn, proj, gate, up, rope_cos, rope_sin;
    std::vector<uint8_t> xq;
    std::vector<float> scores;  // [threads, cache capacity]
  } ws_;
};

}  // namespace streamd
