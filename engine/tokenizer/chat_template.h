// Chat templates: renders a conversation into the prompt text a chat model was trained on.
//
// GGUF files carry the model's Jinja template in tokenizer.chat_template. We do not run Jinja;
// we recognise the template family and render it in C++, reproducing the Jinja output byte for
// byte (tests compare with jinja2's rendering of the real templates):
//   ChatML  (contains "<|im_start|>"), e.g. SmolLM2. A literal
//           "<|im_start|>system\n...<|im_end|>\n" in the template is the default system
//           message, rendered when the first message is not a system message.
//   Llama-2 (contains "[INST]" and "<<SYS>>"): the system message is folded into the first
//           user turn; roles must alternate user/assistant; no generation prompt exists.
//   Llama-3 (contains "<|start_header_id|>"): the 3.0 form, contents trimmed. The 3.1/3.2/3.3
//           form (the template says "Cutting Knowledge Date:") always opens with a system turn
//           whose text starts with the knowledge date and "Today Date: " + the template's
//           fixed date_string ("26 Jul 2024"), followed by the (trimmed) system message if
//           the conversation starts with one. Llama 3.2's template would take today's date
//           from strftime_now(); we keep the fixed one, so a prompt (and a session that lasts
//           past midnight) never depends on the day it was rendered. Tool calls are not
//           rendered.
//   Gemma   (contains "<start_of_turn>"; checked after the three above), Gemma 2 and 3:
//           BOS, then "<start_of_turn>" role "\n" content "<end_of_turn>\n" per message with
//           role "user" or "model" (for "assistant"), contents trimmed;
//           "<start_of_turn>model\n" as the generation prompt. There is no system turn: a
//           leading system message opens the first user turn, followed by the template's
//           separator ("\n\n" in Gemma 3's, which we also use for Gemma 2's, whose template
//           refuses system messages). Roles must alternate user/assistant after it, and a
//           system message must be followed by a user one (Jinja would silently drop it).
// A missing or unrecognised template falls back to plain ChatML and says so through
// is_fallback()/fallback_reason(), for the caller to log: a wrong prompt format degrades
// answers, while refusing to chat at all would make such models unusable. One exception in
// FromGguf(): a file without a template whose vocabulary has "<start_of_turn>" and
// "<end_of_turn>" as special tokens (Gemma base models) gets Gemma's format, still flagged as
// a fallback since the format was inferred, not read.
//
// The rendered text contains special-token texts; encode it with parse_special = true, and
// add BOS only if the model wants one and renders_bos() is false.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/status.h"

namespace streamd::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (ChatML accepts any role)
  std::string content;
};

enum class ChatTemplateKind { kChatMl, kLlama2, kLlama3, kGemma };

class ChatTemplate {
 public:
  // Detects the template in tokenizer.chat_template; BOS/EOS texts come from `tokenizer`.
  // Without the key, Gemma's turn tokens in `tokenizer` select Gemma's format (a fallback).
  // Errors only when the key exists with a non-string type.
  static StatusOr<ChatTemplate> FromGguf(const gguf::GgufFile& file, const Tokenizer& tokenizer);
  // Detects from template text directly ("" = no template).
  static ChatTemplate FromTemplateText(std::string_view jinja, std::string bos_text,
                                       std::string eos_text);

  // Renders `messages`; with `add_generation_prompt`, ends with the opening of an assistant
  // turn. Errors: INVALID_ARGUMENT for a conversation the template rejects (Llama-2 and
  // Gemma roles).
  StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                               bool add_generation_prompt) const;

  ChatTemplateKind kind() const { return kind_; }
  std::string_view kind_name() const;
  bool is_fallback() const { return !fallback_reason_.empty(); }
  const std::string& fallback_reason() const { return fallback_reason_; }
  // Whether Render() writes the BOS token's text itself (Llama-2, Llama-3, Gemma).
  bool renders_bos() const { return kind_ != ChatTemplateKind::kChatMl; }
  // ChatML only: the default system turn, verbatim, if the template has one.
  const std::optional<std::string>& default_system_turn() const { return default_system_; }
  // Llama-3.1+ only: the text the system turn always starts with, e.g. "Cutting Knowledge
  // Date: December 2023\nToday Date: 26 Jul 2024\n\n"; empty for every other template.
  const std::string& system_preamble() const { return system_preamble_; }

 private:
  ChatTemplate() = default;
  std::string RenderChatMl(std::span<const ChatMessage> messages, bool add_generation) const;
  StatusOr<std::string> RenderLlama2(std::span<const ChatMessage> messages) const;
  std::string RenderLlama3(std::span<const ChatMessage> messages, bool add_generation) const;
  StatusOr<std::string> RenderGemma(std::span<const ChatMessage> messages,
                                    bool add_generation) const;

  ChatTemplateKind kind_ = ChatTemplateKind::kChatMl;
  std::string fallback_reason_;
  std::optional<std::string> default_system_;
  std::string system_preamble_;
  std::string gemma_system_separator_;  // Gemma only: between the system and first user text
  std::string bos_text_;
  std::string eos_text_;
};

}  // namespace streamd::tokenizer
