// How the pipeline in sampler.h is computed without sorting the vocabulary.
//
// The stages are reordered into filters that give the same result, because:
//   - top-k does not depend on T (x -> x / T is monotone), so it selects on raw logits;
//   - min-p compares p to p_max, a ratio that truncation and renormalization leave unchanged,
//     and top-p and min-p each keep a prefix of the tokens sorted by p, so applying min-p
//     after top-p equals intersecting both prefixes: the shorter one wins.
// So one pass collects the candidates (the top-k, or every token above a floor), one pass
// over them computes p and Z = sum(p), min-p partitions them, and top-p selects its prefix
// among the min-p survivors (see candidate_filters.h). The floor is the min-p cut when top-p
// is off; with top-p on, Z must cover every top-k survivor, so it is only the e^-40 cut.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

#include "kernels/common/check.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd {
namespace {

// log(p / p_max) below which a token is treated as impossible: e^-40 ~= 4e-18.
constexpr float kLogNegligible = -40.0f;
// Slack for the log-domain min-p prefilter, so the exact p >= min_p test decides the boundary.
constexpr float kMinPPrefilterSlack = 1e-3f;
// The streaming top-k buffer holds 2k + this many candidates: each compaction (an O(buffer)
// nth_element) then admits at least k + 512 new tokens, so top-k stays O(vocab) for any k.
constexpr size_t kTopKSlack = 512;
// Excludes -inf (and NaN, which fails every comparison) from the candidates.
constexpr float kLowestFinite = std::numeric_limits<float>::lowest();

// Uniform double in [0, 1) from the top 53 bits: unlike std::uniform_real_distribution its
// output is the same on every standard library, so a seed replays everywhere.
double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Runs in the member initializer list so that no member is built from invalid params.
const SamplingParams& CheckedParams(const SamplingParams& params, int32_t vocab_size) {
  STREAMD_CHECK_MSG(ValidateSamplingParams(params, vocab_size).ok(),
                    "invalid SamplingParams; validate before constructing a Sampler");
  return params;
}

// Lowest id among the largest logits; NaN is skipped; 0 when every logit is -inf or NaN.
int32_t Argmax(std::span<const float> logits) {
  return static_cast<int32_t>(
      kernels::cpu::ArgmaxF32(logits.data(), static_cast<int64_t>(logits.size())));
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(CheckedParams(params, vocab_size)),
      vocab_size_(vocab_size),
      use_penalties_(!PenaltiesAreNeutral(params)),
      top_k_(params.top_k < vocab_size ? params.top_k : 0),
      window_(use_penalties_ ? params.penalty_last_n : 0, vocab_size) {
  Seed();
}

StatusOr<Sampler> Sampler::Create(const SamplingParams& params, int32_t vocab_size) {
  STREAMD_RETURN_IF_ERROR(ValidateSamplingParams(params, vocab_size));
  return Sampler(params, vocab_size);
}

void Sampler::Seed() {
  uint64_t seed = params_.seed;
  if (seed == 0) {
    std::random_device device;
    seed = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  rng_.seed(seed);
}

void Sampler::Accept(int32_t token) {
  STREAMD_CHECK_MSG(token >= 0 && token < vocab_size_, "accepted token id out of vocab range");
  window_.Accept(token);
}

void Sampler::Reset() {
  window_.Reset();
  Seed();
}

size_t Sampler::Draw(size_t n, double total) {
  const double target = Uniform01(rng_) * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += candidates_[i].prob;
    if (target < cumulative) return i;
  }
  // Rounding left target at the very top of the range: the last positive candidate wins.
  size_t last = n - 1;
  while (last > 0 && candidates_[last].prob == 0.0f) --last;
  return last;
}

int32_t Sampler::Sample(std::span<float> logits) {
  STREAMD_CHECK_MSG(logits.size() == static_cast<size_t>(vocab_size_), "logits size != vocab");
  if (use_penalties_) {
    window_.Apply(logits, params_.repetition_penalty, params_.presence_penalty,
                  params_.frequency_penalty);
  }
  const float temperature = params_.temperature;
  if (temperature == 0.0f || top_k_ == 1) return Argmax(logits);

  const size_t vocab = static_cast<size_t>(vocab_size_);
  if (candidates_.empty()) {
    const size_t k = static_cast<size_t>(top_k_);
    candidates_.resize(top_k_ == 0 ? vocab : std::min(vocab, 2 * k + kTopKSlack));
  }
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;
  // With top-p off, nothing needs the mass below the min-p cut.
  float log_floor = kLogNegligible;
  if (use_min_p && !use_top_p) {
    log_floor = std::max(log_floor, std::log(params_.min_p) - kMinPPrefilterSlack);
  }

  // Pass 1: candidates and the max logit. The top-k contain the max, so that path needs no
  // separate argmax pass; it drops the candidates below the floor afterwards.
  size_t n = 0;
  float max_logit = 0.0f;
  if (top_k_ > 0) {
    n = CollectTopK(logits, static_cast<size_t>(top_k_), kLowestFinite, candidates_);
    if (n == 0) return 0;  // every logit is -inf or NaN
    const auto best = std::min_element(
        candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n), Better);
    max_logit = best->logit;
    if (!std::isfinite(max_logit)) return best->id;  // +inf takes all the mass
    const float floor = max_logit + temperature * log_floor;
    n = static_cast<size_t>(
        std::partition(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n),
                       [floor](const SamplingCandidate& c) { return c.logit >= floor; }) -
        candidates_.begin());
  } else {
    const int32_t best = Argmax(logits);
    max_logit = logits[static_cast<size_t>(best)];
    if (!std::isfinite(max_logit)) return best;  // all -inf/NaN (best is 0), or +inf
    n = CollectAtLeast(logits, max_logit + temperature * log_floor, candidates_);
  }
  const std::span<SamplingCandidate> candidates(candidates_.data(), n);

  // Pass 2: p relative to the max, and the mass Z of the top-k survivors. Divide rather than
  // multiply by 1/T: for a denormal T, 1/T is inf and 0 * inf is NaN. Four partial sums
  // break the add-latency chain that otherwise bounds this loop over ~vocab candidates.
  double partial_z[4] = {0.0, 0.0, 0.0, 0.0};
  for (size_t i = 0; i < n; ++i) {
    SamplingCandidate& c = candidates[i];
    c.prob = std::exp((c.logit - max_logit) / temperature);
    partial_z[i % 4] += c.prob;
  }
  const double z = (partial_z[0] + partial_z[1]) + (partial_z[2] + partial_z[3]);

  // min-p, then top-p within the min-p survivors: a prefix of them is both prefixes' overlap.
  const size_t kept = use_min_p ? PartitionMinP(candidates, params_.min_p) : n;
  double total = 0.0;
  size_t drawn_from = kept;
  if (use_top_p) {
    drawn_from =
        SelectNucleus(candidates.first(kept), static_cast<double>(params_.top_p) * z, &total);
  } else if (use_min_p) {
    for (size_t i = 0; i < kept; ++i) total += candidates[i].prob;
  } else {
    total = z;
  }
  return candidates_[Draw(drawn_from, total)].id;
}

}  // namespace streamd
