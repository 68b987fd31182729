// The Sampler's contract beyond its distribution: penalties in place, non-finite logits,
// extreme temperatures, validation, and aborts on broken preconditions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "engine/sampling/sampler.h"
#include "tests/support/sampler_test_util.h"

namespace streamd {
namespace {

using ::streamd::sampling_test::Plain;
using ::streamd::sampling_test::RandomLogits;

std::set<int32_t> DrawSet(Sampler& sampler, std::vector<float>& logits, int draws) {
  std::set<int32_t> drawn;
  for (int i = 0; i < draws; ++i) drawn.insert(sampler.Sample(logits));
  return drawn;
}

// Sample() writes the penalties into the logits, so they can be compared with a reference.
TEST(SamplerContractTest, EachPenaltyMatchesReference) {
  constexpr int32_t kVocab = 300;
  struct Case {
    float repetition, presence, frequency;
  };
  for (const Case& c : {Case{1.5f, 0.0f, 0.0f}, Case{1.0f, 1.0f, 0.0f}, Case{1.0f, 0.0f, 0.7f},
                        Case{1.3f, -0.4f, 0.9f}}) {
    SamplingParams params = Plain(0.0f);
    params.repetition_penalty = c.repetition;
    params.presence_penalty = c.presence;
    params.frequency_penalty = c.frequency;
    params.penalty_last_n = 6;
    Sampler sampler(params, kVocab);
    const std::vector<int32_t> history = {9, 4, 4, 250, 17, 4, 9, 30, 9};  // window: last 6
    for (int32_t t : history) sampler.Accept(t);
    const std::map<int32_t, int> window_counts = {{250, 1}, {17, 1}, {4, 1}, {9, 2}, {30, 1}};
    for (uint32_t trial = 0; trial < 3; ++trial) {
      std::vector<float> logits = RandomLogits(kVocab, 100 + trial);
      for (int32_t t : {4, 9, 250}) logits[static_cast<size_t>(t)] = 6.0f;  // both signs
      logits[17] = -6.0f;
      std::vector<float> expected = logits;
      for (const auto& [token, count] : window_counts) {
        float& l = expected[static_cast<size_t>(token)];
        l = l > 0 ? l / c.repetition : l * c.repetition;
        l -= c.frequency * static_cast<float>(count) + c.presence;
      }
      const int32_t token = sampler.Sample(logits);
      for (int32_t i = 0; i < kVocab; ++i) {
        ASSERT_NEAR(logits[static_cast<size_t>(i)], expected[static_cast<size_t>(i)], 1e-5f)
            << "token " << i;
      }
      EXPECT_EQ(token, std::max_element(expected.begin(), expected.end()) - expected.begin());
    }
  }
}

TEST(SamplerContractTest, NonFiniteLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingParams params = Plain(1.0f);
  {
    std::vector<float> logits = {nan, 0.0f, nan, 0.5f};
    Sampler sampler(params, 4);
    EXPECT_EQ(DrawSet(sampler, logits, 500), (std::set<int32_t>{1, 3}));
  }
  {
    std::vector<float> logits = {-inf, nan, -inf};
    Sampler sampler(params, 3);
    EXPECT_EQ(sampler.Sample(logits), 0);
  }
  {
    std::vector<float> logits = {1.0f, inf, 2.0f, inf};
    Sampler sampler(params, 4);
    EXPECT_EQ(sampler.Sample(logits), 1);
  }
}

TEST(SamplerContractTest, TinyAndHugeTemperatures) {
  std::vector<float> logits = RandomLogits(500, 3);
  const int32_t argmax =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  Sampler cold(Plain(1e-30f), 500);
  EXPECT_EQ(DrawSet(cold, logits, 50), (std::set<int32_t>{argmax}));
  Sampler denormal(Plain(std::numeric_limits<float>::denorm_min()), 500);
  EXPECT_EQ(denormal.Sample(logits), argmax);
  Sampler hot(Plain(100.0f), 500);  // nearly uniform
  EXPECT_GT(DrawSet(hot, logits, 3000).size(), 450u);
}

TEST(SamplerContractTest, CreateValidates) {
  SamplingParams params;
  params.top_p = 1.5f;
  const StatusOr<Sampler> bad = Sampler::Create(params, 100);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "top_p = 1.5 is out of range (0, 1]");
  params.top_p = 0.5f;
  params.top_k = 101;
  EXPECT_FALSE(Sampler::Create(params, 100).ok());
  params.top_k = 100;  // == vocab: same as disabled
  StatusOr<Sampler> good = Sampler::Create(params, 100);
  ASSERT_TRUE(good.ok());
  std::vector<float> logits = RandomLogits(100, 1);
  const int32_t token = good->Sample(logits);
  EXPECT_GE(token, 0);
  EXPECT_LT(token, 100);
}

TEST(SamplerDeathTest, BrokenPreconditionsAbort) {
  SamplingParams params;
  params.temperature = -1.0f;
  EXPECT_DEATH(Sampler(params, 100), "invalid SamplingParams");
  Sampler sampler(SamplingParams{}, 100);
  EXPECT_DEATH(sampler.Accept(100), "out of vocab range");
  std::vector<float> short_logits(99, 0.0f);
  EXPECT_DEATH(sampler.Sample(short_logits), "logits size != vocab");
}

}  // namespace
}  // namespace streamd
