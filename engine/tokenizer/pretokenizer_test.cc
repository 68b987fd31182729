#include "engine/tokenizer/pretokenizer.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

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

TEST(PreTokenizerTest, UnknownNameIsAnErrorNamingIt) {
  auto pre = PreTokenizer::Create("qwen2");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pre.status().message().find("'qwen2'"), std::string::npos);
}

TEST(PreTokenizerTest, LongWhitespaceRunDoesNotFail) {
  const std::string text = std::string(100000, ' ') + "x" + std::string(100000, '\n');
  const Pieces pieces = Split("smollm", text);
  EXPECT_EQ(pieces.size(), 3u);
}

}  // namespace
}  // namespace streamd::tokenizer
