#include "engine/tokenizer/chat_template.h"

#include <vector>

#include "engine/tokenizer/utf8.h"

namespace streamd::tokenizer {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";
constexpr std::string_view kEndOfTurn = "<end_of_turn>";
// What Gemma 3's template puts between the system text and the first user message.
constexpr std::string_view kGemmaSystemSeparator = "\n\n";

// Python's str.isspace(), which Jinja's trim filter and str.strip() use.
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Python's str.strip() on UTF-8 text (invalid bytes are never spaces).
std::string_view PythonStrip(std::string_view s) {
  std::vector<std::pair<size_t, bool>> chars;  // (offset, is_space) of each code point
  for (size_t pos = 0; pos < s.size();) {
    size_t length = 0;
    char32_t cp = 0;
    const bool valid = DecodeUtf8(s.substr(pos), &length, &cp) == Utf8Status::kValid;
    chars.push_back({pos, valid && IsPythonSpace(cp)});
    pos += length;
  }
  size_t first = 0;
  while (first < chars.size() && chars[first].second) ++first;
  size_t last = chars.size();
  while (last > first && chars[last - 1].second) --last;
  if (first == last) return {};
  const size_t begin = chars[first].first;
  const size_t end = last < chars.size() ? chars[last].first : s.size();
  return s.substr(begin, end - begin);
}

// Reads the Jinja (Python) string literal whose opening quote is at jinja[*i], unescaping it;
// leaves *i on the closing quote (or at the end of an unterminated literal).
std::string ReadJinjaLiteral(std::string_view jinja, size_t* i) {
  const char quote = jinja[*i];
  std::string literal;
  for (++*i; *i < jinja.size() && jinja[*i] != quote; ++*i) {
    if (jinja[*i] != '\\' || *i + 1 == jinja.size()) {
      literal.push_back(jinja[*i]);
      continue;
    }
    const char next = jinja[++*i];
    switch (next) {
      case 'n':
        literal.push_back('\n');
        break;
      case 't':
        literal.push_back('\t');
        break;
      case 'r':
        literal.push_back('\r');
        break;
      case '\\':
      case '\'':
      case '"':
        literal.push_back(next);
        break;
      default:
        literal.push_back('\\');
        literal.push_back(next);
        break;
    }
  }
  return literal;
}

// The string literals inside the {{ }} and {% %} tags of a Jinja template, unescaped the way
// Jinja (Python) reads them. Enough to find fixed texts; not a Jinja parser.
std::vector<std::string> JinjaStringLiterals(std::string_view jinja) {
  std::vector<std::string> literals;
  bool in_tag = false;
  for (size_t i = 0; i < jinja.size(); ++i) {
    const std::string_view rest = jinja.substr(i);
    if (!in_tag) {
      if (rest.starts_with("{{") || rest.starts_with("{%")) {
        in_tag = true;
        ++i;
      }
      continue;
    }
    if (rest.starts_with("}}") || rest.starts_with("%}")) {
      in_tag = false;
      ++i;
      continue;
    }
    if (jinja[i] != '\'' && jinja[i] != '"') continue;
    literals.push_back(ReadJinjaLiteral(jinja, &i));
  }
  return literals;
}

// The first `max_chars` characters of untrusted `text` as one printable line of valid UTF-8,
// for a log message: invalid bytes become U+FFFD, control characters are escaped ("\n",
// "\x04"), and "..." marks a cut.
std::string QuoteForLog(std::string_view text, size_t max_chars) {
  std::string out;
  size_t pos = 0;
  for (size_t chars = 0; pos < text.size() && chars < max_chars; ++chars) {
    size_t length = 0;
    char32_t cp = 0;
    if (DecodeUtf8(text.substr(pos), &length, &cp) != Utf8Status::kValid) {
      out.append(kReplacementChar);
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp < 0x20 || cp == 0x7F) {
      static constexpr char kHex[] = "0123456789abcdef";
      out.append("\\x").push_back(kHex[cp >> 4]);
      out.push_back(kHex[cp & 0xF]);
    } else {
      out.append(text.substr(pos, length));
    }
    pos += length;
  }
  if (pos < text.size()) out.append("...");
  return out;
}

// Llama 3.1+'s system preamble: the template's knowledge-date literal and "Today Date: " with
// the literal its date_string defaults to; "" when the template has no knowledge date (3.0).
std::string Llama3SystemPreamble(std::string_view jinja) {
  constexpr std::string_view kKnowledge = "Cutting Knowledge Date:";
  constexpr std::string_view kDateSet = "date_string = ";
  std::string knowledge;
  for (std::string& literal : JinjaStringLiterals(jinja)) {
    if (literal.starts_with(kKnowledge)) {
      knowledge = std::move(literal);
      break;
    }
  }
  if (knowledge.empty()) return "";
  // {%- set date_string = "26 Jul 2024" %}: the first assignment of a string literal (3.2
  // first tries date_string = strftime_now(...), which we skip).
  std::string date = "26 Jul 2024";
  for (size_t at = jinja.find(kDateSet); at != std::string_view::npos;
       at = jinja.find(kDateSet, at)) {
    at += kDateSet.size();
    const char quote = at < jinja.size() ? jinja[at] : '\0';
    if (quote != '"' && quote != '\'') continue;
    const size_t end = jinja.find(quote, at + 1);
    if (end == std::string_view::npos) break;
    date = std::string(jinja.substr(at + 1, end - at - 1));
    break;
  }
  return knowledge + "Today Date: " + date + "\n\n";
}

// Gemma 3 folds a leading system message into the first user turn, {%- set first_user_prefix =
// messages[0]['content'] + '\n\n' -%}: the literal after the '+' is the separator. The default
// (Gemma 3's) when the template has no such literal (Gemma 2's refuses a system message).
std::string GemmaSystemSeparator(std::string_view jinja) {
  constexpr std::string_view kSet = "first_user_prefix = messages[0]['content'] + ";
  size_t at = jinja.find(kSet);
  if (at == std::string_view::npos) return std::string(kGemmaSystemSeparator);
  at += kSet.size();
  if (at >= jinja.size() || (jinja[at] != '\'' && jinja[at] != '"')) {
    return std::string(kGemmaSystemSeparator);
  }
  std::string separator = ReadJinjaLiteral(jinja, &at);
  // An unterminated literal is a broken template, not a separator.
  return at < jinja.size() ? separator : std::string(kGemmaSystemSeparator);
}

// For the templates without a system turn of their own (Llama-2, Gemma), which fold a leading
// system message into the first user turn: takes that message off `*messages`. Jinja renders a
// system message that no other message follows as nothing, losing its text; we refuse it.
// ChatFormatter (engine/sessions) also relies on the refusal: it learns a later user turn's
// framing from the first short conversation that renders, and [system] rendering as nothing
// would put that conversation's placeholder system text into the framing.
StatusOr<std::optional<std::string_view>> TakeLeadingSystem(std::span<const ChatMessage>* messages,
                                                            std::string_view family,
                                                            std::string_view how_it_folds) {
  if (messages->empty() || messages->front().role != "system") {
    return std::optional<std::string_view>();
  }
  const std::string_view system = messages->front().content;
  *messages = messages->subspan(1);
  if (messages->empty()) {
    return InvalidArgumentError(std::string(family) +
                                " chat: a system message must be followed by a user message (" +
                                std::string(how_it_folds) + ")");
  }
  return std::optional<std::string_view>(system);
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::FromGguf(const gguf::GgufFile& file,
                                              const Tokenizer& tokenizer) {
  STREAMD_ASSIGN_OR_RETURN(std::string jinja, file.GetStringOr("tokenizer.chat_template", ""));
  ChatTemplate t = FromTemplateText(jinja, std::string(tokenizer.TokenText(tokenizer.bos_id())),
                                    std::string(tokenizer.TokenText(tokenizer.eos_id())));
  // No template, but Gemma's turn markers as special tokens: a Gemma file without its template
  // (the base models' GGUFs), whose prompts must use those markers rather than ChatML's.
  auto special = [&tokenizer](std::string_view text) {
    const std::optional<int32_t> id = tokenizer.FindToken(text);
    return id.has_value() && tokenizer.IsSpecial(*id);
  };
  if (jinja.empty() && special(kStartOfTurn) && special(kEndOfTurn)) {
    t.kind_ = ChatTemplateKind::kGemma;
    t.gemma_system_separator_ = std::string(kGemmaSystemSeparator);
    t.fallback_reason_ =
        "the model has no tokenizer.chat_template; its vocabulary's <start_of_turn>/<end_of_turn> "
        "tokens select Gemma's format";
  }
  return t;
}

ChatTemplate ChatTemplate::FromTemplateText(std::string_view jinja, std::string bos_text,
                                            std::string eos_text) {
  ChatTemplate t;
  t.bos_text_ = std::move(bos_text);
  t.eos_text_ = std::move(eos_text);
  if (jinja.find(kImStart) != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::kChatMl;
    const std::string prefix = std::string(kImStart) + "system\n";
    const std::string suffix = std::string(kImEnd) + "\n";
    for (std::string& literal : JinjaStringLiterals(jinja)) {
      if (literal.size() > prefix.size() + suffix.size() && literal.starts_with(prefix) &&
          literal.ends_with(suffix)) {
        t.default_system_ = std::move(literal);
        break;
      }
    }
  } else if (jinja.find("<|start_header_id|>") != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::kLlama3;
    t.system_preamble_ = Llama3SystemPreamble(jinja);
  } else if (jinja.find("[INST]") != std::string_view::npos &&
             jinja.find("<<SYS>>") != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::kLlama2;
  } else if (jinja.find(kStartOfTurn) != std::string_view::npos) {
    t.kind_ = ChatTemplateKind::kGemma;
    t.gemma_system_separator_ = GemmaSystemSeparator(jinja);
  } else {
    t.kind_ = ChatTemplateKind::kChatMl;
    t.fallback_reason_ =
        jinja.empty() ? "the model has no tokenizer.chat_template; using ChatML"
                      : "tokenizer.chat_template is not a supported template (ChatML, Llama-2 "
                        "[INST], Llama-3 headers, Gemma <start_of_turn>): '" +
                            QuoteForLog(jinja, 60) + "'; using ChatML";
  }
  return t;
}

std::string_view ChatTemplate::kind_name() const {
  switch (kind_) {
    case ChatTemplateKind::kChatMl:
      return "chatml";
    case ChatTemplateKind::kLlama2:
      return "llama2";
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kGemma:
      return "gemma";
  }
  return "chatml";
}

StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) const {
  switch (kind_) {
    case ChatTemplateKind::kChatMl:
      return RenderChatMl(messages, add_generation_prompt);
    case ChatTemplateKind::kLlama2:
      return RenderLlama2(messages);
    case ChatTemplateKind::kLlama3:
      return RenderLlama3(messages, add_generation_prompt);
    case ChatTemplateKind::kGemma:
      return RenderGemma(messages, add_generation_prompt);
  }
  return InternalError("unknown chat template kind");
}

std::string ChatTemplate::RenderChatMl(std::span<const ChatMessage> messages,
                                       bool add_generation) const {
  std::string out;
  // SmolLM2: {% if loop.first and messages[0]['role'] != 'system' %}{{ default }}{% endif %}
  // inside the message loop, so an empty conversation gets no system turn.
  if (default_system_ && !messages.empty() && messages.front().role != "system") {
    out += *default_system_;
  }
  for (const ChatMessage& m : messages) {
    out.append(kImStart).append(m.role).append("\n").append(m.content).append(kImEnd);
    out += '\n';
  }
  if (add_generation) out.append(kImStart).append("assistant\n");
  return out;
}

StatusOr<std::string> ChatTemplate::RenderLlama2(std::span<const ChatMessage> messages) const {
  STREAMD_ASSIGN_OR_RETURN(
      std::optional<std::string_view> leading,
      TakeLeadingSystem(&messages, "Llama-2",
                        "the system text opens the first user turn in <<SYS>> ... <</SYS>>"));
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool expect_user = i % 2 == 0;
    if ((m.role == "user") != expect_user || (!expect_user && m.role != "assistant")) {
      return InvalidArgumentError("Llama-2 chat: message " + std::to_string(i) + " has role '" +
                                  m.role +
                                  "'; roles must alternate user/assistant after an "
                                  "optional leading system message");
    }
    std::string content = m.content;
    if (i == 0 && leading) {
      content = "<<SYS>>\n" + std::string(*leading) + "\n<</SYS>>\n\n" + m.content;
    }
    if (expect_user) {
      out.append(bos_text_).append("[INST] ").append(PythonStrip(content)).append(" [/INST]");
    } else {
      out.append(" ").append(PythonStrip(content)).append(" ").append(eos_text_);
    }
  }
  return out;
}

