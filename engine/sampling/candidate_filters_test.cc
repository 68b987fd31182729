// Exact tests of the selection steps against a full sort, on awkward sizes and distributions
// (ties, all-equal, skewed, outliers): the sampler's statistical tests cannot see an
// off-by-one at a nucleus edge, these can.
#include "engine/sampling/candidate_filters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace streamd {
namespace {

enum class Shape { kNormal, kQuantized, kFlat, kSkewed, kOutlier };

std::vector<float> MakeLogits(Shape shape, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(n);
  for (size_t i = 0; i < n; ++i) {
    switch (shape) {
      case Shape::kNormal:
        logits[i] = normal(rng);
        break;
      case Shape::kQuantized:  // many ties
        logits[i] = std::round(normal(rng) * 2.0f) / 2.0f;
        break;
      case Shape::kFlat:
        logits[i] = 1.5f;
        break;
      case Shape::kSkewed:  // dense near 0, long tail
        logits[i] = -std::exp(normal(rng));
        break;
      case Shape::kOutlier:
        logits[i] = i == n / 2 ? -1000.0f : 0.01f * normal(rng);
        break;
    }
  }
  return logits;
}

// Every token as a candidate, p relative to the max at T = 1.
std::vector<SamplingCandidate> AllCandidates(const std::vector<float>& logits) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<SamplingCandidate> c;
  for (size_t i = 0; i < logits.size(); ++i) {
    c.push_back({logits[i], static_cast<int32_t>(i), std::exp(logits[i] - max_logit)});
  }
  return c;
}

std::vector<SamplingCandidate> SortedBest(std::vector<SamplingCandidate> c) {
  std::sort(c.begin(), c.end(), Better);
  return c;
}

std::set<int32_t> Ids(const SamplingCandidate* begin, size_t n) {
  std::set<int32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.insert(begin[i].id);
  return ids;
}

const std::vector<size_t> kSizes = {1, 7, 83, 256, 257, 769, 5000, 49152};
const std::vector<Shape> kShapes = {Shape::kNormal, Shape::kQuantized, Shape::kFlat, Shape::kSkewed,
                                    Shape::kOutlier};

TEST(CandidateFiltersTest, CollectTopKMatchesFullSort) {
  for (Shape shape : kShapes) {
    for (size_t n : kSizes) {
      std::vector<float> logits = MakeLogits(shape, n, static_cast<uint32_t>(n));
      if (n > 3) {
        logits[1] = std::numeric_limits<float>::quiet_NaN();
        logits[2] = -std::numeric_limits<float>::infinity();
      }
      // The reference drops NaN/-inf first: NaN would break the sort's ordering.
      std::vector<float> finite;
      for (float l : logits) finite.push_back(std::isfinite(l) ? l : -1e30f);
      std::vector<SamplingCandidate> sorted = SortedBest(AllCandidates(finite));
      std::erase_if(sorted, [](const SamplingCandidate& c) { return c.logit == -1e30f; });
      for (size_t k : {size_t{1}, size_t{2}, size_t{40}, n / 2, n - 1}) {
        if (k == 0 || k >= n) continue;
        for (size_t slack : {size_t{1}, size_t{5}, size_t{512}}) {
          // A tiny buffer recompacts every few tokens: O(n * k). Keep that edge to small k.
          if (slack < 64 && k > 1000) continue;
          std::vector<SamplingCandidate> out(std::min(n, k + slack));
          const size_t got = CollectTopK(logits, k, std::numeric_limits<float>::lowest(), out);
          const std::set<int32_t> expected = Ids(sorted.data(), std::min(k, sorted.size()));
          ASSERT_EQ(got, expected.size());
          EXPECT_EQ(Ids(out.data(), got), expected)
              << "shape " << static_cast<int>(shape) << " n " << n << " k " << k;
        }
      }
    }
  }
}

TEST(CandidateFiltersTest, CollectTopKHonorsTheFloor) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.0f, -1.0f, 2.5f};
  std::vector<SamplingCandidate> out(6);
  EXPECT_EQ(CollectTopK(logits, 4, 2.0f, out), 3u);  // only 3 reach the floor
  EXPECT_EQ(Ids(out.data(), 3), (std::set<int32_t>{1, 3, 5}));
  EXPECT_EQ(CollectTopK(logits, 2, 2.0f, out), 2u);
  EXPECT_EQ(Ids(out.data(), 2), (std::set<int32_t>{1, 5}));
}

