#include "engine/tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace streamd::tokenizer {
namespace {

std::vector<std::string> Split(std::string_view name, std::string_view text) {
  auto pre = PreTokenizer::Create(name);
  EXPECT_TRUE(pre.ok()) << pre.status().ToString();
  if (!pre.ok()) return {};
  std::vector<std::string_view> pieces;
  EXPECT_TRUE((*pre)->Split(text, &pieces).ok());
  std::string joined;
  for (std::string_view p : pieces) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, text) << "pieces must concatenate to the input";
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_EQ(Split("gpt2", "Hello world, it's 2024!"),
            (Pieces{"Hello", " world", ",", " it", "'s", " 2024", "!"}));
  // A run of spaces leaves its last space to the next word.
  EXPECT_EQ(Split("gpt-2", "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(Split("gpt2", "end   "), (Pieces{"end", "   "}));
  // A lone whitespace before a non-space is no match, so it becomes a gap piece of its own.
  EXPECT_EQ(Split("gpt2", "x\ty"), (Pieces{"x", "\t", "y"}));
  // Unicode classes: letters of any script, numbers of any script.
  EXPECT_EQ(Split("gpt2", "caf\xC3\xA9 \xD9\xA1\xD9\xA2"),
            (Pieces{"caf\xC3\xA9", " \xD9\xA1\xD9\xA2"}));
}

TEST(PreTokenizerTest, WhitespaceIsLlamaCppsSet) {
  // U+180E MONGOLIAN VOWEL SEPARATOR is a symbol to llama.cpp (PCRE2's \s would call it a
  // space): it joins the apostrophe, leaving "ll" without its contraction.
  EXPECT_EQ(Split("gpt2", "\xE1\xA0\x8E'll"), (Pieces{"\xE1\xA0\x8E'", "ll"}));
  // U+3000 IDEOGRAPHIC SPACE and U+00A0 are spaces to both.
  EXPECT_EQ(Split("gpt2", "a\xE3\x80\x80\xC2\xA0 b"), (Pieces{"a", "\xE3\x80\x80\xC2\xA0", " b"}));
}

TEST(PreTokenizerTest, SmolLmIsolatesEveryDigit) {
  EXPECT_EQ(Split("smollm", "in 2024, x42"),
            (Pieces{"in", " ", "2", "0", "2", "4", ",", " x", "4", "2"}));
  EXPECT_EQ(Split("smollm", "Hello world"), (Pieces{"Hello", " world"}));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(Split("llama3", "1234567 apples"), (Pieces{"123", "456", "7", " apples"}));
  EXPECT_EQ(Split("llama-bpe", "I'M here\n\nok"), (Pieces{"I", "'M", " here", "\n\n", "ok"}));
  auto pre = PreTokenizer::Create("llama-bpe");
  ASSERT_TRUE(pre.ok());
  EXPECT_TRUE((*pre)->ignore_merges());
}

TEST(PreTokenizerTest, DefaultSplitsPunctuationRunsFirst) {
  EXPECT_EQ(Split("", "hi!!! 12345"), (Pieces{"hi", "!!!", " ", "123", "45"}));
  EXPECT_EQ(Split("default", "a+b"), (Pieces{"a", "+", "b"}));
}

TEST(PreTokenizerTest, Qwen2IsolatesEveryDigitAndKeepsNewlinesApart) {
  EXPECT_EQ(Split("qwen2", "1234567 apples"),
            (Pieces{"1", "2", "3", "4", "5", "6", "7", " apples"}));
  // Contractions in either case, a newline run on its own, a symbol joining the next word.
  EXPECT_EQ(Split("qwen2", "I'M here\n\n\"ok\""),
            (Pieces{"I", "'M", " here", "\n\n", "\"ok", "\""}));
  // A symbol run keeps the newlines that follow it.
  EXPECT_EQ(Split("deepseek-r1-qwen", "a+=\n\nb"), (Pieces{"a", "+=\n\n", "b"}));
  auto pre = PreTokenizer::Create("qwen2");
  ASSERT_TRUE(pre.ok());
  EXPECT_FALSE((*pre)->ignore_merges());
}

TEST(PreTokenizerTest, Qwen35KeepsCombiningMarksInWords) {
  // Devanagari "namaste": na ma sa, virama U+094D (a mark), ta, vowel sign e U+0947 (a mark).
  const std::string letters = "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8";
  const std::string virama = "\xE0\xA5\x8D";
  const std::string ta = "\xE0\xA4\xA4";
  const std::string sign_e = "\xE0\xA5\x87";
  const std::string namaste = letters + virama + ta + sign_e;
  EXPECT_EQ(Split("qwen35", " " + namaste + " 42"), (Pieces{" " + namaste, " ", "4", "2"}));
  // Qwen2 counts a mark as a non-letter: it ends the word and prefixes the next letters
  // ([^\r\n\p{L}\p{N}]?\p{L}+), and a trailing one is a symbol piece.
  EXPECT_EQ(Split("qwen2", " " + namaste), (Pieces{" " + letters, virama + ta, sign_e}));
}

TEST(PreTokenizerTest, FalconCountsTheBacktickAsPunctuation) {
  EXPECT_EQ(Split("falcon", "x`+y 12345"), (Pieces{"x", "`+", "y", " ", "123", "45"}));
  EXPECT_EQ(Split("default", "x`+y"), (Pieces{"x", "`", "+", "y"}));
}

TEST(PreTokenizerTest, AliasesSplitAsTheirFamily) {
  EXPECT_EQ(Split("mpt", "in 2024"), Split("gpt2", "in 2024"));
  EXPECT_EQ(Split("command-r", "in 2024"), Split("smollm", "in 2024"));
}

TEST(PreTokenizerTest, UnknownNameIsAnErrorNamingItAndListingTheSupported) {
  auto pre = PreTokenizer::Create("no-such-pre");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), StatusCode::kInvalidArgument);
  const std::string message(pre.status().message());
  EXPECT_NE(message.find("'no-such-pre'"), std::string::npos) << message;
  const std::vector<std::string_view> names = PreTokenizer::SupportedNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "qwen2"), names.end());
  for (std::string_view name : names) {
    EXPECT_TRUE(PreTokenizer::IsSupported(name)) << name;
    EXPECT_NE(message.find(std::string(name)), std::string::npos) << name << ": " << message;
  }
  EXPECT_TRUE(PreTokenizer::IsSupported(""));
  EXPECT_FALSE(PreTokenizer::IsSupported("no-such-pre"));
}

TEST(PreTokenizerTest, LongWhitespaceRunDoesNotFail) {
  const std::string text = std::string(100000, ' ') + "x" + std::string(100000, '\n');
  const Pieces pieces = Split("smollm", text);
  EXPECT_EQ(pieces.size(), 3u);
}

}  // namespace
}  // namespace streamd::tokenizer
