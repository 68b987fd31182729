#include "engine/sampling/penalty_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace streamd {
namespace {

struct Penalties {
  const char* name;
  float repetition = 1.0f;
  float presence = 0.0f;
  float frequency = 0.0f;
};

// Keeps gtest from dumping the struct's bytes (a pointer among them) into test names.
void PrintTo(const Penalties& penalties, std::ostream* os) { *os << penalties.name; }

// Plain reference: count the last `last_n` tokens with a map, then penalize each distinct one.
std::vector<float> Reference(std::vector<float> logits, const std::vector<int32_t>& history,
                             int32_t last_n, const Penalties& pen) {
  std::map<int32_t, int> counts;
  const size_t begin = history.size() > static_cast<size_t>(last_n)
                           ? history.size() - static_cast<size_t>(last_n)
                           : 0;
  for (size_t i = begin; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [token, count] : counts) {
    float& l = logits[static_cast<size_t>(token)];
    if (l > 0) {
      l /= pen.repetition;
    } else {
      l *= pen.repetition;
    }
    l -= static_cast<float>(count) * pen.frequency;
    l -= pen.presence;
  }
  return logits;
}

class PenaltyWindowTest : public ::testing::TestWithParam<Penalties> {};

TEST_P(PenaltyWindowTest, MatchesReferenceOnFreshRandomLogits) {
  constexpr int32_t kVocab = 97;
  std::mt19937 rng(1234);
  std::normal_distribution<float> logit_dist(0.0f, 3.0f);
  // Few distinct tokens so that repeats and evictions both happen often.
  std::uniform_int_distribution<int32_t> token_dist(0, 11);
  for (int32_t last_n : {1, 5, 64}) {
    PenaltyWindow window(last_n, kVocab);
    std::vector<int32_t> history;
    for (int step = 0; step < 200; ++step) {
      std::vector<float> logits(kVocab);
      for (float& l : logits) l = logit_dist(rng);
      const std::vector<float> expected = Reference(logits, history, last_n, GetParam());
      window.Apply(logits, GetParam().repetition, GetParam().presence, GetParam().frequency);
      for (int32_t i = 0; i < kVocab; ++i) {
        // The reference subtracts in two steps, the window in one: allow rounding.
        ASSERT_NEAR(logits[static_cast<size_t>(i)], expected[static_cast<size_t>(i)], 1e-5f)
            << "last_n " << last_n << " step " << step << " token " << i;
      }
      const int32_t token = token_dist(rng);
      window.Accept(token);
      history.push_back(token);
      EXPECT_EQ(window.size(), std::min(history.size(), static_cast<size_t>(last_n)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EachPenalty, PenaltyWindowTest,
                         ::testing::Values(Penalties{"Repetition", 1.3f, 0.0f, 0.0f},
                                           Penalties{"RepetitionBelowOne", 0.7f, 0.0f, 0.0f},
                                           Penalties{"Presence", 1.0f, 0.6f, 0.0f},
                                           Penalties{"Frequency", 1.0f, 0.0f, 0.45f},
                                           Penalties{"NegativeBoth", 1.0f, -1.5f, -0.5f},
                                           Penalties{"All", 1.2f, 0.3f, 0.2f}),
                         [](const ::testing::TestParamInfo<Penalties>& param_info) {
                           return std::string(param_info.param.name);
                         });

TEST(PenaltyWindowTest, ResetForgetsHistory) {
  PenaltyWindow window(8, 10);
  for (int32_t t : {1, 2, 2, 3}) window.Accept(t);
  window.Reset();
  EXPECT_EQ(window.size(), 0u);
  std::vector<float> logits(10, 1.0f);
  window.Apply(logits, 2.0f, 1.0f, 1.0f);
  EXPECT_EQ(logits, std::vector<float>(10, 1.0f));
  window.Accept(4);
  window.Apply(logits, 2.0f, 0.0f, 0.0f);
  EXPECT_FLOAT_EQ(logits[4], 0.5f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
}

TEST(PenaltyWindowTest, ZeroWindowIsANoOp) {
  PenaltyWindow window(0, 10);
  window.Accept(3);
  EXPECT_EQ(window.size(), 0u);
  std::vector<float> logits(10, 1.0f);
  window.Apply(logits, 2.0f, 1.0f, 1.0f);
  EXPECT_EQ(logits, std::vector<float>(10, 1.0f));
}

TEST(PenaltyWindowDeathTest, OutOfRangeTokenAborts) {
  PenaltyWindow window(4, 10);
  EXPECT_DEATH(window.Accept(10), "out of vocab range");
  EXPECT_DEATH(window.Accept(-1), "out of vocab range");
}

}  // namespace
}  // namespace streamd
