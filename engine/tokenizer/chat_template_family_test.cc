// Chat templates of the families users bring (Qwen2.5, Qwen3, Llama 3.1/3.2/3.3, Gemma 2/3),
// rendered from the real Jinja templates and encoded with the real vocabularies, compared token
// by token with sequences written by hand from each template's definition.
//
// The templates and vocabularies are llama.cpp's (models/templates/*.jinja and
// models/ggml-vocab-*.gguf of the llama-cpp-python 0.3.36 sdist), read from
// $STREAMD_VOCAB_DIR (`scripts/fetch-test-vocab.sh --golden`; `make test` sets it); Gemma 3's
// vocabulary is the real Gemma 3 270M file's, $STREAMD_GEMMA_MODEL
// (`scripts/fetch-gemma-model.sh`; `make test` sets it too).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/tokenizer_test_util.h"

namespace streamd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

using testing::VocabDirOrFail;

// ggml-vocab-`name`.gguf of the golden directory, loaded once per process.
const testing::LoadedVocab* GoldenVocab(const std::string& name) {
  static auto* cache = new std::map<std::string, std::unique_ptr<testing::LoadedVocab>>();
  auto it = cache->find(name);
  if (it != cache->end()) return it->second.get();
  const std::string dir = VocabDirOrFail();
  if (dir.empty()) return nullptr;
  const std::string path = dir + "/ggml-vocab-" + name + ".gguf";
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) {
    ADD_FAILURE() << file.status().ToString();
    return nullptr;
  }
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    ADD_FAILURE() << path << ": " << tok.status().ToString();
    return nullptr;
  }
  auto& slot = (*cache)[name];
  slot = std::make_unique<testing::LoadedVocab>(
      testing::LoadedVocab{std::move(*file), std::move(*tok)});
  return slot.get();
}

// templates/`name`.jinja of the golden directory ("" after recording a failure).
std::string TemplateText(const std::string& name) {
  const std::string dir = VocabDirOrFail();
  if (dir.empty()) return "";
  const std::string text = testing::ReadFileOrEmpty(dir + "/templates/" + name + ".jinja");
  EXPECT_FALSE(text.empty()) << "missing or empty " << dir << "/templates/" << name << ".jinja";
  return text;
}

// Builds an expected token sequence: special tokens by their text, plain text encoded
// without special-token parsing (as the text between two special tokens of a prompt is).
class Expect {
 public:
  explicit Expect(const Tokenizer& tok) : tok_(tok) {}
  Expect& Special(std::string_view text) {
    auto id = tok_.FindToken(text);
    EXPECT_TRUE(id.has_value()) << "no token " << text;
    EXPECT_TRUE(id && tok_.IsSpecial(*id)) << text << " is not a special token";
    if (id) ids_.push_back(*id);
    return *this;
  }
  Expect& Text(std::string_view text) {
    auto ids = tok_.Encode(text, /*add_bos=*/false, /*parse_special=*/false);
    EXPECT_TRUE(ids.ok()) << ids.status().ToString();
    if (ids.ok()) ids_.insert(ids_.end(), ids->begin(), ids->end());
    return *this;
  }
  const Ids& ids() const { return ids_; }

 private:
  const Tokenizer& tok_;
  Ids ids_;
};

// The prompt's ids as the engine encodes a rendered conversation.
Ids RenderAndEncode(const ChatTemplate& t, const Tokenizer& tok,
                    const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  auto text = t.Render(messages, add_generation_prompt);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  if (!text.ok()) return {};
  auto ids = tok.Encode(*text, /*add_bos=*/false, /*parse_special=*/true);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : Ids{};
}

ChatTemplate FromText(const std::string& jinja, const Tokenizer& tok) {
  return ChatTemplate::FromTemplateText(jinja, std::string(tok.TokenText(tok.bos_id())),
                                        std::string(tok.TokenText(tok.eos_id())));
}

TEST(ChatTemplateFamilyTest, Qwen25AddsItsDefaultSystemTurn) {
  const auto* vocab = GoldenVocab("qwen2");
  const std::string jinja = TemplateText("Qwen-Qwen2.5-7B-Instruct");
  ASSERT_TRUE(vocab != nullptr && !jinja.empty());
  const Tokenizer& tok = *vocab->tokenizer;
  const ChatTemplate t = FromText(jinja, tok);
  EXPECT_EQ(t.kind(), ChatTemplateKind::kChatMl);
  EXPECT_FALSE(t.is_fallback());
  EXPECT_FALSE(t.renders_bos());
  constexpr std::string_view kQwen =
      "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  ASSERT_TRUE(t.default_system_turn().has_value());
  EXPECT_EQ(*t.default_system_turn(), "<|im_start|>system\n" + std::string(kQwen) + "<|im_end|>\n");

  // {%- else %}{{- '<|im_start|>system\nYou are Qwen, ...<|im_end|>\n' }} before the loop,
  // then '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n' per message.
  EXPECT_EQ(RenderAndEncode(t, tok, {{"user", "Hi!"}}, true),
            Expect(tok)
                .Special("<|im_start|>")
                .Text("system\n" + std::string(kQwen))
                .Special("<|im_end|>")
                .Text("\n")
                .Special("<|im_start|>")
                .Text("user\nHi!")
                .Special("<|im_end|>")
                .Text("\n")
                .Special("<|im_start|>")
                .Text("assistant\n")
                .ids());
  // A system message of the conversation replaces the default.
  EXPECT_EQ(RenderAndEncode(t, tok, {{"system", "Be terse."}, {"user", "2+2?"}}, false),
            Expect(tok)
                .Special("<|im_start|>")
                .Text("system\nBe terse.")
                .Special("<|im_end|>")
                .Text("\n")
                .Special("<|im_start|>")
                .Text("user\n2+2?")
                .Special("<|im_end|>")
                .Text("\n")
                .ids());
}

