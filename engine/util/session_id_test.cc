#include "engine/util/session_id.h"

#include <gtest/gtest.h>

#include <set>

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

// The text is echoed into a proto string and a log line: printable ASCII only, at most 40 bytes.
TEST(SessionIdTest, ParseQuotesHostileTextSafely) {
  // 39 ASCII bytes, then a two-byte character that a plain 40-byte cut would split.
  const std::string split = std::string(39, 'a') + "\xc3\xa9tail";
  const Status cut = SessionId::Parse(split, "resume.session_id").status();
  EXPECT_EQ(cut.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.message().find("\\xc3...\" is not a session id"), std::string::npos)
      << cut.message();
  EXPECT_NE(cut.message().find("it has 45 bytes"), std::string::npos) << cut.message();
  const Status control = SessionId::Parse("0123456789abcdef0123456789abcd\n\"").status();
  EXPECT_NE(control.message().find("character 30"), std::string::npos) << control.message();
  EXPECT_NE(control.message().find("abcd\\x0a\\x22\" is not a hex digit"), std::string::npos)
      << control.message();
  for (const Status& s : {cut, control}) {
    for (const char c : s.message()) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << static_cast<int>(c) << " in " << s.message();
    }
  }
}

}  // namespace
}  // namespace streamd
