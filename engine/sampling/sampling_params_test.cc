#include "engine/sampling/sampling_params.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace streamd {
namespace {

// Returns the error message, or "OK".
std::string Check(const SamplingParams& params) {
  const Status status = ValidateSamplingParams(params);
  if (status.ok()) return "OK";
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  return status.message();
}

TEST(SamplingParamsTest, DefaultsAndBoundsAreValid) {
  EXPECT_EQ(Check({}), "OK");
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 10.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.penalty_last_n = 0;
  EXPECT_EQ(Check(p), "OK");
  p.temperature = 100.0f;
  p.min_p = 1.0f;
  p.penalty_last_n = 1 << 20;
  EXPECT_EQ(Check(p), "OK");
}

TEST(SamplingParamsTest, MessagesNameTheFieldAndTheLimit) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_EQ(Check(p), "top_p = 1.5 is out of range (0, 1]");
  p.top_p = 0.0f;
  EXPECT_EQ(Check(p), "top_p = 0 is out of range (0, 1]");

  p = {};
  p.temperature = -0.5f;
  EXPECT_EQ(Check(p), "temperature = -0.5 is out of range [0, 100]");
  p.temperature = 100.5f;
  EXPECT_EQ(Check(p), "temperature = 100.5 is out of range [0, 100]");

  p = {};
  p.top_k = -1;
  EXPECT_EQ(Check(p), "top_k = -1 must be >= 0 (0 disables top-k)");

  p = {};
  p.min_p = 1.25f;
  EXPECT_EQ(Check(p), "min_p = 1.25 is out of range [0, 1]");

  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_EQ(Check(p), "repetition_penalty = 0 is out of range (0, 10]");
  p.repetition_penalty = 11.0f;
  EXPECT_EQ(Check(p), "repetition_penalty = 11 is out of range (0, 10]");

  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_EQ(Check(p), "presence_penalty = 2.5 is out of range [-2, 2]");

  p = {};
  p.frequency_penalty = -3.0f;
  EXPECT_EQ(Check(p), "frequency_penalty = -3 is out of range [-2, 2]");

  p = {};
  p.penalty_last_n = (1 << 20) + 1;
  EXPECT_EQ(Check(p), "penalty_last_n = 1048577 is out of range [0, 1048576]");
  p.penalty_last_n = -1;
  EXPECT_EQ(Check(p), "penalty_last_n = -1 is out of range [0, 1048576]");
}

TEST(SamplingParamsTest, NonFiniteFloatsAreRejected) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingParams p;
  p.temperature = nan;
  EXPECT_EQ(Check(p), "temperature = nan is out of range [0, 100]");
  p.temperature = inf;
  EXPECT_EQ(Check(p), "temperature = inf is out of range [0, 100]");
  p = {};
  p.top_p = nan;
  EXPECT_EQ(Check(p), "top_p = nan is out of range (0, 1]");
  p = {};
  p.min_p = nan;
  EXPECT_EQ(Check(p), "min_p = nan is out of range [0, 1]");
  p = {};
  p.repetition_penalty = nan;
  EXPECT_EQ(Check(p), "repetition_penalty = nan is out of range (0, 10]");
  p = {};
  p.presence_penalty = -inf;
  EXPECT_EQ(Check(p), "presence_penalty = -inf is out of range [-2, 2]");
  p = {};
  p.frequency_penalty = nan;
  EXPECT_EQ(Check(p), "frequency_penalty = nan is out of range [-2, 2]");
}

TEST(SamplingParamsTest, VocabOverloadBoundsTopK) {
  SamplingParams p;
  p.top_k = 100;
  EXPECT_TRUE(ValidateSamplingParams(p, 100).ok());
  const Status status = ValidateSamplingParams(p, 99);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "top_k = 100 exceeds vocab_size 99");
  EXPECT_EQ(ValidateSamplingParams(p, 0).message(), "vocab_size = 0 must be > 0");
  // Field checks still run in the overload.
  p.top_p = 2.0f;
  EXPECT_EQ(ValidateSamplingParams(p, 1000).message(), "top_p = 2 is out of range (0, 1]");
}

TEST(SamplingParamsTest, PenaltiesAreNeutral) {
  SamplingParams p;
  EXPECT_TRUE(PenaltiesAreNeutral(p));
  p.presence_penalty = 0.5f;
  EXPECT_FALSE(PenaltiesAreNeutral(p));
  p.penalty_last_n = 0;
  EXPECT_TRUE(PenaltiesAreNeutral(p));
}

}  // namespace
}  // namespace streamd