std::string ChatTemplate::RenderLlama3(std::span<const ChatMessage> messages,
                                       bool add_generation) const {
  std::string out;
  auto append_turn = [&out](std::string_view role, std::string_view content) {
    out.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n");
    out.append(PythonStrip(content)).append("<|eot_id|>");
  };
  // Jinja renders the 3.1+ system turn for an empty conversation too; we render nothing
  // unless a generation prompt follows, so every shorter conversation stays a prefix of a
  // longer one (what rendering turn by turn relies on).
  const bool preamble = !system_preamble_.empty() && (!messages.empty() || add_generation);
  if (!messages.empty() || preamble) out += bos_text_;
  if (preamble) {
    std::string system = system_preamble_;
    if (!messages.empty() && messages.front().role == "system") {
      system.append(PythonStrip(messages.front().content));
      messages = messages.subspan(1);
    }
    // The template trims the system message but not the preamble before it.
    out.append("<|start_header_id|>system<|end_header_id|>\n\n").append(system);
    out.append("<|eot_id|>");
  }
  for (const ChatMessage& m : messages) append_turn(m.role, m.content);
  if (add_generation) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

StatusOr<std::string> ChatTemplate::RenderGemma(std::span<const ChatMessage> messages,
                                                bool add_generation) const {
  STREAMD_ASSIGN_OR_RETURN(
      std::optional<std::string_view> leading,
      TakeLeadingSystem(&messages, "Gemma",
                        "Gemma has no system turn; the system text opens the first user turn"));
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string_view want = i % 2 == 0 ? "user" : "assistant";
    if (messages[i].role != want) {
      return InvalidArgumentError("Gemma chat: message " + std::to_string(i + leading.has_value()) +
                                  " has role '" + messages[i].role +
                                  "'; roles must alternate user/assistant after an "
                                  "optional leading system message");
    }
  }
  std::string out;
  // As for Llama-3: an empty conversation without a generation prompt renders as nothing.
  if (!messages.empty() || add_generation) out += bos_text_;
  for (size_t i = 0; i < messages.size(); ++i) {
    out.append(kStartOfTurn).append(i % 2 == 0 ? "user\n" : "model\n");
    // The template trims each message but not the system text before the first one.
    if (i == 0 && leading) out.append(*leading).append(gemma_system_separator_);
    out.append(PythonStrip(messages[i].content)).append(kEndOfTurn).append("\n");
  }
  if (add_generation) out.append(kStartOfTurn).append("model\n");
  return out;
}

}  // namespace streamd::tokenizer
