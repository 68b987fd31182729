#include "engine/sessions/chat_formatter.h"

#include <span>
#include <utility>

namespace streamd {
namespace {

using tokenizer::ChatMessage;

// Stands for the content while the framing is learned; no template adds or trims around it.
constexpr std::string_view kPlaceholder = "STREAMD_CONTENT_PLACEHOLDER_7f3a";
constexpr std::array<const char*, 3> kRoleNames = {"system", "user", "assistant"};

// The framing of the last message of `messages` when `base` (all but it) renders as a prefix.
StatusOr<std::pair<std::string, std::string>> SplitLast(const tokenizer::ChatTemplate& chat,
                                                        std::vector<ChatMessage> messages) {
  std::string base;
  if (messages.size() > 1) {
    STREAMD_ASSIGN_OR_RETURN(
        base,
        chat.Render(std::span<const ChatMessage>(messages.data(), messages.size() - 1), false));
  }
  STREAMD_ASSIGN_OR_RETURN(std::string all, chat.Render(messages, false));
  if (all.compare(0, base.size(), base) != 0) {
    return FailedPreconditionError("the template does not render turns incrementally");
  }
  all.erase(0, base.size());
  const size_t at = all.find(kPlaceholder);
  if (at == std::string::npos) return FailedPreconditionError("the template drops the content");
  return std::make_pair(all.substr(0, at), all.substr(at + kPlaceholder.size()));
}

}  // namespace

ChatFormatter::ChatFormatter(const tokenizer::ChatTemplate& chat,
                             const tokenizer::Tokenizer& tokenizer)
    : tokenizer_(tokenizer), template_name_(chat.kind_name()) {
  bos_first_ = tokenizer.add_bos() && tokenizer.bos_id() >= 0 && !chat.renders_bos();
  const std::string content(kPlaceholder);
  // Earlier conversations a later turn may follow; the first one the template accepts wins.
  const std::vector<std::vector<ChatMessage>> bases = {
      {{"system", "x"}}, {{"user", "x"}}, {{"user", "x"}, {"assistant", "y"}}};
  for (size_t r = 0; r < kRoleNames.size(); ++r) {
    const ChatMessage message{kRoleNames[r], content};
    auto first = SplitLast(chat, {message});
    if (first.ok()) {
      first_[r] = {true, "", first->first, first->second};
    } else {
      first_[r].error = first.status().message();
    }
    for (const auto& base : bases) {
      std::vector<ChatMessage> messages = base;
      messages.push_back(message);
      auto next = SplitLast(chat, messages);
      if (next.ok()) {
        next_[r] = {true, "", next->first, next->second};
        break;
      }
      next_[r].error = next.status().message();
    }
  }
  // No system turn of its own (Gemma): a system message may still open the user turn after it.
  const size_t system = static_cast<size_t>(ChatRoleKind::kSystem);
  const size_t user_role = static_cast<size_t>(ChatRoleKind::kUser);
  if (!first_[system].ok && next_[user_role].ok) {
    constexpr std::string_view kSecond = "STREAMD_SECOND_PLACEHOLDER_c41e";
    auto folded = chat.Render(
        std::vector<ChatMessage>{{"system", content}, {"user", std::string(kSecond)}}, false);
    if (folded.ok()) {
      const size_t a = folded->find(kPlaceholder);
      const size_t b = folded->find(kSecond);
      if (a != std::string::npos && b != std::string::npos && a < b) {
        folds_system_ = true;
        fold_first_prefix_ = folded->substr(0, a);
        fold_join_ = folded->substr(a + kPlaceholder.size(), b - a - kPlaceholder.size());
        fold_close_ = folded->substr(b + kSecond.size());
        // The system text's own opening inside the user turn, after what opens a first user
        // turn; later in a session it follows the later user turn's opening.
        const Framing& first_user = first_[user_role];
        if (first_user.ok &&
            fold_first_prefix_.compare(0, first_user.prefix.size(), first_user.prefix) == 0) {
          fold_open_ = fold_first_prefix_.substr(first_user.prefix.size());
        }
      }
    }
  }
  const std::vector<ChatMessage> user = {{"user", "x"}};
  auto without = chat.Render(user, false);
  auto with = chat.Render(user, true);
  if (without.ok() && with.ok() && with->compare(0, without->size(), *without) == 0) {
    generation_prompt_ = with->substr(without->size());
  }
  const Framing& assistant = next_[static_cast<size_t>(ChatRoleKind::kAssistant)];
  if (assistant.ok) {
    close_assistant_ = assistant.suffix;
    close_after_eog_ = assistant.suffix;
    // The model ends its answer with the end-of-generation token itself; whitespace the
    // template puts before it (Llama-2's " </s>") is formatting the model never writes.
    const size_t eog_at = close_assistant_.find_first_not_of(" \n");
    const std::string_view closing =
        eog_at == std::string::npos ? "" : std::string_view(close_assistant_).substr(eog_at);
    for (int32_t id : tokenizer.end_of_generation_ids()) {
      const std::string piece = tokenizer.TokenToPiece(id);
      if (!piece.empty() && closing.substr(0, piece.size()) == piece) {
        close_after_eog_ = std::string(closing.substr(piece.size()));
        break;
      }
    }
  }
}

std::vector<int32_t> ChatFormatter::EncodeSpecial(const std::string& text) const {
  if (text.empty()) return {};
  // Template framing is valid UTF-8 of a bounded size: encoding cannot fail.
  auto tokens = tokenizer_.Encode(text, /*add_bos=*/false, /*parse_special=*/true);
  return tokens.ok() ? std::move(tokens).value() : std::vector<int32_t>{};
}

StatusOr<std::vector<int32_t>> ChatFormatter::Framed(bool bos, const std::string& open,
                                                     const std::string& content,
                                                     const std::string& close) const {
  std::vector<int32_t> tokens;
  if (bos) tokens.push_back(tokenizer_.bos_id());
  const std::vector<int32_t> head = EncodeSpecial(open);
  tokens.insert(tokens.end(), head.begin(), head.end());
  STREAMD_ASSIGN_OR_RETURN(std::vector<int32_t> body,
                           tokenizer_.Encode(content, /*add_bos=*/false, /*parse_special=*/false));
  tokens.insert(tokens.end(), body.begin(), body.end());
  const std::vector<int32_t> tail = EncodeSpecial(close);
  tokens.insert(tokens.end(), tail.begin(), tail.end());
  return tokens;
}

std::string ChatFormatter::CloseOpenTurn(ChatState state) const {
  switch (state) {
    case ChatState::kAssistantOpen:
      return close_assistant_;
    case ChatState::kAssistantClosed:
      return close_after_eog_;
    case ChatState::kSystemOpen:
      return fold_close_;
    default:
      return "";
  }
}

StatusOr<std::vector<int32_t>> ChatFormatter::FoldedSystem(const std::string& content,
                                                           bool first_input,
                                                           ChatState* state) const {
  // A second system message joins the first in the same open turn; otherwise the turn opens as
  // a user turn would, and the system text comes first in it.
  std::string open;  // nothing when a system message already opened the turn
  if (*state != ChatState::kSystemOpen) {
    open = first_input ? fold_first_prefix_
                       : CloseOpenTurn(*state) +
                             next_[static_cast<size_t>(ChatRoleKind::kUser)].prefix + fold_open_;
  }
  STREAMD_ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                           Framed(first_input && bos_first_, open, content, fold_join_));
  *state = ChatState::kSystemOpen;
  return tokens;
}

