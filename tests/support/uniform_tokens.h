// Token ids drawn uniformly from a vocabulary with a fixed seed, for the model tests that feed
// random prompts to a synthetic model and its plain reference.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace streamd::testing {

inline std::vector<int32_t> UniformTokens(int64_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = d(rng);
  return out;
}

}  // namespace streamd::testing
