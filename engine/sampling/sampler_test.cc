// The Sampler's output distribution against a plain full-sort reference of the pipeline.
#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "tests/support/sampler_test_util.h"

namespace streamd {
namespace {

using ::streamd::sampling_test::Plain;
using ::streamd::sampling_test::RandomLogits;

constexpr int32_t kBigVocab = 49152;

// Plain reference of the documented pipeline (penalties excluded): full sort, doubles, no
// shortcuts. Returns the probability of every token after all filters.
std::vector<double> ReferenceDistribution(const std::vector<float>& logits,
                                          const SamplingParams& params) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  size_t keep = order.size();
  if (params.top_k > 0) keep = std::min(keep, static_cast<size_t>(params.top_k));
  const double max_logit = logits[static_cast<size_t>(order[0])];
  std::vector<double> p(keep);
  double z = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    p[i] = std::exp((logits[static_cast<size_t>(order[i])] - max_logit) / params.temperature);
    z += p[i];
  }
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += p[i] / z;
      if (cumulative >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::vector<double> result(logits.size(), 0.0);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    if (p[i] >= params.min_p) {  // p[i] is relative to p_max = 1
      result[static_cast<size_t>(order[i])] = p[i];
      total += p[i];
    }
  }
  for (double& r : result) r /= total;
  return result;
}

std::set<int32_t> Support(const std::vector<double>& distribution) {
  std::set<int32_t> support;
  for (size_t i = 0; i < distribution.size(); ++i) {
    if (distribution[i] > 0.0) support.insert(static_cast<int32_t>(i));
  }
  return support;
}

// Penalties are neutral in these tests, so Sample() leaves finite logits as they are and the
// same vector can be reused for every draw.
std::map<int32_t, int> Draw(Sampler& sampler, std::vector<float>& logits, int draws) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits)];
  return counts;
}

std::set<int32_t> Keys(const std::map<int32_t, int>& counts) {
  std::set<int32_t> keys;
  for (const auto& [token, count] : counts) keys.insert(token);
  return keys;
}

// Pearson's statistic; tokens outside the expected support make it infinite.
double ChiSquare(const std::map<int32_t, int>& counts, const std::vector<double>& expected,
                 int draws) {
  double chi2 = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto it = counts.find(static_cast<int32_t>(i));
    const double observed = it == counts.end() ? 0.0 : it->second;
    const double e = expected[i] * draws;
    if (e == 0.0) {
      if (observed > 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    chi2 += (observed - e) * (observed - e) / e;
  }
  return chi2;
}

// About mean + 5 sigma of chi-square with `df` degrees of freedom: a correct sampler passes
// (and the fixed seed makes the outcome deterministic), a wrong distribution does not.
double ChiSquareBound(size_t df) { return df + 5.0 * std::sqrt(2.0 * df); }

TEST(SamplerTest, GreedyIsArgmax) {
  for (uint32_t trial = 0; trial < 5; ++trial) {
    std::vector<float> logits = RandomLogits(kBigVocab, trial);
    const int32_t expected =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    Sampler sampler(Plain(0.0f), kBigVocab);
    EXPECT_EQ(sampler.Sample(logits), expected);
  }
}

// IsPlainArgmax is the promise a backend relies on when it picks ids on the device: for any
// params it accepts, the sampler draws the first index of the largest raw logit, and with a
// penalty switched on it is not accepted (the penalised argmax may differ).
TEST(SamplerTest, IsPlainArgmaxMeansTheSamplerDrawsTheRawArgmax) {
  std::mt19937 rng(11);
  int accepted = 0;
  for (uint32_t trial = 0; trial < 200; ++trial) {
    SamplingParams p;
    p.temperature = rng() % 2 == 0 ? 0.0f : 0.7f;
    p.top_k = static_cast<int32_t>(rng() % 3);  // 0 (off), 1, 2
    p.repetition_penalty = rng() % 4 == 0 ? 1.3f : 1.0f;
    p.presence_penalty = rng() % 4 == 0 ? 0.5f : 0.0f;
    p.penalty_last_n = rng() % 5 == 0 ? 0 : 64;
    p.seed = trial + 1;
    std::vector<float> logits = RandomLogits(kBigVocab, 1000 + trial);
    const int32_t argmax =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    Sampler sampler(p, kBigVocab);
    for (int32_t t = 0; t < 64; ++t) sampler.Accept(argmax);  // the penalties would bite
    const int32_t drawn = sampler.Sample(logits);
    if (IsPlainArgmax(p)) {
      ++accepted;
      EXPECT_EQ(drawn, argmax) << "trial " << trial;
    }
  }
  EXPECT_GT(accepted, 20);
  SamplingParams penalised;
  penalised.temperature = 0.0f;
  penalised.repetition_penalty = 1.1f;
  EXPECT_FALSE(IsPlainArgmax(penalised));
  penalised.penalty_last_n = 0;  // a window of nothing: neutral again
  EXPECT_TRUE(IsPlainArgmax(penalised));
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
  Sampler greedy(Plain(0.0f), 5);
  EXPECT_EQ(greedy.Sample(logits), 1);
  SamplingParams top1 = Plain(1.0f);
  top1.top_k = 1;
  Sampler sampler(top1, 5);
  EXPECT_EQ(sampler.Sample(logits), 1);
}

TEST(SamplerTest, SameSeedSameDrawsAndResetReplays) {
  std::vector<float> logits = RandomLogits(1000, 7, 0.5f);
  SamplingParams params;  // defaults: top-k 40, top-p 0.95, min-p 0.05
  params.seed = 1234;
  Sampler a(params, 1000);
  Sampler b(params, 1000);
  std::vector<int32_t> first;
  for (int i = 0; i < 500; ++i) {
    first.push_back(a.Sample(logits));
    ASSERT_EQ(first.back(), b.Sample(logits)) << "draw " << i;
  }
  a.Reset();
  for (int i = 0; i < 500; ++i) ASSERT_EQ(a.Sample(logits), first[static_cast<size_t>(i)]);
}

TEST(SamplerTest, DifferentSeedsDiffer) {
  std::vector<float> logits(1000, 0.0f);  // uniform: any two streams almost surely differ
  SamplingParams params = Plain(1.0f);
  params.seed = 1;
  Sampler a(params, 1000);
  params.seed = 2;
  Sampler b(params, 1000);
  params.seed = 0;  // random_device
  Sampler c(params, 1000);
  int same_ab = 0;
  int same_ac = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = a.Sample(logits);
    same_ab += x == b.Sample(logits);
    same_ac += x == c.Sample(logits);
  }
  EXPECT_LT(same_ab, 10);
  EXPECT_LT(same_ac, 10);
}

