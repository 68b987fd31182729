#include "engine/tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/tokenizer/byte_unicode.h"

namespace streamd::tokenizer {
namespace {

std::string Sanitize(std::string_view bytes) {
  std::string out;
  AppendSanitizedUtf8(bytes, /*hold_incomplete_tail=*/false, &out);
  return out;
}

TEST(Utf8Test, DecodesEveryLength) {
  size_t length = 0;
  char32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("A", &length, &cp), Utf8Status::kValid);
  EXPECT_EQ(length, 1u);
  EXPECT_EQ(cp, U'A');
  EXPECT_EQ(DecodeUtf8("\xC3\xA9", &length, &cp), Utf8Status::kValid);  // é
  EXPECT_EQ(cp, U'\u00E9');
  EXPECT_EQ(DecodeUtf8("\xE2\x96\x81", &length, &cp), Utf8Status::kValid);  // ▁
  EXPECT_EQ(cp, U'\u2581');
  EXPECT_EQ(DecodeUtf8("\xF0\x9F\x98\x80", &length, &cp), Utf8Status::kValid);  // 😀
  EXPECT_EQ(length, 4u);
  EXPECT_EQ(cp, U'\U0001F600');
}

TEST(Utf8Test, TellsIncompleteFromInvalid) {
  size_t length = 0;
  char32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("\xF0\x9F\x98", &length, &cp), Utf8Status::kIncomplete);
  EXPECT_EQ(length, 3u);
  EXPECT_EQ(DecodeUtf8("\xE0", &length, &cp), Utf8Status::kIncomplete);
  // Overlong, surrogate, above U+10FFFF, stray continuation, never-used bytes.
  for (std::string_view bad : {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                               "\x80", "\xFF", "\xF5\x80\x80\x80"}) {
    EXPECT_EQ(DecodeUtf8(bad, &length, &cp), Utf8Status::kInvalid) << testing::PrintToString(bad);
    EXPECT_EQ(length, 1u);
  }
  // A good lead and continuation followed by a non-continuation: a 2-byte maximal subpart.
  EXPECT_EQ(DecodeUtf8("\xE2\x96(", &length, &cp), Utf8Status::kInvalid);
  EXPECT_EQ(length, 2u);
}

TEST(Utf8Test, FindsFirstInvalidByte) {
  EXPECT_EQ(FindInvalidUtf8(""), std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("h\xC3\xA9llo \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("abc\xC3"), 3u);  // truncated at the end is invalid text
  EXPECT_EQ(FindInvalidUtf8("ab\x80"
                            "c"),
            2u);
}

TEST(Utf8Test, ReplacesMaximalSubparts) {
  EXPECT_EQ(Sanitize("a\xFF"
                     "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(Sanitize("\xE2\x96(x"), "\xEF\xBF\xBD(x");          // one U+FFFD for 2 bytes
  EXPECT_EQ(Sanitize("\xF0\x9F\x98"), "\xEF\xBF\xBD");          // truncated tail
  EXPECT_EQ(Sanitize("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // each stray byte
  std::string out;
  EXPECT_EQ(AppendSanitizedUtf8("ok\xF0\x9F", /*hold_incomplete_tail=*/true, &out), 2u);
  EXPECT_EQ(out, "ok");
}

TEST(Utf8Test, EncodesCodePoints) {
  std::string out;
  for (char32_t cp : {U'A', U'\u00E9', U'\u2581', U'\U0001F600'}) AppendUtf8(cp, &out);
  EXPECT_EQ(out, "A\xC3\xA9\xE2\x96\x81\xF0\x9F\x98\x80");
}

TEST(ByteUnicodeTest, MatchesGpt2Table) {
  EXPECT_EQ(ByteToCodePoint(' '), U'\u0120');   // "Ġ"
  EXPECT_EQ(ByteToCodePoint('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(ByteToCodePoint('A'), U'A');
  EXPECT_EQ(ByteToCodePoint(0xAD), U'\u0143');  // soft hyphen: the last of the 68 remapped bytes
  EXPECT_EQ(ByteToTokenText(' '), "\xC4\xA0");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(CodePointToByte(ByteToCodePoint(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(CodePointToByte(U'\u0200'), -1);
  EXPECT_EQ(CodePointToByte(0x20), -1);  // a space is not a stand-in for anything
}

}  // namespace
}  // namespace streamd::tokenizer
