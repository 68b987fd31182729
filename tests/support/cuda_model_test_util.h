// Helpers shared by the CUDA backend's whole-model tests (cuda_model_test.cc,
// cuda_snapshot_test.cc, cuda_snapshot_graphs_test.cc, cuda_int8_snapshot_test.cc): random token
// ids, the per-row logits agreement measure, a small model shape and a chunked prefill.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"

namespace streamd::cuda {

// sqrt(sum (got - ref)^2 / sum ref^2) over one logits row; +inf when anything is NaN.
inline double RelativeL2(const float* got, const float* ref, int32_t n) {
  double diff = 0, norm = 0;
  for (int32_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(ref[i]) - got[i]) * (static_cast<double>(ref[i]) - got[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::isnan(diff) ? INFINITY : std::sqrt(diff / std::max(norm, 1e-30));
}

inline std::vector<int32_t> RandomTokens(std::mt19937& rng, int32_t n, int32_t vocab) {
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
  return v;
}

// A small model whose K/V are [n_layers][1 kv head][head_dim 64].
inline SyntheticModelSpec SmallSpec(int32_t n_layers) {
  SyntheticModelSpec spec;
  spec.n_layers = n_layers;
  spec.dim = 128;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  spec.ffn_dim = 256;
  return spec;
}

// Prefills `tokens` into `cache` in chunks of at most 64 on the backend that made its pool.
inline void Prefill(ModelBackend& model, SessionCache& cache, const std::vector<int32_t>& tokens) {
  std::vector<float> logits(static_cast<size_t>(model.config().vocab_size));
  for (size_t at = 0; at < tokens.size(); at += 64) {
    const size_t n = std::min<size_t>(64, tokens.size() - at);
    const Status s = StepRunner(model).Run(std::span<const int32_t>(tokens).subspan(at, n), cache,
                                           LogitsMode::kLast, logits.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
}

}  // namespace streamd::cuda
