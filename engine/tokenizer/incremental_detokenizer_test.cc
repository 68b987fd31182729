#include "engine/tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"
#include "tests/support/tokenizer_test_util.h"

namespace streamd::tokenizer {
namespace {

using testing::LlamaSpm;
using testing::LoadedVocab;
using testing::SmolLm2;

const std::vector<std::string> kTexts = {
    "Emoji: \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD family "
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 flags "
    "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81 "
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
    "Hello world, caf\xC3\xA9 na\xC3\xAFve \xE2\x82\xAC"
    "42.",
    "  leading spaces and a trailing one ",
};

struct StreamResult {
  std::string text;
  size_t max_pending = 0;
};

// Feeds `ids` one at a time; every chunk must be valid UTF-8 on its own.
StreamResult Stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool at_start) {
  IncrementalDetokenizer detok(tok, at_start);
  StreamResult result;
  for (int32_t id : ids) {
    const std::string chunk = detok.Push(id);
    EXPECT_EQ(FindInvalidUtf8(chunk), std::string::npos) << "invalid chunk after id " << id;
    result.text += chunk;
    result.max_pending = std::max(result.max_pending, detok.pending_bytes());
  }
  const std::string rest = detok.Flush();
  EXPECT_EQ(FindInvalidUtf8(rest), std::string::npos);
  result.text += rest;
  return result;
}

void ExpectStreamingEqualsDecode(const LoadedVocab* vocab) {
  ASSERT_NE(vocab, nullptr);
  const Tokenizer& tok = *vocab->tokenizer;
  size_t max_pending = 0;
  for (const std::string& text : kTexts) {
    SCOPED_TRACE(text);
    const std::vector<int32_t> ids = *tok.Encode(text, false, false);
    const StreamResult streamed = Stream(tok, ids, /*at_start=*/true);
    EXPECT_EQ(streamed.text, tok.Decode(ids));
    EXPECT_EQ(streamed.text, text);
    max_pending = std::max(max_pending, streamed.max_pending);
  }
  // The emoji are split across tokens in both vocabularies, so bytes were held back.
  EXPECT_GT(max_pending, 0u);
}

TEST(IncrementalDetokenizerTest, SmolLm2StreamEqualsDecode) {
  ExpectStreamingEqualsDecode(SmolLm2());
}

TEST(IncrementalDetokenizerTest, SpmStreamEqualsDecode) { ExpectStreamingEqualsDecode(LlamaSpm()); }

TEST(IncrementalDetokenizerTest, SpmLeadingSpaceFollowsTextStart) {
  const LoadedVocab* vocab = LlamaSpm();
  ASSERT_NE(vocab, nullptr);
  const Tokenizer& tok = *vocab->tokenizer;
  const std::vector<int32_t> ids = *tok.Encode("Hello world", false, false);
  EXPECT_EQ(Stream(tok, ids, /*at_start=*/true).text, "Hello world");
  // A continuation after a prompt keeps the space the model generated.
  EXPECT_EQ(Stream(tok, ids, /*at_start=*/false).text, " Hello world");
  // After a special token the text starts again, as in Encode/Decode.
  const std::vector<int32_t> with_bos = *tok.Encode("Hello", true, false);
  EXPECT_EQ(Stream(tok, with_bos, /*at_start=*/false).text, "<s>Hello");
}

TEST(IncrementalDetokenizerTest, InvalidBytesBecomeReplacementCharacters) {
  const LoadedVocab* vocab = LlamaSpm();
  ASSERT_NE(vocab, nullptr);
  const Tokenizer& tok = *vocab->tokenizer;
  auto byte = [&](int b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    return *tok.FindToken(hex);
  };
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.Push(byte(0xE2)), "");
  EXPECT_EQ(detok.Push(byte(0x96)), "");
  EXPECT_EQ(detok.pending_bytes(), 2u);
  // "A" cannot continue the sequence: one U+FFFD for the two bytes, then "A".
  EXPECT_EQ(detok.Push(byte('A')), std::string(kReplacementChar) + "A");
  EXPECT_EQ(detok.Push(byte(0xFF)), kReplacementChar);  // never valid: replaced at once
  EXPECT_EQ(detok.Push(byte(0xF0)), "");
  EXPECT_EQ(detok.Flush(), kReplacementChar);  // the stream ended inside a character
  EXPECT_EQ(detok.pending_bytes(), 0u);
}

TEST(IncrementalDetokenizerTest, RandomIdsNeverEmitInvalidUtf8) {
  for (const LoadedVocab* vocab : {SmolLm2(), LlamaSpm()}) {
    ASSERT_NE(vocab, nullptr);
    const Tokenizer& tok = *vocab->tokenizer;
    std::mt19937 rng(1234);  // fixed seed: deterministic
    std::uniform_int_distribution<int32_t> pick(0, tok.vocab_size() - 1);
    std::vector<int32_t> ids(5000);
    for (int32_t& id : ids) id = pick(rng);
    const StreamResult streamed = Stream(tok, ids, true);
    EXPECT_EQ(FindInvalidUtf8(streamed.text), std::string::npos);
  }
}

}  // namespace
}  // namespace streamd::tokenizer
