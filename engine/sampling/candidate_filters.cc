#include "engine/sampling/candidate_filters.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kernels/common/check.h"

namespace streamd {
namespace {

// Buckets per narrowing round: 1024 doubles stay on the stack and in L1.
constexpr size_t kBuckets = 1024;
// Ranges up to this size are sorted directly instead of bucketed.
constexpr size_t kDirectSortMax = 256;
// Narrowing rounds before falling back to sorting; each round normally shrinks the range
// ~100x, but skewed logits (one far outlier) can make a round shrink it very little.
constexpr int kMaxNarrowingRounds = 4;
// First chunk of the incremental sort; later chunks grow 4x.
constexpr size_t kFirstSortChunk = 32;

// Smallest and largest logit of a non-empty range. Four independent min/max chains instead of
// one, so the loop is not bound by the latency of a single dependency chain.
void LogitRange(const SamplingCandidate* begin, const SamplingCandidate* end, float* lo,
                float* hi) {
  float lo_lane[4] = {begin->logit, begin->logit, begin->logit, begin->logit};
  float hi_lane[4] = {begin->logit, begin->logit, begin->logit, begin->logit};
  const SamplingCandidate* c = begin;
  for (; c + 4 <= end; c += 4) {
    for (int j = 0; j < 4; ++j) {
      lo_lane[j] = std::min(lo_lane[j], c[j].logit);
      hi_lane[j] = std::max(hi_lane[j], c[j].logit);
    }
  }
  for (; c < end; ++c) {
    lo_lane[0] = std::min(lo_lane[0], c->logit);
    hi_lane[0] = std::max(hi_lane[0], c->logit);
  }
  *lo = std::min({lo_lane[0], lo_lane[1], lo_lane[2], lo_lane[3]});
  *hi = std::max({hi_lane[0], hi_lane[1], hi_lane[2], hi_lane[3]});
}

// Sorts [begin, end) best-first one growing chunk at a time and stops at the first prefix
// whose mass reaches target. Returns the end of that prefix (or end) and updates *mass.
size_t SortUntilMass(SamplingCandidate* c, size_t begin, size_t end, double target, double* mass) {
  size_t chunk = kFirstSortChunk;
  size_t sorted = begin;
  while (sorted < end) {
    const size_t chunk_end = std::min(end, sorted + chunk);
    if (chunk_end < end) std::nth_element(c + sorted, c + chunk_end, c + end, Better);
    std::sort(c + sorted, c + chunk_end, Better);
    for (; sorted < chunk_end; ++sorted) {
      *mass += c[sorted].prob;
      if (*mass >= target) return sorted + 1;
    }
    chunk *= 4;
  }
  return end;
}

}  // namespace

size_t CollectAtLeast(std::span<const float> logits, float floor,
                      std::span<SamplingCandidate> out) {
  STREAMD_CHECK_MSG(out.size() >= logits.size(), "candidate buffer smaller than logits");
  // Branchless: always write, advance only on a pass. Safe because n <= i < out.size().
  SamplingCandidate* buf = out.data();
  size_t n = 0;
  const size_t size = logits.size();
  for (size_t i = 0; i < size; ++i) {
    const float logit = logits[i];
    buf[n] = {logit, static_cast<int32_t>(i), 0.0f};
    n += logit >= floor;
  }
  return n;
}

size_t CollectTopK(std::span<const float> logits, size_t k, float floor,
                   std::span<SamplingCandidate> out) {
  STREAMD_CHECK_MSG(k > 0 && k < out.size(), "top-k buffer must hold more than k");
  SamplingCandidate* buf = out.data();
  const size_t capacity = out.size();
  const size_t size = logits.size();
  size_t n = 0;
  for (size_t i = 0; i < size; ++i) {
    const float logit = logits[i];
    if (!(logit >= floor)) continue;
    buf[n++] = {logit, static_cast<int32_t>(i), 0.0f};
    if (n == capacity) {
      std::nth_element(buf, buf + (k - 1), buf + n, Better);
      n = k;
      // Later tokens have larger ids, so they lose a tie with the k-th best: they must beat
      // its logit strictly. nextafter turns that ">" into the ">=" the loop tests.
      floor = std::nextafter(buf[k - 1].logit, std::numeric_limits<float>::infinity());
    }
  }
  if (n > k) {
    std::nth_element(buf, buf + (k - 1), buf + n, Better);
    n = k;
  }
  return n;
}

size_t PartitionMinP(std::span<SamplingCandidate> candidates, float min_p) {
  const auto middle =
      std::partition(candidates.begin(), candidates.end(),
                     [min_p](const SamplingCandidate& c) { return c.prob >= min_p; });
  return static_cast<size_t>(middle - candidates.begin());
}

size_t SelectNucleus(std::span<SamplingCandidate> candidates, double target, double* mass) {
  SamplingCandidate* c = candidates.data();
  // Invariant: [0, begin) is in the nucleus with mass *mass; [end, size) is outside it.
  size_t begin = 0;
  size_t end = candidates.size();
  *mass = 0.0;
  for (int round = 0; round < kMaxNarrowingRounds && end - begin > kDirectSortMax; ++round) {
    float hi = 0.0f;
    float lo = 0.0f;
    LogitRange(c + begin, c + end, &lo, &hi);
    // Equal logits are ordered by id alone: sort them. A range that overflows, or one so
    // small that its scale does, cannot be bucketed (inf * 0 is NaN): sort those too.
    const float range = hi - lo;
    if (!(range > 0.0f) || !std::isfinite(range)) break;
    const float scale = static_cast<float>(kBuckets) / range;
    if (!std::isfinite(scale)) break;
    // Bucket 0 holds the best logits. The bucket is monotone in the logit (IEEE subtraction
    // and multiplication are monotone), so every bucket is better than the next one.
    // Converts through int32 (one instruction), not size_t (a compare-and-branch sequence on
    // x86); the product lies in [0, kBuckets] up to rounding, so int32 cannot overflow.
    const auto bucket_of = [hi, scale](float logit) {
      const int32_t bucket = static_cast<int32_t>((hi - logit) * scale);
      return static_cast<size_t>(std::min(bucket, static_cast<int32_t>(kBuckets) - 1));
    };
    std::array<double, kBuckets> bucket_mass{};
    for (size_t i = begin; i < end; ++i) bucket_mass[bucket_of(c[i].logit)] += c[i].prob;
    // The boundary bucket: the first one at which the running mass reaches target.
    size_t boundary = kBuckets;
    double before = *mass;
    for (size_t b = 0; b < kBuckets; ++b) {
      if (before + bucket_mass[b] >= target) {
        boundary = b;
        break;
      }
      before += bucket_mass[b];
    }
    if (boundary == kBuckets) {  // the whole range falls short: everything is in
      *mass = before;
      return end;
    }
    // Drop the buckets past the boundary with a branchless compaction (a partition would
    // mispredict on every scattered nucleus member), then split the small remainder.
    size_t kept = begin;
    for (size_t i = begin; i < end; ++i) {
      const SamplingCandidate x = c[i];
      c[kept] = x;
      kept += bucket_of(x.logit) <= boundary;
    }
    SamplingCandidate* inside =
        std::partition(c + begin, c + kept,
                       [&](const SamplingCandidate& x) { return bucket_of(x.logit) < boundary; });
    begin = static_cast<size_t>(inside - c);
    end = kept;
    *mass = before;
  }
  return SortUntilMass(c, begin, end, target, mass);
}

}  // namespace streamd
