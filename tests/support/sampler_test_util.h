// Helpers shared by the sampler tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/sampling/sampling_params.h"

namespace streamd::sampling_test {

inline std::vector<float> RandomLogits(int32_t vocab, uint32_t seed, float stddev = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& l : logits) l = dist(rng);
  return logits;
}

// Only temperature and the seed set: top-k, top-p and min-p disabled.
inline SamplingParams Plain(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  return p;
}

}  // namespace streamd::sampling_test
