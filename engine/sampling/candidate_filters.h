// The selection steps of sampling, on arrays of candidates: top-k, min-p and top-p (nucleus).
//
// Each keeps a set of the best candidates under Better() (larger logit first, ties -> lower
// id), a total order, so every step selects the same set on every run and platform. None
// sorts more than it must: these run once per generated token over vocabularies of ~50k.
// All functions work in place and never allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace streamd {

struct SamplingCandidate {
  float logit;
  int32_t id;
  float prob;  // unnormalized: exp((logit - max_logit) / T), so the best candidate has 1
};

inline bool Better(const SamplingCandidate& a, const SamplingCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Writes {logit, id, 0} for every token with logit >= floor into out[0, n), in id order, and
// returns n. NaN never passes. out: [>= logits.size()].
size_t CollectAtLeast(std::span<const float> logits, float floor, std::span<SamplingCandidate> out);

// Writes the k best tokens with logit >= floor (fewer if fewer pass) into out[0, n), unordered,
// and returns n. NaN never passes. Needs k < out.size(); a larger buffer means fewer
// compactions. One pass: most tokens cost a single comparison against the running k-th best.
size_t CollectTopK(std::span<const float> logits, size_t k, float floor,
                   std::span<SamplingCandidate> out);

// Moves the candidates with prob >= min_p (relative to the best, whose prob is 1) to the front
// and returns their count.
size_t PartitionMinP(std::span<SamplingCandidate> candidates, float min_p);

// Moves the smallest set of best candidates whose prob sums to >= target into [0, m), in no
// particular order, and returns m (all of them if the total is below target); *mass = that
// sum. Candidates past m are dropped: [m, size) is left unspecified.
// Logit buckets narrow the search to the boundary first, so only the candidates that share
// the boundary's bucket get sorted, not the whole nucleus.
size_t SelectNucleus(std::span<SamplingCandidate> candidates, double target, double* mass);

}  // namespace streamd
