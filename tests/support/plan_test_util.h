// Helpers shared by the plan tests: a small quantized synthetic model (fresh random weights per
// run), the logits of a token stream through a sink cache, random token ids.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"

namespace streamd::plan_test {

inline SyntheticModelSpec QuantSpec() {
  SyntheticModelSpec spec;
  spec.dim = 128;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 320;
  spec.weight_type = gguf::TensorType::kQ4_1;
  spec.embedding_type = gguf::TensorType::kQ8_0;
  spec.seed = std::random_device{}();
  return spec;
}

// Logits of every token of `tokens` streamed through a fresh sink cache in chunks of 8.
inline std::vector<float> Logits(LlamaModel& model, const std::vector<int32_t>& tokens) {
  const LlamaConfig& c = model.config();
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  const CacheSpec spec{CacheMode::kSink, 4, 28, 8};
  auto pool = BlockPool::Create(shape, 16, 8 * BlockPool::BlockBytes(shape, 16));
  EXPECT_TRUE(pool.ok());
  auto cache = SessionCache::Create(pool->get(), spec, c.context_length);
  EXPECT_TRUE(cache.ok());
  std::vector<float> all, chunk(8 * static_cast<size_t>(c.vocab_size));
  for (size_t i = 0; i < tokens.size(); i += 8) {
    const size_t n = std::min<size_t>(8, tokens.size() - i);
    EXPECT_TRUE(StepRunner(model)
                    .Run({tokens.data() + i, n}, **cache, LogitsMode::kAll, chunk.data())
                    .ok());
    all.insert(all.end(), chunk.begin(), chunk.begin() + n * c.vocab_size);
  }
  return all;
}

inline std::vector<int32_t> RandomTokens(int32_t vocab, size_t n) {
  std::mt19937 rng(std::random_device{}());
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

}  // namespace streamd::plan_test
