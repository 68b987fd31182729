// The tokenizer on small vocabularies built in memory: algorithm details (merge order, byte
// fallback, special-token rules) and the errors for files we do not support.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/gguf/gguf_writer.h"
#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/tokenizer.h"

namespace streamd::tokenizer {
namespace {

using gguf::MakeArrayOf;
using gguf::MakeString;
using gguf::MakeValue;

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

struct TestVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  void Add(std::string text, int32_t type = kNormal, float score = 0.0f) {
    tokens.push_back(std::move(text));
    types.push_back(type);
    scores.push_back(score);
  }
};

// Serialized file plus the GgufFile parsed in place from it.
struct Built {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::GgufFile> file;
};

std::unique_ptr<Built> Build(const gguf::GgufWriter& writer) {
  auto built = std::make_unique<Built>();
  built->bytes = writer.Serialize();
  auto file = gguf::GgufFile::FromBuffer(built->bytes.data(), built->bytes.size());
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (file.ok()) built->file = std::move(*file);
  return built;
}

// Byte-level BPE: the 256 byte tokens, then "he", "ll", "hell", "hello", "aa" and specials.
gguf::GgufWriter BpeWriter(std::string pre = "gpt2") {
  TestVocab v;
  for (int b = 0; b < 256; ++b) v.Add(ByteToTokenText(static_cast<uint8_t>(b)));
  for (const char* t : {"he", "ll", "hell", "hello", "aa"}) v.Add(t);
  v.Add("<|im_start|>", kControl);  // 261
  v.Add("<|im_end|>", kControl);    // 262
  v.Add("<tool>", kUserDefined);    // 263
  v.Add("<|eot_id|>", kNormal);     // 264: an end-of-turn text the file forgot to mark
  gguf::GgufWriter w;
  w.Add("tokenizer.ggml.model", MakeString("gpt2"));
  w.Add("tokenizer.ggml.pre", MakeString(std::move(pre)));
  w.Add("tokenizer.ggml.tokens", MakeArrayOf(v.tokens));
  w.Add("tokenizer.ggml.token_type", MakeArrayOf(v.types));
  w.Add("tokenizer.ggml.merges",
        MakeArrayOf(std::vector<std::string>{"h e", "l l", "he ll", "hell o", "a a"}));
  w.Add("tokenizer.ggml.eos_token_id", MakeValue<uint32_t>(262));
  return w;
}

std::unique_ptr<Tokenizer> MustLoad(const Built& built) {
  auto tok = Tokenizer::FromGguf(*built.file);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::vector<int32_t> EncodeIds(const Tokenizer& tok, std::string_view text, bool parse_special) {
  auto ids = tok.Encode(text, false, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(TokenizerSyntheticTest, BpeMergesByRankLeftmostFirst) {
  auto built = Build(BpeWriter());
  auto tok = MustLoad(*built);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(EncodeIds(*tok, "hello", false), (std::vector<int32_t>{259}));
  EXPECT_EQ(EncodeIds(*tok, "hellx", false), (std::vector<int32_t>{258, 'x'}));
  // Equal ranks: the leftmost pair merges first, so "aaa" is "aa" + "a".
  EXPECT_EQ(EncodeIds(*tok, "aaa", false), (std::vector<int32_t>{260, 'a'}));
  // A space is byte 0x20, stored as "Ġ" (the 33rd remapped byte: id 0x20 here).
  EXPECT_EQ(EncodeIds(*tok, " he", false), (std::vector<int32_t>{0x20, 256}));
  EXPECT_EQ(tok->Decode(EncodeIds(*tok, "hello world\n", false)), "hello world\n");
}

TEST(TokenizerSyntheticTest, SpecialTokenRules) {
  auto built = Build(BpeWriter());
  auto tok = MustLoad(*built);
  ASSERT_NE(tok, nullptr);
  // User-defined tokens are cut out always; control tokens only with parse_special.
  EXPECT_EQ(EncodeIds(*tok, "a<tool>b", false), (std::vector<int32_t>{'a', 263, 'b'}));
  EXPECT_EQ(EncodeIds(*tok, "<|im_start|>he", true), (std::vector<int32_t>{261, 256}));
  const std::vector<int32_t> plain = EncodeIds(*tok, "<|im_start|>he", false);
  EXPECT_GT(plain.size(), 2u);
  EXPECT_EQ(tok->Decode(plain), "<|im_start|>he");
  // "<|eot_id|>" ends generation and became a control token, like eos.
  EXPECT_TRUE(tok->IsEndOfGeneration(264));
  EXPECT_TRUE(tok->IsEndOfGeneration(262));
  EXPECT_FALSE(tok->IsEndOfGeneration(261));
  EXPECT_EQ(tok->token_type(264), TokenType::kControl);
  EXPECT_EQ(tok->eot_id(), 264);
  EXPECT_EQ(EncodeIds(*tok, "<|eot_id|>", true), (std::vector<int32_t>{264}));
  // No BOS in this vocabulary: add_bos asks for nothing that exists.
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(*tok->Encode("he", true, false), (std::vector<int32_t>{256}));
}

TEST(TokenizerSyntheticTest, UnsupportedModelIsUnimplementedNamingIt) {
  gguf::GgufWriter w;
  w.Add("tokenizer.ggml.model", MakeString("t5"));
  w.Add("tokenizer.ggml.tokens", MakeArrayOf(std::vector<std::string>{"a"}));
  auto built = Build(w);
  auto tok = Tokenizer::FromGguf(*built->file);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(tok.status().message().find("'t5'"), std::string::npos);
}

TEST(TokenizerSyntheticTest, UnknownPreTokenizerIsRejectedNamingIt) {
  auto built = Build(BpeWriter("deepseek-coder"));
  auto tok = Tokenizer::FromGguf(*built->file);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tok.status().message().find("'deepseek-coder'"), std::string::npos);
}

TEST(TokenizerSyntheticTest, MalformedFilesAreErrors) {
  {
    gguf::GgufWriter w = BpeWriter();
    w.Add("tokenizer.ggml.bos_token_id", MakeValue<uint32_t>(100000));
    auto built = Build(w);
    auto tok = Tokenizer::FromGguf(*built->file);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("tokenizer.ggml.bos_token_id"), std::string::npos);
  }
  {
    gguf::GgufWriter w;
    w.Add("tokenizer.ggml.model", MakeString("gpt2"));
    w.Add("tokenizer.ggml.tokens", MakeArrayOf(std::vector<std::string>{"a", "b"}));
    auto built = Build(w);
    auto tok = Tokenizer::FromGguf(*built->file);
    ASSERT_FALSE(tok.ok());  // BPE without merges
    EXPECT_NE(tok.status().message().find("tokenizer.ggml.merges"), std::string::npos);
  }
  {
    gguf::GgufWriter w;
    w.Add("tokenizer.ggml.model", MakeString("gpt2"));
    auto built = Build(w);
    EXPECT_FALSE(Tokenizer::FromGguf(*built->file).ok());  // no tokens at all
  }
}

// SentencePiece: <unk> <s> </s>, the 256 byte tokens, then scored pieces.
std::unique_ptr<Built> BuildSpm() {
  TestVocab v;
  v.Add("<unk>", kUnknown);
  v.Add("<s>", kControl);
  v.Add("</s>", kControl);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    v.Add(hex, kByte);
  }
  v.Add("\xE2\x96\x81", kNormal, -1.0f);    // 259 "▁"
  v.Add("h", kNormal, -2.0f);               // 260
  v.Add("i", kNormal, -2.0f);               // 261
  v.Add("\xE2\x96\x81h", kNormal, -3.0f);   // 262 "▁h"
  v.Add("hi", kNormal, -0.5f);              // 263: outscores "▁h"
  v.Add("\xE2\x96\x81hi", kNormal, -4.0f);  // 264
  gguf::GgufWriter w;
  w.Add("tokenizer.ggml.model", MakeString("llama"));
  w.Add("tokenizer.ggml.tokens", MakeArrayOf(v.tokens));
  w.Add("tokenizer.ggml.token_type", MakeArrayOf(v.types));
  w.Add("tokenizer.ggml.scores", MakeArrayOf(v.scores));
  return Build(w);
}

TEST(TokenizerSyntheticTest, SpmMergesByScoreAndFallsBackToBytes) {
  auto built = BuildSpm();
  auto tok = MustLoad(*built);
  ASSERT_NE(tok, nullptr);
  EXPECT_TRUE(tok->add_bos());  // SentencePiece default
  // "▁hi": "hi" (-0.5) merges before "▁h" (-3), then "▁" + "hi" -> "▁hi".
  EXPECT_EQ(EncodeIds(*tok, "hi", false), (std::vector<int32_t>{264}));
  EXPECT_EQ(*tok->Encode("hi", true, false), (std::vector<int32_t>{1, 264}));
  // "é" is not a piece: its two UTF-8 bytes become byte tokens.
  EXPECT_EQ(EncodeIds(*tok, "h\xC3\xA9", false), (std::vector<int32_t>{262, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->Decode(EncodeIds(*tok, "h\xC3\xA9 hi", false)), "h\xC3\xA9 hi");
  // After a special token the text gets the space prefix again, and Decode removes it.
  const std::vector<int32_t> ids = EncodeIds(*tok, "hi</s>hi", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{264, 2, 264}));
  EXPECT_EQ(tok->Decode(ids), "hi</s>hi");
  EXPECT_EQ(tok->TokenToPiece(264), " hi");
  EXPECT_EQ(tok->TokenToPiece(3 + 0x41), "A");
}

}  // namespace
}  // namespace streamd::tokenizer
