// Sampler: turns one step's logits into a token id, per request.
//
// Pipeline, in the order it is defined (see sampler.cc for how it is computed faster):
//   1. penalties over the last penalty_last_n accepted tokens (PenaltyWindow): repetition
//      (divide positive logits, multiply negative), then frequency and presence;
//   2. temperature: p ~ softmax(logits / T); T == 0 is greedy argmax, ties -> lowest id;
//   3. top-k: keep the k largest logits (ties -> lowest id);
//   4. top-p: keep the minimal prefix (by descending p) of the top-k survivors whose mass,
//      normalized over those survivors, is >= top_p;
//   5. min-p: keep tokens with p >= min_p * p_max;
//   6. draw from the survivors, renormalized, with std::mt19937_64 seeded by params.seed
//      (std::random_device when 0).
// NaN logits count as -inf. If every logit is -inf the result is token 0; if some are +inf
// the result is the lowest such id. Tokens with p < e^-40 * p_max are never drawn (their total
// mass is below vocab * 4e-18, far under float resolution).
//
// Not thread-safe; one Sampler per sequence. Sample() allocates only on its first call.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling/candidate_filters.h"
#include "engine/sampling/penalty_window.h"
#include "engine/sampling/sampling_params.h"
#include "engine/util/status.h"

namespace streamd {

class Sampler {
 public:
  // params must pass ValidateSamplingParams(params, vocab_size); a violation aborts.
  Sampler(const SamplingParams& params, int32_t vocab_size);

  // Validates first: the entry point for params taken from a request.
  static StatusOr<Sampler> Create(const SamplingParams& params, int32_t vocab_size);

  // logits: [vocab_size]; the penalties are applied to it in place, to avoid a copy.
  int32_t Sample(std::span<float> logits);

  // Adds a token (generated, or from the prompt) to the penalty window.
  void Accept(int32_t token);

  // Back to the just-constructed state: empty window, RNG reseeded (a fixed seed replays the
  // same draws; seed 0 draws a fresh random seed).
  void Reset();

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  void Seed();
  // Index of the drawn candidate among candidates_[0, n), whose probs sum to `total`.
  size_t Draw(size_t n, double total);

  SamplingParams params_;
  int32_t vocab_size_;
  bool use_penalties_;
  int32_t top_k_;  // 0 when disabled or >= vocab_size
  PenaltyWindow window_;
  std::mt19937_64 rng_;
  std::vector<SamplingCandidate> candidates_;  // sized on the first Sample(), reused after
};

}  // namespace streamd