TEST(CandidateFiltersTest, CollectAtLeastKeepsIdOrderAndSkipsNaN) {
  const std::vector<float> logits = {0.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 1.0f};
  std::vector<SamplingCandidate> out(4);
  ASSERT_EQ(CollectAtLeast(logits, 1.0f, out), 2u);
  EXPECT_EQ(out[0].id, 2);
  EXPECT_EQ(out[1].id, 3);
}

TEST(CandidateFiltersTest, PartitionMinP) {
  std::vector<SamplingCandidate> c = AllCandidates(MakeLogits(Shape::kNormal, 769, 1));
  std::set<int32_t> expected;
  for (const SamplingCandidate& x : c) {
    if (x.prob >= 0.1f) expected.insert(x.id);
  }
  const size_t kept = PartitionMinP(c, 0.1f);
  EXPECT_EQ(Ids(c.data(), kept), expected);
}

TEST(CandidateFiltersTest, SelectNucleusMatchesFullSort) {
  std::mt19937 rng(5);
  for (Shape shape : kShapes) {
    for (size_t n : kSizes) {
      const std::vector<SamplingCandidate> base =
          AllCandidates(MakeLogits(shape, n, static_cast<uint32_t>(n) + 17));
      const std::vector<SamplingCandidate> sorted = SortedBest(base);
      std::vector<double> prefix(n + 1, 0.0);  // prefix[m] = mass of the best m
      for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + sorted[i].prob;
      // Targets halfway inside the m-th candidate's mass, so the answer is m whatever the
      // summation order; m spans the edges of the direct-sort chunks and the whole range.
      std::vector<size_t> ms = {1, 2, 32, 33, 160, 161, n / 3, n / 2, n - 1, n};
      for (int i = 0; i < 6; ++i) ms.push_back(1 + rng() % n);
      for (size_t m : ms) {
        if (m < 1 || m > n) continue;
        // A target within rounding of a prefix sum has no single right answer: skip m whose
        // own mass is that small (the skewed shape's tail underflows).
        if (prefix[m] - prefix[m - 1] < 1e-9 * prefix[n]) continue;
        const double target = (prefix[m - 1] + prefix[m]) / 2.0;
        std::vector<SamplingCandidate> c = base;
        double mass = 0.0;
        const size_t got = SelectNucleus(c, target, &mass);
        const std::string where = "shape " + std::to_string(static_cast<int>(shape)) + " n " +
                                  std::to_string(n) + " m " + std::to_string(m);
        ASSERT_EQ(got, m) << where;
        EXPECT_EQ(Ids(c.data(), got), Ids(sorted.data(), m)) << where;
        EXPECT_NEAR(mass, prefix[m], 1e-9 * prefix[n]) << where;
      }
    }
  }
}

TEST(CandidateFiltersTest, SelectNucleusSurvivesExtremeRanges) {
  for (float spread : {3e38f, 1e-44f}) {  // hi - lo overflows; kBuckets / (hi - lo) overflows
    std::vector<SamplingCandidate> c;
    for (int32_t i = 0; i < 1000; ++i) {
      const float logit = i % 2 == 0 ? spread : -spread * static_cast<float>(i % 7) / 7.0f;
      c.push_back({logit, i, logit == spread ? 1.0f : 0.001f});
    }
    const std::vector<SamplingCandidate> sorted = SortedBest(c);
    double mass = 0.0;
    const size_t got = SelectNucleus(c, 250.5, &mass);  // 251 of the 500 best, by id
    ASSERT_EQ(got, 251u) << spread;
    EXPECT_EQ(Ids(c.data(), got), Ids(sorted.data(), 251)) << spread;
  }
}

TEST(CandidateFiltersTest, SelectNucleusKeepsAllWhenTargetExceedsTotal) {
  std::vector<SamplingCandidate> c = AllCandidates(MakeLogits(Shape::kNormal, 5000, 3));
  double total = 0.0;
  for (const SamplingCandidate& x : c) total += x.prob;
  double mass = 0.0;
  EXPECT_EQ(SelectNucleus(c, total * 1.01, &mass), c.size());
  EXPECT_NEAR(mass, total, 1e-9 * total);
}

}  // namespace
}  // namespace streamd
