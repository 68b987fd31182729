#include "engine/util/session_id.h"

#include <set>

#include <gtest/gtest.h>

namespace streamd {
namespace {

TEST(SessionIdTest, RandomIdsAreDistinctValidAndRoundTripThroughText) {
  std::set<SessionId> seen;
  for (int i = 0; i < 10000; ++i) {
    const SessionId id = SessionId::Random();
    ASSERT_TRUE(id.valid());
    ASSERT_TRUE(seen.insert(id).second) << "a repeated id: " << id;
    const std::string text = id.ToString();
    ASSERT_EQ(text.size(), 32u);
    ASSERT_EQ(text.find_first_not_of("0123456789abcdef"), std::string::npos) << text;
    auto parsed = SessionId::Parse(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    ASSERT_EQ(*parsed, id);
  }
  // Every bit is used: across 10,000 ids each of the 128 bit positions is set somewhere and
  // clear somewhere (a generator that left bits fixed would fail here).
  uint64_t or_hi = 0, or_lo = 0, and_hi = ~0ULL, and_lo = ~0ULL;
  for (const SessionId& id : seen) {
    or_hi |= id.hi;
    or_lo |= id.lo;
    and_hi &= id.hi;
    and_lo &= id.lo;
  }
  EXPECT_EQ(or_hi, ~0ULL);
  EXPECT_EQ(or_lo, ~0ULL);
  EXPECT_EQ(and_hi, 0ULL);
  EXPECT_EQ(and_lo, 0ULL);
}

TEST(SessionIdTest, ParseAcceptsEitherCaseAndNamesTheProblem) {
  auto upper = SessionId::Parse("0123456789ABCDEF0123456789abcdef");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(upper->hi, 0x0123456789abcdefULL);
  EXPECT_EQ(upper->lo, 0x0123456789abcdefULL);
  EXPECT_EQ(upper->ToString(), "0123456789abcdef0123456789abcdef");

  auto short_id = SessionId::Parse("7", "resume.session_id");
  EXPECT_EQ(short_id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_id.status().message().find("resume.session_id"), std::string::npos);
  EXPECT_NE(short_id.status().message().find("32 hex digits"), std::string::npos);
  auto bad_char = SessionId::Parse("0123456789abcdef0123456789abcdeg");
  EXPECT_NE(bad_char.status().message().find("character 31"), std::string::npos);
  auto zero = SessionId::Parse(std::string(32, '0'));
  EXPECT_NE(zero.status().message().find("all-zero"), std::string::npos);
  EXPECT_FALSE(SessionId::Parse("").ok());
  EXPECT_FALSE(SessionId::Parse(std::string(33, 'a')).ok());
}

}  // namespace
}  // namespace streamd