TEST(ChatTemplateFamilyTest, QwenVocabularysOwnTemplateHasItsDefaultSystemTurn) {
  const auto* vocab = GoldenVocab("qwen2");
  ASSERT_NE(vocab, nullptr);
  auto t = ChatTemplate::FromGguf(*vocab->file, *vocab->tokenizer);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kChatMl);
  EXPECT_EQ(t->default_system_turn(),
            std::optional<std::string>("<|im_start|>system\nYou are a helpful assistant"
                                       "<|im_end|>\n"));
}

TEST(ChatTemplateFamilyTest, Qwen3IsChatMlWithoutADefaultSystemTurn) {
  const auto* vocab = GoldenVocab("qwen2");
  const std::string jinja = TemplateText("Qwen-Qwen3-0.6B");
  ASSERT_TRUE(vocab != nullptr && !jinja.empty());
  const Tokenizer& tok = *vocab->tokenizer;
  const ChatTemplate t = FromText(jinja, tok);
  EXPECT_EQ(t.kind(), ChatTemplateKind::kChatMl);
  EXPECT_FALSE(t.default_system_turn().has_value());
  EXPECT_EQ(RenderAndEncode(t, tok, {{"user", "Hi!"}, {"assistant", "Hello."}}, false),
            Expect(tok)
                .Special("<|im_start|>")
                .Text("user\nHi!")
                .Special("<|im_end|>")
                .Text("\n")
                .Special("<|im_start|>")
                .Text("assistant\nHello.")
                .Special("<|im_end|>")
                .Text("\n")
                .ids());
}

// Llama 3.1, 3.2 and 3.3 render the same prompt when no tools are given.
class Llama31TemplateTest : public ::testing::TestWithParam<const char*> {};

TEST_P(Llama31TemplateTest, OpensWithTheKnowledgeDateSystemTurn) {
  const auto* vocab = GoldenVocab("llama-bpe");
  const std::string jinja = TemplateText(GetParam());
  ASSERT_TRUE(vocab != nullptr && !jinja.empty());
  const Tokenizer& tok = *vocab->tokenizer;
  const ChatTemplate t = FromText(jinja, tok);
  EXPECT_EQ(t.kind(), ChatTemplateKind::kLlama3);
  EXPECT_TRUE(t.renders_bos());
  constexpr std::string_view kPreamble =
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  EXPECT_EQ(t.system_preamble(), kPreamble);

  // bos_token, then "<|start_header_id|>system<|end_header_id|>\n\n", the dates, the trimmed
  // system message (none here) and "<|eot_id|>"; each message as
  // '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>'.
  EXPECT_EQ(RenderAndEncode(t, tok, {{"user", " Hi! "}}, true),
            Expect(tok)
                .Special("<|begin_of_text|>")
                .Special("<|start_header_id|>")
                .Text("system")
                .Special("<|end_header_id|>")
                .Text("\n\n" + std::string(kPreamble))
                .Special("<|eot_id|>")
                .Special("<|start_header_id|>")
                .Text("user")
                .Special("<|end_header_id|>")
                .Text("\n\nHi!")
                .Special("<|eot_id|>")
                .Special("<|start_header_id|>")
                .Text("assistant")
                .Special("<|end_header_id|>")
                .Text("\n\n")
                .ids());
  EXPECT_EQ(RenderAndEncode(t, tok, {{"system", "Be terse.\n"}, {"user", "Hi"}}, false),
            Expect(tok)
                .Special("<|begin_of_text|>")
                .Special("<|start_header_id|>")
                .Text("system")
                .Special("<|end_header_id|>")
                .Text("\n\n" + std::string(kPreamble) + "Be terse.")
                .Special("<|eot_id|>")
                .Special("<|start_header_id|>")
                .Text("user")
                .Special("<|end_header_id|>")
                .Text("\n\nHi")
                .Special("<|eot_id|>")
                .ids());
}

INSTANTIATE_TEST_SUITE_P(Meta, Llama31TemplateTest,
                         ::testing::Values("meta-llama-Llama-3.1-8B-Instruct",
                                           "meta-llama-Llama-3.2-3B-Instruct",
                                           "meta-llama-Llama-3.3-70B-Instruct"));

