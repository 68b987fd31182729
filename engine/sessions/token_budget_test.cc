#include "engine/sessions/token_budget.h"

#include <gtest/gtest.h>

#include <random>

namespace streamd {
namespace {

using Clock = TokenBudget::Clock;
using std::chrono::milliseconds;

TEST(TokenBudgetTest, ABucketStartsFullRefillsAtItsRateAndRefusesBelowZero) {
  TokenBudget budget;
  const Clock::time_point t0 = Clock::now();
  // 100 tokens/s: a burst of 10 s = 1,000 tokens.
  EXPECT_TRUE(budget.Check("acme", 100, "append", t0).ok());
  budget.Charge("acme", 100, 1000, t0);
  EXPECT_TRUE(budget.Check("acme", 100, "append", t0).ok());  // exactly empty, not below
  budget.Charge("acme", 100, 50, t0);
  const Status over = budget.Check("acme", 100, "generate", t0);
  ASSERT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("generate: tenant acme is over its quota tokens_per_second = 100"),
            std::string::npos)
      << over.message();
  EXPECT_NE(over.message().find("retry in 0.5 s"), std::string::npos) << over.message();
  // 0.5 s later the 50 are paid back.
  EXPECT_TRUE(budget.Check("acme", 100, "append", t0 + milliseconds(500)).ok());
  // Other tenants and unlimited rates are not affected.
  EXPECT_TRUE(budget.Check("globex", 100, "append", t0).ok());
  budget.Charge("free", 0, 1 << 30, t0);
  EXPECT_TRUE(budget.Check("free", 0, "append", t0).ok());
  // Refill stops at the burst: a long idle time does not bank more than 10 s.
  const Clock::time_point later = t0 + std::chrono::hours(1);
  budget.Charge("acme", 100, 1001, later);
  EXPECT_FALSE(budget.Check("acme", 100, "append", later).ok());
}

TEST(TokenBudgetTest, OverAnyStretchTheAdmittedRateIsTheQuotaPlusOneBurst) {
  // A client that sends whenever allowed, random amounts at random times (seeded, printed).
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  TokenBudget budget;
  constexpr int32_t kRate = 200;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point t = t0;
  int64_t admitted = 0;
  int64_t largest = 0;
  for (int i = 0; i < 20000; ++i) {
    t += milliseconds(rng() % 20);
    if (!budget.Check("t", kRate, "append", t).ok()) continue;
    const int64_t n = 1 + rng() % 300;
    largest = std::max(largest, n);
    budget.Charge("t", kRate, n, t);
    admitted += n;
  }
  const double seconds = std::chrono::duration<double>(t - t0).count();
  // At most the refill over the stretch, the starting burst, and one overdraw.
  EXPECT_LE(admitted, kRate * seconds + TokenBudget::kBurstSeconds * kRate + largest);
  // And the client was not starved: it got most of the rate.
  EXPECT_GE(admitted, 0.9 * kRate * seconds);
}

}  // namespace
}  // namespace streamd
