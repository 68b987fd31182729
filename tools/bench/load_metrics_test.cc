#include "tools/bench/load_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace streamd::tools {
namespace {

TEST(PercentileTest, NearestRank) {
  const std::vector<double> v = {5, 1, 4, 2, 3, 6, 7, 8, 9, 10};
  EXPECT_EQ(Percentile(v, 50), 5);
  EXPECT_EQ(Percentile(v, 90), 9);
  EXPECT_EQ(Percentile(v, 99), 10);
  EXPECT_EQ(Percentile({7}, 99), 7);
  EXPECT_EQ(Percentile({3, 1}, 0), 1);
}

TEST(MedianTest, OddEvenEmpty) {
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 2, 3}), 2.5);
  EXPECT_EQ(Median({}), 0);
}

// Two sessions: A's tokens at 1.0, 1.1, 1.2 s; B's (later prefill) at 1.5, 1.6, 1.7, 1.8 s.
TEST(LoadMetricsTest, DecodePhaseSpansFirstFirstTokenToLastToken) {
  auto m = ComputeLoadMetrics({{1.0, 1.1, 1.2}, {1.5, 1.6, 1.7, 1.8}}, 300);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_DOUBLE_EQ(m->decode_tokens, 2 + 3);
  EXPECT_DOUBLE_EQ(m->decode_wall_s, 0.8);  // 1.8 - 1.0
  EXPECT_DOUBLE_EQ(m->decode_tokens_per_s, 5 / 0.8);
  EXPECT_DOUBLE_EQ(m->total_wall_s, 1.8);
  EXPECT_DOUBLE_EQ(m->output_tokens_per_s, 7 / 1.8);
  EXPECT_DOUBLE_EQ(m->prompt_tokens_per_s, 300 / 1.5);          // until the last first token
  EXPECT_NEAR(m->session_decode_tokens_per_s_p50, 10.0, 1e-9);  // both decode at 10 tok/s
  EXPECT_DOUBLE_EQ(m->ttft_ms.p50, 1000);
  EXPECT_DOUBLE_EQ(m->ttft_ms.p99, 1500);
  EXPECT_NEAR(m->itl_ms.p50, 100, 1e-9);
  EXPECT_NEAR(m->itl_ms.p99, 100, 1e-9);
}

// 101 tokens 10 ms apart, with a 1 s stall before the last `stalls` of them.
std::vector<double> Stalled(int stalls) {
  std::vector<double> t;
  for (int k = 0; k <= 100; ++k) t.push_back(0.01 * k + std::max(0, k - (100 - stalls)));
  return t;
}

// The steady window starts when the last session gets its first token and ends when the first
// session is done: tokens inside it, over its length.
TEST(LoadMetricsTest, SteadyDecodeCountsOnlyTheWindowWhereEverySessionDecodes) {
  // Session 0's tokens come every 0.1 s from t=1 to t=3; session 1's (prefilled later) from
  // t=2 to t=4. Window (2, 3]: each session has its tokens at 2.1, ..., 3.0 in it, 10 each.
  std::vector<double> s0, s1;
  for (int k = 0; k <= 20; ++k) s0.push_back(1.0 + 0.1 * k);
  for (int k = 0; k <= 20; ++k) s1.push_back(2.0 + 0.1 * k);
  auto m = ComputeLoadMetrics({s0, s1}, 100);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NEAR(m->steady_decode_wall_s, 1.0, 1e-9);
  EXPECT_NEAR(m->steady_decode_tokens, 20.0, 1e-9);
  EXPECT_NEAR(m->steady_decode_tokens_per_s, 20.0, 1e-9);
  // The whole-phase figure also spans session 1's prefill: 40 tokens over 3 s.
  EXPECT_NEAR(m->decode_tokens_per_s, 40.0 / 3.0, 1e-9);
  // Sessions that never decode together: no steady window.
  auto apart = ComputeLoadMetrics({{0.0, 1.0}, {2.0, 3.0}}, 10);
  ASSERT_TRUE(apart.ok());
  EXPECT_EQ(apart->steady_decode_tokens_per_s, 0.0);
}

TEST(LoadMetricsTest, InterTokenTailNeedsMoreThanOnePercentOfGapsToMoveP99) {
  auto one = ComputeLoadMetrics({Stalled(1)}, 1);  // 1 slow gap of 100
  ASSERT_TRUE(one.ok());
  EXPECT_NEAR(one->itl_ms.p50, 10, 1e-6);
  EXPECT_NEAR(one->itl_ms.p99, 10, 1e-6);          // rank 99 of 100
  auto two = ComputeLoadMetrics({Stalled(2)}, 1);  // 2 slow gaps of 100
  ASSERT_TRUE(two.ok());
  EXPECT_NEAR(two->itl_ms.p90, 10, 1e-6);
  EXPECT_NEAR(two->itl_ms.p99, 1010, 1e-6);
}

TEST(LoadMetricsTest, RejectsWhatHasNoDecodePhase) {
  EXPECT_FALSE(ComputeLoadMetrics({}, 0).ok());
  EXPECT_FALSE(ComputeLoadMetrics({{1.0}}, 0).ok());
  EXPECT_FALSE(ComputeLoadMetrics({{1.0, 1.0}}, 0).ok());
}

}  // namespace
}  // namespace streamd::tools