TEST(ChatTemplateFamilyTest, Llama30HasNoSystemPreamble) {
  const ChatTemplate t = ChatTemplate::FromTemplateText(
      "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}",
      "<|begin_of_text|>", "<|end_of_text|>");
  EXPECT_EQ(t.kind(), ChatTemplateKind::kLlama3);
  EXPECT_EQ(t.system_preamble(), "");
  const std::vector<ChatMessage> user = {{"user", "x"}};
  EXPECT_EQ(*t.Render(user, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

// Gemma 2's template (google/gemma-2-2b-it's): Gemma's format. The conversation's expected
// string is jinja2's rendering of the template.
TEST(ChatTemplateFamilyTest, Gemma2TemplateIsGemmasFormat) {
  const std::string jinja = TemplateText("google-gemma-2-2b-it");
  ASSERT_FALSE(jinja.empty());
  const ChatTemplate t = ChatTemplate::FromTemplateText(jinja, "<bos>", "<eos>");
  EXPECT_EQ(t.kind(), ChatTemplateKind::kGemma);
  EXPECT_FALSE(t.is_fallback());
  EXPECT_TRUE(t.renders_bos());
  const std::vector<ChatMessage> conversation = {
      {"user", " Hi there \n"}, {"assistant", "Hello!"}, {"user", "Bye"}};
  EXPECT_EQ(*t.Render(conversation, true),
            "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello!"
            "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  // This template raises on a system message; we fold it into the first user turn as Gemma
  // 3's does.
  const std::vector<ChatMessage> with_system = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(*t.Render(with_system, false),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n");
}

// The real Gemma 3 270M base file: no tokenizer.chat_template, but Gemma's turn markers in its
// vocabulary, which select Gemma's format. Ids are Gemma 3's: <eos> 1, <bos> 2,
// <start_of_turn> 105, <end_of_turn> 106, "\n" 107, "user" 2364, "model" 4368, "Hi" 10979,
// "!" 236888.
TEST(ChatTemplateFamilyTest, Gemma3BaseFileGetsGemmasFormatFromItsVocabulary) {
  const auto* vocab = testing::CachedFromEnv(
      "STREAMD_GEMMA_MODEL", "export STREAMD_GEMMA_MODEL=$(scripts/fetch-gemma-model.sh)");
  ASSERT_NE(vocab, nullptr);
  const Tokenizer& tok = *vocab->tokenizer;
  ASSERT_EQ(vocab->file->Find("tokenizer.chat_template"), nullptr);
  auto t = ChatTemplate::FromGguf(*vocab->file, tok);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kGemma);
  EXPECT_TRUE(t->is_fallback());
  EXPECT_NE(t->fallback_reason().find("<start_of_turn>/<end_of_turn>"), std::string::npos)
      << t->fallback_reason();
  // The file asks for BOS; the rendering writes it, so the encoder must not add another.
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(t->renders_bos());

  EXPECT_EQ(RenderAndEncode(*t, tok, {{"user", "Hi!"}}, true),
            (Ids{2, 105, 2364, 107, 10979, 236888, 106, 107, 105, 4368, 107}));
  EXPECT_EQ(RenderAndEncode(*t, tok, {{"system", "Be brief."}, {"user", "Hi!"}}, true),
            Expect(tok)
                .Special("<bos>")
                .Special("<start_of_turn>")
                .Text("user\nBe brief.\n\nHi!")
                .Special("<end_of_turn>")
                .Text("\n")
                .Special("<start_of_turn>")
                .Text("model\n")
                .ids());

  // Generation stops at <end_of_turn> and <eos>; the turn opener is no stop.
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.eot_id(), 106);
  EXPECT_TRUE(tok.IsEndOfGeneration(106));
  EXPECT_TRUE(tok.IsEndOfGeneration(1));
  EXPECT_FALSE(tok.IsEndOfGeneration(105));
  EXPECT_FALSE(tok.IsEndOfGeneration(10979));
}

// The tokens that end an answer: each family's end-of-turn and end-of-text tokens stop a
// generation; an ordinary token does not.
TEST(ChatTemplateFamilyTest, EachFamilysStopTokensEndGeneration) {
  struct Family {
    const char* vocab;
    std::vector<std::string_view> stops;
  };
  for (const Family& family : {Family{"qwen2", {"<|im_end|>", "<|endoftext|>"}},
                               Family{"llama-bpe", {"<|eot_id|>", "<|end_of_text|>"}}}) {
    const auto* vocab = GoldenVocab(family.vocab);
    ASSERT_NE(vocab, nullptr);
    const Tokenizer& tok = *vocab->tokenizer;
    for (std::string_view stop : family.stops) {
      auto id = tok.FindToken(stop);
      ASSERT_TRUE(id.has_value()) << family.vocab << " has no " << stop;
      EXPECT_TRUE(tok.IsEndOfGeneration(*id)) << family.vocab << ": " << stop;
    }
    auto hello = tok.Encode("Hello", false, false);
    ASSERT_TRUE(hello.ok() && !hello->empty());
    EXPECT_FALSE(tok.IsEndOfGeneration(hello->front())) << family.vocab;
  }
}

}  // namespace
}  // namespace streamd::tokenizer
