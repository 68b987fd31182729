// ChatFormatter: turns one Append{role, text} into the tokens of one chat turn of the model's
// template, turn by turn, so that a session can be a conversation of unbounded length (the
// template is never re-rendered over the whole history).
//
// Each turn's framing is learned once from the template by rendering a placeholder message and
// splitting around it: for ChatML, "<|im_start|>user\n" + content + "<|im_end|>\n". Framing is
// encoded with special tokens parsed; the content never is, so user text cannot forge template
// markers. The session's first turn is rendered as a conversation's first message (ChatML
// adds the template's default system turn before a first non-system message).
//
// The per-session ChatState says which turn is open:
//   kNone               raw input, or an assistant turn the client appended itself
//   kAwaitingAssistant  a system/user turn ended: the next Generate opens an assistant turn
//   kAssistantOpen      the model is (or was) answering; the turn is not closed yet
//   kAssistantClosed    the answer ended with an end-of-generation token (<|im_end|>), which
//                       is in the context; the rest of the turn's closing ("\n") is not
//   kSystemOpen         a template without a system turn of its own (Gemma, Llama-2) folds a
//                       system message into the user turn after it: the system text opened
//                       that turn, and the next user message continues it (a Generate or an
//                       assistant turn closes it)
// A following chat Append first closes what is open. Raw input resets the state to kNone.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/status.h"

namespace streamd {

enum class ChatRoleKind { kSystem = 0, kUser = 1, kAssistant = 2 };

// The values are stored in snapshots (their digit): append only.
enum class ChatState { kNone, kAwaitingAssistant, kAssistantOpen, kAssistantClosed, kSystemOpen };

class ChatFormatter {
 public:
  // Learns the framing from `chat`. Roles the template cannot render alone (Llama-2 has no
  // system-only or assistant-first conversation) are rejected at Append time.
  ChatFormatter(const tokenizer::ChatTemplate& chat, const tokenizer::Tokenizer& tokenizer);

  // Tokens for one turn appended in `*state`; `first_input` when the session has no context
  // yet (BOS, when the model wants it and the template does not write it, and the default
  // system turn come first). Updates *state.
  StatusOr<std::vector<int32_t>> Turn(ChatRoleKind role, const std::string& content,
                                      bool first_input, ChatState* state) const;
  // Tokens that open the assistant's answer when a Generate follows a system/user turn
  // (empty otherwise). Updates *state.
  std::vector<int32_t> GenerationPrompt(ChatState* state) const;
  // Raw text: BOS on first input when the model wants it; special tokens only if asked.
  StatusOr<std::vector<int32_t>> Raw(const std::string& text, bool parse_special, bool first_input,
                                     ChatState* state) const;
  // A generation ended: an end-of-generation token closes an open assistant turn.
  static void OnGenerationEnd(bool end_of_generation, ChatState* state);

  std::string_view template_name() const { return template_name_; }

 private:
  struct Framing {
    bool ok = false;
    std::string error;   // why the template cannot render this turn
    std::string prefix;  // before the content
    std::string suffix;  // after it
  };
  std::vector<int32_t> EncodeSpecial(const std::string& text) const;
  // One turn's tokens: BOS if asked, `open` and `close` encoded with special tokens, the content
  // without (so user text cannot forge template markers).
  StatusOr<std::vector<int32_t>> Framed(bool bos, const std::string& open,
                                        const std::string& content, const std::string& close) const;
  // What closes whatever turn `state` has open before another turn starts ("" if none).
  std::string CloseOpenTurn(ChatState state) const;
  // A system message on a template that folds it into the next user turn (Gemma).
  StatusOr<std::vector<int32_t>> FoldedSystem(const std::string& content, bool first_input,
                                              ChatState* state) const;

  const tokenizer::Tokenizer& tokenizer_;
  std::string template_name_;
  bool bos_first_ = false;
  std::array<Framing, 3> first_;  // a conversation's first message, by role
  std::array<Framing, 3> next_;   // any later message, by role
  std::string generation_prompt_;
  std::string close_assistant_;  // closes an open assistant turn
  std::string close_after_eog_;  // the rest of it after an end-of-generation token
  // Templates without a system turn that fold a system message into the next user turn
  // (learned from the rendering of [system, user]): what opens that turn before the system
  // text, at a conversation's start (fold_first_prefix_) and later (next_ user's prefix and
  // fold_open_), what joins the system text to the user's, and what closes the turn.
  // fold_open_ is what the template puts before the system text inside the user turn: "" for
  // Gemma, "<<SYS>>\n" for Llama-2.
  bool folds_system_ = false;
  std::string fold_first_prefix_;
  std::string fold_open_;
  std::string fold_join_;
  std::string fold_close_;
};

}  // namespace streamd
