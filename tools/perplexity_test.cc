#include "tools/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace streamd::tools {
namespace {

TEST(TokenNllTest, MatchesLogSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, -1.0f};
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  for (int32_t t = 0; t < 4; ++t) {
    EXPECT_NEAR(TokenNll(logits.data(), 4, t), std::log(z) - logits[t], 1e-12);
  }
}

TEST(TokenNllTest, UniformIsLogVocab) {
  const std::vector<float> logits(49152, 0.25f);
  EXPECT_NEAR(TokenNll(logits.data(), 49152, 17), std::log(49152.0), 1e-9);
}

TEST(TokenNllTest, StableForHugeLogits) {
  // exp(1000) overflows: the max must be subtracted first.
  const std::vector<float> logits = {1000.0f, 1000.0f, -1000.0f};
  EXPECT_NEAR(TokenNll(logits.data(), 3, 0), std::log(2.0), 1e-12);
  EXPECT_TRUE(std::isfinite(TokenNll(logits.data(), 3, 2)));
}

TEST(NllAccumulatorTest, SegmentsAndTotals) {
  NllAccumulator acc(3);
  for (int64_t i = 1; i <= 7; ++i) acc.Add(i, static_cast<double>(i));
  EXPECT_EQ(acc.count(), 7);
  EXPECT_DOUBLE_EQ(acc.MeanNll(), 4.0);
  EXPECT_DOUBLE_EQ(acc.Perplexity(), std::exp(4.0));
  ASSERT_EQ(acc.segments().size(), 3u);
  EXPECT_EQ(acc.segments()[0].begin, 0);
  EXPECT_EQ(acc.segments()[0].count, 2);  // tokens 1, 2: token 0 is never scored
  EXPECT_DOUBLE_EQ(acc.segments()[0].MeanNll(), 1.5);
  EXPECT_EQ(acc.segments()[1].begin, 3);
  EXPECT_EQ(acc.segments()[1].count, 3);
  EXPECT_EQ(acc.segments()[2].count, 2);
  EXPECT_DOUBLE_EQ(acc.segments()[2].Perplexity(), std::exp(6.5));
  EXPECT_EQ(acc.CountFrom(5), 3);
  EXPECT_DOUBLE_EQ(acc.PerplexityFrom(5), std::exp(6.0));
  EXPECT_TRUE(std::isnan(acc.PerplexityFrom(100)));
}

}  // namespace
}  // namespace streamd::tools
