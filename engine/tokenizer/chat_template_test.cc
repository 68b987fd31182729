// Chat rendering against jinja2: each expected string below was produced once by rendering the
// real template with Python's jinja2 (an independent reference), then pasted here.
#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf/gguf_writer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/support/chat_template_texts.h"
#include "tests/support/tokenizer_test_util.h"

namespace streamd::tokenizer {
namespace {

using testing::kLlama2Template;
using testing::SmolLm2;

std::string MustRender(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt) {
  auto text = t.Render(messages, add_generation_prompt);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

TEST(ChatTemplateTest, SmolLm2MatchesJinja) {
  const auto* vocab = SmolLm2();
  ASSERT_NE(vocab, nullptr);
  auto t = ChatTemplate::FromGguf(*vocab->file, *vocab->tokenizer);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kChatMl);
  EXPECT_FALSE(t->is_fallback());
  EXPECT_FALSE(t->renders_bos());

  // No system message: SmolLM2's template inserts its default one.
  EXPECT_EQ(MustRender(*t,
                       {{"user", "Hi there!"},
                        {"assistant", "Hello! How can I help?"},
                        {"user", "Tell me a joke."}},
                       true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
            "Hugging Face<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>"
            "assistant\nHello! How can I help?<|im_end|>\n<|im_start|>user\nTell me a joke."
            "<|im_end|>\n<|im_start|>assistant\n");
  // A system message replaces the default one.
  EXPECT_EQ(
      MustRender(*t,
                 {{"system", "You are terse."}, {"user", "Name a color."}, {"assistant", "Blue."}},
                 false),
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName a color."
      "<|im_end|>\n<|im_start|>assistant\nBlue.<|im_end|>\n");
  // The default system turn lives inside the message loop: none for an empty conversation.
  EXPECT_EQ(MustRender(*t, {}, true), "<|im_start|>assistant\n");

  // The rendered prompt encodes with the ChatML tokens as single ids.
  const std::string prompt = MustRender(*t, {{"user", "What is 2+2?"}}, true);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
            "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  const std::vector<int32_t> ids = *vocab->tokenizer->Encode(prompt, false, true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);
}

// Meta's Llama-3-Instruct template (3.0).
constexpr std::string_view kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", " Hi there \n"}, {"assistant", "Hello!"}, {"user", "Bye"}};

TEST(ChatTemplateTest, Llama2MatchesJinja) {
  const ChatTemplate t = ChatTemplate::FromTemplateText(kLlama2Template, "<s>", "</s>");
  EXPECT_EQ(t.kind(), ChatTemplateKind::kLlama2);
  EXPECT_TRUE(t.renders_bos());
  EXPECT_EQ(MustRender(t, kConversation, true),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi there [/INST] Hello! </s><s>[INST] "
            "Bye [/INST]");
  const std::vector<ChatMessage> no_system(kConversation.begin() + 1, kConversation.end());
  EXPECT_EQ(MustRender(t, no_system, true),
            "<s>[INST] Hi there [/INST] Hello! </s><s>[INST] Bye [/INST]");
  auto bad = t.Render(std::vector<ChatMessage>{{"user", "a"}, {"user", "b"}}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  // A system message no user message follows: Jinja renders nothing, losing its text.
  auto lone_system = t.Render(std::vector<ChatMessage>{{"system", "s"}}, true);
  ASSERT_FALSE(lone_system.ok()) << *lone_system;
  EXPECT_EQ(lone_system.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lone_system.status().message().find("must be followed by a user message"),
            std::string::npos)
      << lone_system.status().ToString();
}

TEST(ChatTemplateTest, Llama3MatchesJinja) {
  const ChatTemplate t =
      ChatTemplate::FromTemplateText(kLlama3Template, "<|begin_of_text|>", "<|eot_id|>");
  EXPECT_EQ(t.kind(), ChatTemplateKind::kLlama3);
  EXPECT_EQ(MustRender(t, kConversation, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>"
            "assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
            "\n\n");
}

TEST(ChatTemplateTest, PlainChatMlHasNoDefaultSystem) {
  const ChatTemplate t = ChatTemplate::FromTemplateText(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}",
      "", "");
  EXPECT_FALSE(t.default_system_turn().has_value());
  EXPECT_EQ(MustRender(t, {{"user", "x"}}, false), "<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplateTest, UnknownOrMissingTemplateFallsBackToChatMlVisibly) {
  // Gemma 4's turn marker, a format we do not render.
  const ChatTemplate unknown = ChatTemplate::FromTemplateText("{{ '<|turn>' + message }}", "", "");
  EXPECT_TRUE(unknown.is_fallback());
  EXPECT_EQ(unknown.kind(), ChatTemplateKind::kChatMl);
  EXPECT_NE(unknown.fallback_reason().find("not a supported template"), std::string::npos);
  const ChatTemplate missing = ChatTemplate::FromTemplateText("", "", "");
  EXPECT_TRUE(missing.is_fallback());
  EXPECT_EQ(MustRender(missing, {{"user", "x"}}, true),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

// Google's Gemma 3 instruction-tuned template (tokenizer_config.json of google/gemma-3-*-it;
// its '\n\n' literals hold real newlines).
constexpr std::string_view kGemma3Template =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate "
    "user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n";

TEST(ChatTemplateTest, Gemma3MatchesJinja) {
  const ChatTemplate t = ChatTemplate::FromTemplateText(kGemma3Template, "<bos>", "<eos>");
  EXPECT_EQ(t.kind(), ChatTemplateKind::kGemma);
  EXPECT_EQ(t.kind_name(), "gemma");
  EXPECT_FALSE(t.is_fallback());
  EXPECT_TRUE(t.renders_bos());
  EXPECT_FALSE(t.default_system_turn().has_value());

  // The system text opens the first user turn, then "\n\n"; "assistant" is "model"; each
  // message is trimmed.
  EXPECT_EQ(MustRender(t, kConversation, true),
            "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"
            "Hello!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  const std::vector<ChatMessage> no_system(kConversation.begin() + 1, kConversation.end());
  EXPECT_EQ(MustRender(t, no_system, true),
            "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello!"
            "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  // An assistant turn closes like any other; no generation prompt.
  EXPECT_EQ(MustRender(t, {{"user", "What is 2+2?"}, {"assistant", " 4. \n"}}, false),
            "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4."
            "<end_of_turn>\n");
  // The template trims the messages, not the system text before the first one.
  EXPECT_EQ(MustRender(t, {{"system", " Be brief.\n"}, {"user", "Hi"}}, false),
            "<bos><start_of_turn>user\n Be brief.\n\n\nHi<end_of_turn>\n");
  // Jinja fails on an empty conversation (messages[0]); we render BOS and the prompt only.
  EXPECT_EQ(MustRender(t, {}, true), "<bos><start_of_turn>model\n");
  EXPECT_EQ(MustRender(t, {}, false), "");
}

TEST(ChatTemplateTest, GemmaRejectsWhatItCannotRender) {
  const ChatTemplate t = ChatTemplate::FromTemplateText(kGemma3Template, "<bos>", "<eos>");
  // Roles that do not alternate user/assistant (Jinja raises), a system message that is not
  // first (Jinja would render a "system" turn the model never saw at odd positions), and a
  // system message no user message follows (Jinja would drop its text).
  const std::vector<std::vector<ChatMessage>> rejected = {
      {{"user", "a"}, {"user", "b"}},
      {{"assistant", "a"}},
      {{"system", "s"}, {"assistant", "a"}},
      {{"user", "a"}, {"system", "s"}},
      {{"user", "a"}, {"assistant", "b"}, {"system", "s"}},
      {{"user", "a"}, {"tool", "b"}},
      {{"system", "s"}},
  };
  for (const auto& messages : rejected) {
    for (bool add_generation : {false, true}) {
      auto text = t.Render(messages, add_generation);
      ASSERT_FALSE(text.ok()) << *text;
      EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
    }
  }
  auto lone_system = t.Render(std::vector<ChatMessage>{{"system", "s"}}, true);
  EXPECT_NE(lone_system.status().message().find("must be followed by a user message"),
            std::string::npos)
      << lone_system.status().ToString();
  auto misplaced = t.Render(std::vector<ChatMessage>{{"system", "s"}, {"assistant", "a"}}, true);
  EXPECT_NE(misplaced.status().message().find("message 1 has role 'assistant'"), std::string::npos)
      << misplaced.status().ToString();
}

// What ChatFormatter (engine/sessions) relies on: every shorter conversation that renders is a
// prefix of the whole, and the generation prompt only appends.
TEST(ChatTemplateTest, GemmaRendersIncrementally) {
  const ChatTemplate t = ChatTemplate::FromTemplateText(kGemma3Template, "<bos>", "<eos>");
  const std::string whole = MustRender(t, kConversation, false);
  EXPECT_EQ(MustRender(t, kConversation, true), whole + "<start_of_turn>model\n");
  for (size_t k = 0; k < kConversation.size(); ++k) {
    const std::vector<ChatMessage> head(kConversation.begin(), kConversation.begin() + k);
    auto text = t.Render(head, false);
    if (k == 1) {  // the system message alone
      EXPECT_FALSE(text.ok());
      continue;
    }
    ASSERT_TRUE(text.ok()) << k << ": " << text.status().ToString();
    EXPECT_TRUE(whole.starts_with(*text)) << k << ": " << *text;
  }
}

// The separator is the template's literal: a variant with '\n' (escaped) folds with one
// newline.
TEST(ChatTemplateTest, GemmaSystemSeparatorComesFromTheTemplate) {
  std::string jinja(kGemma3Template);
  const std::string two = "+ '\n\n' -%}";
  for (size_t at; (at = jinja.find(two)) != std::string::npos;) {
    jinja.replace(at, two.size(), "+ '\\n' -%}");
  }
  const ChatTemplate t = ChatTemplate::FromTemplateText(jinja, "<bos>", "<eos>");
  ASSERT_EQ(t.kind(), ChatTemplateKind::kGemma);
  EXPECT_EQ(MustRender(t, {{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<bos><start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\n");
  // An unterminated literal is not a separator: Gemma 3's "\n\n" is used.
  const ChatTemplate broken = ChatTemplate::FromTemplateText(
      "{{ '<start_of_turn>' }}{% set first_user_prefix = messages[0]['content'] + 'x", "<bos>", "");
  ASSERT_EQ(broken.kind(), ChatTemplateKind::kGemma);
  EXPECT_EQ(MustRender(broken, {{"system", "S"}, {"user", "U"}}, false),
            "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n");
}

// Detection keeps the earlier families first: a template with ChatML's markers stays ChatML.
TEST(ChatTemplateTest, GemmaIsDetectedAfterTheOtherFamilies) {
  EXPECT_EQ(ChatTemplate::FromTemplateText("{{ '<start_of_turn>' }}", "", "").kind(),
            ChatTemplateKind::kGemma);
  EXPECT_EQ(
      ChatTemplate::FromTemplateText("{{ '<|im_start|>' + '<start_of_turn>' }}", "", "").kind(),
      ChatTemplateKind::kChatMl);
  EXPECT_EQ(
      ChatTemplate::FromTemplateText("{{ '<|start_header_id|><start_of_turn>' }}", "", "").kind(),
      ChatTemplateKind::kLlama3);
}

// A small SentencePiece vocabulary laid out as Gemma's (<pad> <eos> <bos> <unk>, the turn
// markers as control tokens), with `chat_template` if not empty.
struct GemmaLikeFile {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

std::unique_ptr<GemmaLikeFile> BuildGemmaLike(const std::string& chat_template,
                                              bool with_end_of_turn = true) {
  std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>"};
  std::vector<int32_t> types = {3, 3, 3, 2, 3};  // control, except <unk> (unknown)
  if (with_end_of_turn) {
    tokens.push_back("<end_of_turn>");
    types.push_back(3);
  }
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    tokens.push_back(hex);
    types.push_back(6);  // byte
  }
  for (const char* piece : {"user", "model", "Hi", "\xE2\x96\x81"}) {
    tokens.push_back(piece);
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size(), -1.0f);
  gguf::GgufWriter w;
  w.Add("tokenizer.ggml.model", gguf::MakeString("llama"));
  w.Add("tokenizer.ggml.tokens", gguf::MakeArrayOf(tokens));
  w.Add("tokenizer.ggml.token_type", gguf::MakeArrayOf(types));
  w.Add("tokenizer.ggml.scores", gguf::MakeArrayOf(scores));
  w.Add("tokenizer.ggml.bos_token_id", gguf::MakeValue<uint32_t>(2));
  w.Add("tokenizer.ggml.eos_token_id", gguf::MakeValue<uint32_t>(1));
  w.Add("tokenizer.ggml.add_bos_token", gguf::MakeValue<bool>(true));
  if (!chat_template.empty()) {
    w.Add("tokenizer.chat_template", gguf::MakeString(chat_template));
  }
  auto built = std::make_unique<GemmaLikeFile>();
  built->bytes = w.Serialize();
  auto file = gguf::GgufFile::FromBuffer(built->bytes.data(), built->bytes.size());
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return nullptr;
  built->file = std::move(*file);
  auto tok = Tokenizer::FromGguf(*built->file);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  if (!tok.ok()) return nullptr;
  built->tokenizer = std::move(*tok);
  return built;
}

TEST(ChatTemplateTest, GemmaTurnTokensSelectGemmaWhenTheFileHasNoTemplate) {
  auto built = BuildGemmaLike("");
  ASSERT_NE(built, nullptr);
  auto t = ChatTemplate::FromGguf(*built->file, *built->tokenizer);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kGemma);
  // Inferred, not read: flagged for the log, and the reason says so.
  EXPECT_TRUE(t->is_fallback());
  EXPECT_EQ(t->fallback_reason(),
            "the model has no tokenizer.chat_template; its vocabulary's "
            "<start_of_turn>/<end_of_turn> tokens select Gemma's format");
  // BOS is the tokenizer's, written once by the rendering, not again by the encoder.
  EXPECT_TRUE(t->renders_bos());
  const std::string prompt =
      MustRender(*t, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hi"}}, true);
  EXPECT_EQ(prompt,
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHi"
            "<end_of_turn>\n<start_of_turn>model\n");
  const bool add_bos = built->tokenizer->add_bos() && !t->renders_bos();
  EXPECT_FALSE(add_bos);
  auto ids = built->tokenizer->Encode(prompt, add_bos, /*parse_special=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 2), 1);  // <bos>
  EXPECT_EQ(ids->front(), 2);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 4), 3);  // <start_of_turn>
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 5), 2);  // <end_of_turn>

  // Generation stops at <end_of_turn> and at <eos>, with no template needed.
  EXPECT_EQ(built->tokenizer->eot_id(), 5);
  EXPECT_TRUE(built->tokenizer->IsEndOfGeneration(5));
  EXPECT_TRUE(built->tokenizer->IsEndOfGeneration(1));
  EXPECT_FALSE(built->tokenizer->IsEndOfGeneration(4));
}

TEST(ChatTemplateTest, GemmaVocabularyFallbackNeedsBothTurnTokensAndNoTemplate) {
  // A template in the file wins over the vocabulary.
  auto chatml = BuildGemmaLike("{{ '<|im_start|>' + message['role'] }}");
  ASSERT_NE(chatml, nullptr);
  auto t = ChatTemplate::FromGguf(*chatml->file, *chatml->tokenizer);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kChatMl);
  EXPECT_FALSE(t->is_fallback());
  // So does Gemma's own template (not a fallback then).
  auto gemma = BuildGemmaLike(std::string(kGemma3Template));
  ASSERT_NE(gemma, nullptr);
  t = ChatTemplate::FromGguf(*gemma->file, *gemma->tokenizer);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kGemma);
  EXPECT_FALSE(t->is_fallback());
  // <start_of_turn> alone is not Gemma's format: the ChatML fallback, as for any vocabulary.
  auto half = BuildGemmaLike("", /*with_end_of_turn=*/false);
  ASSERT_NE(half, nullptr);
  t = ChatTemplate::FromGguf(*half->file, *half->tokenizer);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kChatMl);
  EXPECT_EQ(t->fallback_reason(), "the model has no tokenizer.chat_template; using ChatML");
}

// The reason quotes the template, which comes from an untrusted model file, into the log: it
// must stay one line of valid UTF-8 (found by chat_template_fuzz: a 60-byte cut split a
// character, and the template's newlines and control bytes were copied as they are).
TEST(ChatTemplateTest, FallbackReasonIsOneLineOfValidUtf8) {
  std::string jinja = "\x04{{ x }}\n\t ";
  for (int i = 0; i < 80; ++i) jinja += "\xC3\xA9";  // "é": byte 60 falls inside one
  jinja += "\xFF";
  const ChatTemplate t = ChatTemplate::FromTemplateText(jinja, "", "");
  ASSERT_TRUE(t.is_fallback());
  const std::string& reason = t.fallback_reason();
  EXPECT_EQ(FindInvalidUtf8(reason), std::string::npos) << reason;
  for (char c : reason) {
    EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && c != 0x7F)
        << ::testing::PrintToString(reason);
  }
  EXPECT_NE(reason.find("'\\x04{{ x }}\\n\\t \xC3\xA9"), std::string::npos) << reason;
  EXPECT_NE(reason.find("\xC3\xA9...'"), std::string::npos) << reason;
  // Short and invalid: the bad byte is replaced, nothing is cut.
  const ChatTemplate bad = ChatTemplate::FromTemplateText("{{ \xFF }}", "", "");
  EXPECT_NE(bad.fallback_reason().find("'{{ \xEF\xBF\xBD }}'"), std::string::npos)
      << bad.fallback_reason();
}

}  // namespace
}  // namespace streamd::tokenizer