TEST(SamplerTest, FrequenciesMatchSoftmaxOverTemperature) {
  const std::vector<float> base = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 0.25f};
  constexpr int kDraws = 20000;
  for (float temperature : {0.7f, 1.0f, 2.5f}) {
    std::vector<float> logits = base;
    Sampler sampler(Plain(temperature), 8);
    const std::map<int32_t, int> counts = Draw(sampler, logits, kDraws);
    const std::vector<double> expected = ReferenceDistribution(base, Plain(temperature));
    const double chi2 = ChiSquare(counts, expected, kDraws);
    EXPECT_LT(chi2, ChiSquareBound(7)) << "T " << temperature;
    // Power: the same counts reject a distribution with the temperature ignored or doubled.
    for (float wrong : {temperature * 0.8f, temperature * 1.25f}) {
      const double wrong_chi2 =
          ChiSquare(counts, ReferenceDistribution(base, Plain(wrong)), kDraws);
      EXPECT_GT(wrong_chi2, ChiSquareBound(7)) << "T " << temperature << " vs " << wrong;
    }
  }
}

TEST(SamplerTest, CombinedFiltersMatchReferenceDistribution) {
  const std::vector<float> base = RandomLogits(24, 99, 1.0f);
  constexpr int kDraws = 20000;
  struct Case {
    int32_t top_k;
    float top_p;
    float min_p;
  };
  for (const Case& c : {Case{10, 0.9f, 0.05f}, Case{0, 0.8f, 0.0f}, Case{16, 1.0f, 0.2f},
                        Case{0, 0.7f, 0.3f}, Case{6, 0.97f, 0.0f}}) {
    SamplingParams params = Plain(0.9f);
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    std::vector<float> logits = base;
    Sampler sampler(params, 24);
    const std::map<int32_t, int> counts = Draw(sampler, logits, kDraws);
    const std::vector<double> expected = ReferenceDistribution(base, params);
    const std::set<int32_t> support = Support(expected);
    EXPECT_EQ(Keys(counts), support) << "k " << c.top_k << " p " << c.top_p;
    EXPECT_LT(ChiSquare(counts, expected, kDraws), ChiSquareBound(support.size() - 1))
        << "k " << c.top_k << " p " << c.top_p << " min_p " << c.min_p;
  }
}

TEST(SamplerTest, TopKNeverLeavesTheKBest) {
  std::vector<float> logits = RandomLogits(kBigVocab, 5, 1.0f);
  for (int32_t k : {5, 40, 700}) {
    SamplingParams params = Plain(3.0f);  // hot, so low-ranked survivors do get drawn
    params.top_k = k;
    Sampler sampler(params, kBigVocab);
    const std::set<int32_t> support = Support(ReferenceDistribution(logits, params));
    ASSERT_EQ(support.size(), static_cast<size_t>(k));
    const std::set<int32_t> drawn = Keys(Draw(sampler, logits, 1500));
    EXPECT_TRUE(std::includes(support.begin(), support.end(), drawn.begin(), drawn.end()));
    if (k <= 40) {
      EXPECT_EQ(drawn, support) << "k " << k;
    }
  }
}

