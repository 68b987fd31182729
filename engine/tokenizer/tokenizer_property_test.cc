// Properties over many generated texts, on both real vocabularies: decoding inverts encoding,
// streaming equals decoding, and special-token texts behave by parse_special.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/support/tokenizer_test_util.h"

namespace streamd::tokenizer {
namespace {

using testing::LlamaSpm;
using testing::LoadedVocab;
using testing::SmolLm2;

// Pieces chosen to hit the tricky paths: runs of spaces, CR/LF, digits, contractions,
// multi-byte letters and emoji, and special-token texts of both vocabularies. (Not U+2581
// "▁": SentencePiece cannot tell it from an escaped space; see LlamaSpmMetadataAndPieces.)
const std::vector<std::string> kAtoms = {" ",
                                         "  ",
                                         "\n",
                                         "\r\n",
                                         "\t",
                                         "a",
                                         "Hello",
                                         " world",
                                         "'s",
                                         "'LL",
                                         "0",
                                         "42",
                                         "1234",
                                         ".",
                                         "!?",
                                         "...",
                                         "--",
                                         "(",
                                         ")",
                                         "\xC3\xA9",
                                         "\xC3\x9F",
                                         "\xE4\xBD\xA0\xE5\xA5\xBD",
                                         "\xF0\x9F\x98\x80",
                                         "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
                                         "\xE2\x80\x8D",
                                         "\xD9\xA1",
                                         "<|im_start|>",
                                         "<|im_end|>",
                                         "<|endoftext|>",
                                         "<s>",
                                         "</s>",
                                         "<unk>",
                                         "<0x41>",
                                         "\xC2\xA0",
                                         "\xE3\x80\x80"};

std::vector<std::string> GenerateTexts(int count) {
  std::mt19937 rng(20240131);  // fixed seed: the same texts on every run
  std::uniform_int_distribution<size_t> atom(0, kAtoms.size() - 1);
  std::uniform_int_distribution<int> length(0, 24);
  std::vector<std::string> texts;
  for (int i = 0; i < count; ++i) {
    std::string text;
    for (int n = length(rng); n > 0; --n) text += kAtoms[atom(rng)];
    texts.push_back(std::move(text));
  }
  return texts;
}

void CheckProperties(const LoadedVocab* vocab) {
  ASSERT_NE(vocab, nullptr);
  const Tokenizer& tok = *vocab->tokenizer;
  for (const std::string& text : GenerateTexts(400)) {
    for (bool parse_special : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(text) + (parse_special ? " (special)" : ""));
      auto ids = tok.Encode(text, false, parse_special);
      ASSERT_TRUE(ids.ok()) << ids.status().ToString();
      for (int32_t id : *ids) {
        ASSERT_TRUE(tok.IsValidId(id));
        if (!parse_special) {
          EXPECT_NE(tok.token_type(id), TokenType::kControl);
        }
      }
      const std::string decoded = tok.Decode(*ids);
      EXPECT_EQ(decoded, text);
      IncrementalDetokenizer detok(tok);
      std::string streamed;
      for (int32_t id : *ids) {
        const std::string chunk = detok.Push(id);
        EXPECT_EQ(FindInvalidUtf8(chunk), std::string::npos);
        streamed += chunk;
      }
      streamed += detok.Flush();
      EXPECT_EQ(streamed, decoded);
    }
  }
}

TEST(TokenizerPropertyTest, SmolLm2) { CheckProperties(SmolLm2()); }
TEST(TokenizerPropertyTest, LlamaSpm) { CheckProperties(LlamaSpm()); }

}  // namespace
}  // namespace streamd::tokenizer
