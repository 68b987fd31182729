// SamplingParams: the per-request knobs of token sampling, and their validation.
//
// Params arrive from untrusted requests, so every field is range-checked by
// ValidateSamplingParams before a Sampler is built; a Sampler treats invalid params as a bug.
// Neutral values switch a stage off: temperature 0 = greedy, top_k 0, top_p 1, min_p 0,
// repetition_penalty 1, presence/frequency 0, penalty_last_n 0.
#pragma once

#include <cstdint>

#include "engine/util/status.h"

namespace streamd {

struct SamplingParams {
  float temperature = 0.8f;         // 0 = greedy (argmax, ties -> lowest id); range [0, 100]
  int32_t top_k = 40;               // keep the k most likely tokens; 0 = disabled
  float top_p = 0.95f;              // nucleus over the top-k survivors; 1 = disabled; range (0, 1]
  float min_p = 0.05f;              // keep p >= min_p * p_max; 0 = disabled; range [0, 1]
  float repetition_penalty = 1.0f;  // CTRL-style; 1 = disabled; range (0, 10]
  float presence_penalty = 0.0f;    // subtracted once per present token; range [-2, 2]
  float frequency_penalty = 0.0f;   // subtracted count times; range [-2, 2]
  int32_t penalty_last_n = 64;      // penalty window in accepted tokens; range [0, 1 << 20]
  uint64_t seed = 0;                // 0 = seed from std::random_device

  bool operator==(const SamplingParams&) const = default;
};

inline constexpr float kMaxTemperature = 100.0f;
inline constexpr float kMaxRepetitionPenalty = 10.0f;
inline constexpr float kMaxPresenceFrequencyPenalty = 2.0f;
inline constexpr int32_t kMaxPenaltyLastN = 1 << 20;

// INVALID_ARGUMENT naming the first bad field and its limit, e.g.
// "top_p = 1.5 is out of range (0, 1]". Non-finite floats are always rejected.
Status ValidateSamplingParams(const SamplingParams& params);

// As above, and additionally top_k <= vocab_size; vocab_size must be positive.
Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size);

// True when no penalty stage changes any logit, so the penalty pass can be skipped.
bool PenaltiesAreNeutral(const SamplingParams& params);

// True when a draw is the argmax of the unmodified logits (temperature 0 or top_k 1, and
// neutral penalties; ties go to the lowest id): a backend may then pick it where the logits are.
bool IsPlainArgmax(const SamplingParams& params);

}  // namespace streamd