TEST(SamplerTest, TopKKeepsTiesDeterministically) {
  // Six tokens tie for the best logit; top-3 must keep the three lowest ids of them.
  std::vector<float> logits(5000, -1.0f);
  for (int32_t id : {4000, 10, 2500, 777, 3, 4999}) logits[static_cast<size_t>(id)] = 1.0f;
  SamplingParams params = Plain(1.0f);
  params.top_k = 3;
  Sampler sampler(params, 5000);
  EXPECT_EQ(Keys(Draw(sampler, logits, 500)), (std::set<int32_t>{3, 10, 777}));
}

TEST(SamplerTest, TopPKeepsTheMinimalNucleus) {
  // p = {0.5, 0.3, 0.1, 0.05, 0.05} at T = 1.
  const std::vector<float> base = {std::log(0.05f), std::log(0.3f), std::log(0.05f), std::log(0.5f),
                                   std::log(0.1f)};
  struct Case {
    float top_p;
    int32_t top_k;
    std::set<int32_t> nucleus;
  };
  for (const Case& c : {Case{0.4f, 0, {3}}, Case{0.75f, 0, {3, 1}}, Case{0.85f, 0, {3, 1, 4}},
                        Case{0.93f, 0, {3, 1, 4, 0}}, Case{0.99f, 0, {0, 1, 2, 3, 4}},
                        // Normalized over the top-3 survivors {.5,.3,.1}/.9: .556, .889, 1.
                        Case{0.85f, 3, {3, 1}}}) {
    SamplingParams params = Plain(1.0f);
    params.top_p = c.top_p;
    params.top_k = c.top_k;
    std::vector<float> logits = base;
    Sampler sampler(params, 5);
    EXPECT_EQ(Keys(Draw(sampler, logits, 4000)), c.nucleus) << "top_p " << c.top_p;
  }
}

// The big-vocab wiring of top-p (bucketed selection over all 49152 tokens); the selection's
// edge cases are tested exactly in candidate_filters_test.cc.
TEST(SamplerTest, TopPOnBigVocabMatchesReference) {
  for (size_t nucleus : {1u, 161u}) {
    std::vector<float> logits = RandomLogits(kBigVocab, 11, 1.0f);
    for (float& l : logits) l = -8.0f + l;
    // A near-flat head of 200 tokens at scattered ids holds most of the mass.
    std::mt19937 rng(static_cast<uint32_t>(nucleus));
    std::vector<int32_t> head(kBigVocab);
    std::iota(head.begin(), head.end(), 0);
    std::shuffle(head.begin(), head.end(), rng);
    for (size_t j = 0; j < 200; ++j) {
      logits[static_cast<size_t>(head[j])] = 5.0f - 0.002f * static_cast<float>(j);
    }
    SamplingParams params = Plain(1.0f);
    // Place top_p halfway between the mass of the best `nucleus - 1` and `nucleus` tokens.
    std::vector<double> full = ReferenceDistribution(logits, params);
    double before = 0.0;
    for (size_t j = 0; j + 1 < nucleus; ++j) before += full[static_cast<size_t>(head[j])];
    const double after = before + full[static_cast<size_t>(head[nucleus - 1])];
    params.top_p = static_cast<float>((before + after) / 2.0);
    const std::set<int32_t> support = Support(ReferenceDistribution(logits, params));
    ASSERT_EQ(support.size(), nucleus);
    Sampler sampler(params, kBigVocab);
    EXPECT_EQ(Keys(Draw(sampler, logits, nucleus == 1 ? 20 : 2500)), support)
        << "nucleus " << nucleus;
  }
}

TEST(SamplerTest, MinPKeepsTokensNearTheMax) {
  // p relative to max = {1, 0.6, 0.2, 0.1, 0.1}.
  const std::vector<float> base = {std::log(0.5f), std::log(0.3f), std::log(0.1f), std::log(0.05f),
                                   std::log(0.05f)};
  for (const auto& [min_p, expected] : std::vector<std::pair<float, std::set<int32_t>>>{
           {0.15f, {0, 1, 2}}, {0.25f, {0, 1}}, {0.05f, {0, 1, 2, 3, 4}}, {1.0f, {0}}}) {
    SamplingParams params = Plain(1.0f);
    params.min_p = min_p;
    std::vector<float> logits = base;
    Sampler sampler(params, 5);
    EXPECT_EQ(Keys(Draw(sampler, logits, 4000)), expected) << "min_p " << min_p;
  }
}

TEST(SamplerTest, MinPOnBigVocabMatchesReference) {
  std::vector<float> logits = RandomLogits(kBigVocab, 21, 1.0f);
  for (float min_p : {0.3f, 0.1f}) {
    SamplingParams params = Plain(0.8f);
    params.min_p = min_p;
    const std::vector<double> expected = ReferenceDistribution(logits, params);
    Sampler sampler(params, kBigVocab);
    constexpr int kDraws = 3000;
    const std::map<int32_t, int> counts = Draw(sampler, logits, kDraws);
    const std::set<int32_t> support = Support(expected);
    EXPECT_EQ(Keys(counts), support) << "min_p " << min_p;
    EXPECT_LT(ChiSquare(counts, expected, kDraws), ChiSquareBound(support.size() - 1));
  }
}

}  // namespace
}  // namespace streamd
