// Chat rendering against jinja2: each expected string below was produced once by rendering the
// real template with Python's jinja2 (an independent reference), then pasted here.
#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"
#include "tests/support/tokenizer_test_util.h"

namespace streamd::tokenizer {
namespace {

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

// Hugging Face's Llama-2-chat template.
constexpr std::string_view kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% "
    "set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 "
    "== 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
    "%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + "
    "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

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
  const ChatTemplate unknown =
      ChatTemplate::FromTemplateText("{{ '<start_of_turn>' + message }}", "", "");
  EXPECT_TRUE(unknown.is_fallback());
  EXPECT_EQ(unknown.kind(), ChatTemplateKind::kChatMl);
  EXPECT_NE(unknown.fallback_reason().find("not a supported template"), std::string::npos);
  const ChatTemplate missing = ChatTemplate::FromTemplateText("", "", "");
  EXPECT_TRUE(missing.is_fallback());
  EXPECT_EQ(MustRender(missing, {{"user", "x"}}, true),
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
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