StatusOr<std::vector<int32_t>> ChatFormatter::Turn(ChatRoleKind role, const std::string& content,
                                                   bool first_input, ChatState* state) const {
  const size_t r = static_cast<size_t>(role);
  if (role == ChatRoleKind::kSystem && folds_system_) {
    return FoldedSystem(content, first_input, state);
  }
  // The user message that continues a folded system message's turn: no opening of its own.
  const bool continues = *state == ChatState::kSystemOpen && role == ChatRoleKind::kUser;
  const Framing& f = first_input ? first_[r] : next_[r];
  if (!f.ok && !continues) {
    return FailedPreconditionError("append.role " + std::string(kRoleNames[r]) +
                                   ": the model's chat template (" + template_name_ +
                                   ") cannot render this turn here: " + f.error);
  }
  if (continues) {
    STREAMD_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, Framed(false, "", content, fold_close_));
    *state = ChatState::kAwaitingAssistant;
    return tokens;
  }
  STREAMD_ASSIGN_OR_RETURN(
      std::vector<int32_t> tokens,
      Framed(first_input && bos_first_, CloseOpenTurn(*state) + f.prefix, content, f.suffix));
  *state = role == ChatRoleKind::kAssistant ? ChatState::kNone : ChatState::kAwaitingAssistant;
  return tokens;
}

std::vector<int32_t> ChatFormatter::GenerationPrompt(ChatState* state) const {
  // A folded system message with no user message after it: its turn closes, then the answer's
  // opens (what the template renders for a conversation of that system text alone as a user's).
  if (*state == ChatState::kSystemOpen) {
    *state = ChatState::kAssistantOpen;
    return EncodeSpecial(fold_close_ + generation_prompt_);
  }
  if (*state != ChatState::kAwaitingAssistant) return {};
  *state = ChatState::kAssistantOpen;
  return EncodeSpecial(generation_prompt_);
}

StatusOr<std::vector<int32_t>> ChatFormatter::Raw(const std::string& text, bool parse_special,
                                                  bool first_input, ChatState* state) const {
  const bool bos = first_input && tokenizer_.add_bos() && tokenizer_.bos_id() >= 0;
  STREAMD_ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                           tokenizer_.Encode(text, bos, parse_special));
  *state = ChatState::kNone;
  return tokens;
}

void ChatFormatter::OnGenerationEnd(bool end_of_generation, ChatState* state) {
  if (*state == ChatState::kAssistantOpen && end_of_generation) {
    *state = ChatState::kAssistantClosed;
  }
}

}  // namespace streamd
