// ChatFormatter on the families users bring: the real Qwen2.5, Llama 3.1 and Llama-2 templates
// with the real Qwen2, Llama-3 and Llama (SentencePiece) vocabularies (llama.cpp's, from
// $STREAMD_VOCAB_DIR: `scripts/fetch-test-vocab.sh --golden`; `make test` sets it). Turn by turn,
// the tokens must be the template's rendering of the same conversation, framing encoded with
// special tokens and content without.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/sessions/chat_formatter.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/chat_template_texts.h"
#include "tests/support/tokenizer_test_util.h"

namespace streamd {
namespace {

using Ids = std::vector<int32_t>;

struct Family {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatTemplate> chat;
};

// The vocabulary ggml-vocab-`vocab`.gguf with the template text `jinja_text`, or null after
// recording why not.
std::unique_ptr<Family> LoadFamilyWithTemplate(const std::string& vocab,
                                               std::string_view jinja_text) {
  const std::string dir = tokenizer::testing::VocabDirOrFail();
  if (dir.empty()) return nullptr;
  auto file = gguf::GgufFile::Open(dir + "/ggml-vocab-" + vocab + ".gguf");
  if (!file.ok()) {
    ADD_FAILURE() << file.status().ToString();
    return nullptr;
  }
  auto tok = tokenizer::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    ADD_FAILURE() << tok.status().ToString();
    return nullptr;
  }
  auto family = std::make_unique<Family>();
  family->tokenizer = std::move(tok).value();
  const tokenizer::Tokenizer& t = *family->tokenizer;
  family->chat =
      std::make_unique<tokenizer::ChatTemplate>(tokenizer::ChatTemplate::FromTemplateText(
          jinja_text, std::string(t.TokenText(t.bos_id())), std::string(t.TokenText(t.eos_id()))));
  return family;
}

// The vocabulary ggml-vocab-`vocab`.gguf with the template templates/`jinja`.jinja.
std::unique_ptr<Family> LoadFamily(const std::string& vocab, const std::string& jinja) {
  const std::string dir = tokenizer::testing::VocabDirOrFail();
  if (dir.empty()) return nullptr;
  std::ifstream in(dir + "/templates/" + jinja + ".jinja", std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (text.empty()) {
    ADD_FAILURE() << "missing " << dir << "/templates/" << jinja << ".jinja";
    return nullptr;
  }
  return LoadFamilyWithTemplate(vocab, text);
}

Ids Encode(const tokenizer::Tokenizer& tok, const std::string& text, bool special) {
  auto ids = tok.Encode(text, /*add_bos=*/false, special);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : Ids{};
}

void Append(Ids* to, const Ids& ids) { to->insert(to->end(), ids.begin(), ids.end()); }

// A user turn, the assistant's answer ending with an end-of-generation token, and a second
// user turn: the ids must equal the template's rendering of that conversation plus the
// generation prompt, with each content encoded on its own.
void ExpectTurnsMatchTemplate(const Family& family, std::string_view stop_token) {
  const tokenizer::Tokenizer& tok = *family.tokenizer;
  ChatFormatter formatter(*family.chat, tok);
  ChatState state = ChatState::kNone;
  Ids got;
  auto first = formatter.Turn(ChatRoleKind::kUser, "Hi!", /*first_input=*/true, &state);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Append(&got, *first);
  Append(&got, formatter.GenerationPrompt(&state));
  const Ids answer = Encode(tok, "Hello.", false);
  Append(&got, answer);
  auto stop = tok.FindToken(stop_token);
  ASSERT_TRUE(stop.has_value() && tok.IsEndOfGeneration(*stop)) << stop_token;
  got.push_back(*stop);
  ChatFormatter::OnGenerationEnd(/*end_of_generation=*/true, &state);
  auto second = formatter.Turn(ChatRoleKind::kUser, "Bye", /*first_input=*/false, &state);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  Append(&got, *second);
  Append(&got, formatter.GenerationPrompt(&state));

  // The reference: render the whole conversation with a marker for each content, then encode
  // the framing around the markers with special tokens and each content without.
  const std::vector<std::string> contents = {"Hi!", "Hello.", "Bye"};
  std::vector<tokenizer::ChatMessage> messages = {
      {"user", "\x01"}, {"assistant", "\x02"}, {"user", "\x03"}};
  auto rendered = family.chat->Render(messages, /*add_generation_prompt=*/true);
  ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
  Ids want;
  size_t pos = 0;
  for (size_t i = 0; i < contents.size(); ++i) {
    const size_t at = rendered->find(static_cast<char>(i + 1), pos);
    ASSERT_NE(at, std::string::npos);
    Append(&want, Encode(tok, rendered->substr(pos, at - pos), true));
    Append(&want, Encode(tok, contents[i], false));
    pos = at + 1;
  }
  Append(&want, Encode(tok, rendered->substr(pos), true));
  EXPECT_EQ(got, want) << "streamd: " << tok.Decode(got) << "\ntemplate: " << tok.Decode(want);
}

TEST(ChatFormatterFamilyTest, Qwen25TurnsMatchTheTemplate) {
  auto family = LoadFamily("qwen2", "Qwen-Qwen2.5-7B-Instruct");
  ASSERT_NE(family, nullptr);
  ASSERT_TRUE(family->chat->default_system_turn().has_value());
  ExpectTurnsMatchTemplate(*family, "<|im_end|>");
}

TEST(ChatFormatterFamilyTest, Llama31TurnsMatchTheTemplate) {
  auto family = LoadFamily("llama-bpe", "meta-llama-Llama-3.1-8B-Instruct");
  ASSERT_NE(family, nullptr);
  ASSERT_FALSE(family->chat->system_preamble().empty());
  ExpectTurnsMatchTemplate(*family, "<|eot_id|>");
}

// Appends the tokens of one turn (ASSERTs the formatter makes them).
void AppendTurn(const ChatFormatter& formatter, ChatRoleKind role, const std::string& text,
                bool first, ChatState* state, Ids* to) {
  auto ids = formatter.Turn(role, text, first, state);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  Append(to, *ids);
}

// The framing around `contents` as the template renders `messages`, where message contents hold
// the markers \x01, \x02, ... for contents[0], contents[1], ...: framing encoded with special
// tokens, each content without.
Ids TemplateIds(const tokenizer::ChatTemplate& chat, const tokenizer::Tokenizer& tok,
                const std::vector<tokenizer::ChatMessage>& messages,
                const std::vector<std::string>& contents, bool add_generation_prompt) {
  auto rendered = chat.Render(messages, add_generation_prompt);
  EXPECT_TRUE(rendered.ok()) << rendered.status().ToString();
  if (!rendered.ok()) return {};
  Ids want;
  size_t pos = 0;
  for (size_t i = 0; i < contents.size(); ++i) {
    const size_t at = rendered->find(static_cast<char>(i + 1), pos);
    EXPECT_NE(at, std::string::npos) << "marker " << i + 1;
    if (at == std::string::npos) return {};
    Append(&want, Encode(tok, rendered->substr(pos, at - pos), true));
    Append(&want, Encode(tok, contents[i], false));
    pos = at + 1;
  }
  Append(&want, Encode(tok, rendered->substr(pos), true));
  return want;
}

// A session's first input: the system message "Be brief.", folded into the user turn "Hi!", and
// the generation prompt, into *got: exactly the template's rendering of [system, user].
void ExpectFoldedFirstTurn(const ChatFormatter& formatter, const tokenizer::ChatTemplate& chat,
                           const tokenizer::Tokenizer& tok, ChatState* state, Ids* got) {
  ASSERT_NO_FATAL_FAILURE(
      AppendTurn(formatter, ChatRoleKind::kSystem, "Be brief.", true, state, got));
  EXPECT_EQ(*state, ChatState::kSystemOpen);
  ASSERT_NO_FATAL_FAILURE(AppendTurn(formatter, ChatRoleKind::kUser, "Hi!", false, state, got));
  Append(got, formatter.GenerationPrompt(state));
  const Ids want =
      TemplateIds(chat, tok, {{"system", "\x01"}, {"user", "\x02"}}, {"Be brief.", "Hi!"}, true);
  EXPECT_EQ(*got, want) << "streamd: " << tok.Decode(*got) << "\ntemplate: " << tok.Decode(want);
}

// Gemma has no system turn: its template opens the first user turn with the system text and a
// blank line. A session's system message is folded the same way into the user turn after it
// (ChatState::kSystemOpen), at the start of a conversation, later in it, and when a Generate
// follows it directly. The real Gemma 3 270M vocabulary, with the format its vocabulary selects.
TEST(ChatFormatterFamilyTest, GemmaFoldsASystemMessageIntoTheNextUserTurn) {
  const auto* vocab = tokenizer::testing::CachedFromEnv(
      "STREAMD_GEMMA_MODEL", "export STREAMD_GEMMA_MODEL=$(scripts/fetch-gemma-model.sh)");
  ASSERT_NE(vocab, nullptr);
  const tokenizer::Tokenizer& tok = *vocab->tokenizer;
  auto chat = tokenizer::ChatTemplate::FromGguf(*vocab->file, tok);
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  ASSERT_EQ(chat->kind(), tokenizer::ChatTemplateKind::kGemma);
  ChatFormatter formatter(*chat, tok);
  const auto turn = [&](ChatRoleKind role, const std::string& text, bool first, ChatState* state,
                        Ids* to) { AppendTurn(formatter, role, text, first, state, to); };

  // At the start: exactly the template's rendering of [system, user] and the generation prompt.
  ChatState state = ChatState::kNone;
  Ids got;
  ASSERT_NO_FATAL_FAILURE(ExpectFoldedFirstTurn(formatter, *chat, tok, &state, &got));

  // Later (after an answer that ended with <end_of_turn>): the system text opens the next user
  // turn, joined to the user's text as at the start.
  Append(&got, Encode(tok, "Hello.", false));
  got.push_back(*tok.FindToken("<end_of_turn>"));
  ChatFormatter::OnGenerationEnd(true, &state);
  turn(ChatRoleKind::kSystem, "Now in French.", false, &state, &got);
  turn(ChatRoleKind::kUser, "Bye", false, &state, &got);
  Append(&got, formatter.GenerationPrompt(&state));
  Ids want = TemplateIds(
      *chat, tok,
      {{"system", "\x01"}, {"user", "\x02"}, {"assistant", "\x03"}, {"user", "\x04\n\n\x05"}},
      {"Be brief.", "Hi!", "Hello.", "Now in French.", "Bye"}, true);
  EXPECT_EQ(got, want) << "streamd: " << tok.Decode(got) << "\ntemplate: " << tok.Decode(want);

  // A Generate right after a system message: its turn is closed as a user turn, then answered
  // (Google's template would drop a system text that no user message follows).
  state = ChatState::kNone;
  got.clear();
  turn(ChatRoleKind::kSystem, "Tell a joke.", true, &state, &got);
  Append(&got, formatter.GenerationPrompt(&state));
  EXPECT_EQ(state, ChatState::kAssistantOpen);
  want = Encode(tok, "<bos><start_of_turn>user\n", true);
  Append(&want, Encode(tok, "Tell a joke.", false));
  Append(&want, Encode(tok, "\n\n<end_of_turn>\n<start_of_turn>model\n", true));
  EXPECT_EQ(got, want) << "streamd: " << tok.Decode(got) << "\ntemplate: " << tok.Decode(want);

  // Two system messages in a row share the turn.
  state = ChatState::kNone;
  got.clear();
  turn(ChatRoleKind::kSystem, "A.", true, &state, &got);
  turn(ChatRoleKind::kSystem, "B.", false, &state, &got);
  turn(ChatRoleKind::kUser, "C?", false, &state, &got);
  want = TemplateIds(*chat, tok, {{"user", "\x01\n\n\x02\n\n\x03"}}, {"A.", "B.", "C?"}, false);
  EXPECT_EQ(got, want) << "streamd: " << tok.Decode(got) << "\ntemplate: " << tok.Decode(want);
}

// Llama-2 has no system turn either: its template opens the first user turn with the system
// text in <<SYS>> ... <</SYS>>, and every later user turn as "<s>[INST] ... [/INST]". Two bugs
// lived here: a later user turn carried the placeholder system block its framing was learned
// from, and after an answer the model ended with </s> the template's " </s>" was added again.
// Each turn is compared with the template's rendering of the conversation that turn would start
// (the answer's own framing is left out: SentencePiece encodes " " + content differently apart
// and together, so no per-piece reference is exact there).
TEST(ChatFormatterFamilyTest, Llama2LaterTurnsCarryNoSystemBlockAndFoldSystemMessages) {
  auto family = LoadFamilyWithTemplate("llama-spm", tokenizer::testing::kLlama2Template);
  ASSERT_NE(family, nullptr);
  const tokenizer::Tokenizer& tok = *family->tokenizer;
  const tokenizer::ChatTemplate& chat = *family->chat;
  ASSERT_EQ(chat.kind(), tokenizer::ChatTemplateKind::kLlama2);
  ChatFormatter formatter(chat, tok);
  const auto turn = [&](ChatRoleKind role, const std::string& text, bool first, ChatState* state,
                        Ids* to) { AppendTurn(formatter, role, text, first, state, to); };
  const auto answer = [&](ChatState* state) {  // the model says "Hello." and ends with </s>
    Ids ids = formatter.GenerationPrompt(state);
    Append(&ids, Encode(tok, "Hello.", false));
    ids.push_back(tok.eos_id());
    ChatFormatter::OnGenerationEnd(/*end_of_generation=*/true, state);
    return ids;
  };
  ASSERT_TRUE(tok.IsEndOfGeneration(tok.eos_id()));

  // The first turn: a system message folded into the user's, as the template renders them.
  ChatState state = ChatState::kNone;
  Ids got;
  ASSERT_NO_FATAL_FAILURE(ExpectFoldedFirstTurn(formatter, chat, tok, &state, &got));

  // After the answer, a user turn is any user turn: no system block, no second </s>.
  answer(&state);
  got.clear();
  turn(ChatRoleKind::kUser, "Bye", false, &state, &got);
  Ids want = TemplateIds(chat, tok, {{"user", "\x01"}}, {"Bye"}, true);
  EXPECT_EQ(got, want) << "streamd: " << tok.Decode(got) << "\ntemplate: " << tok.Decode(want);

  // A system message later in the session opens its user turn as at the start.
  answer(&state);
  got.clear();
  turn(ChatRoleKind::kSystem, "Now in French.", false, &state, &got);
  EXPECT_EQ(state, ChatState::kSystemOpen);
  turn(ChatRoleKind::kUser, "Bye", false, &state, &got);
  want = TemplateIds(chat, tok, {{"system", "\x01"}, {"user", "\x02"}}, {"Now in French.", "Bye"},
                     true);
  EXPECT_EQ(got, want) << "streamd: " << tok.Decode(got) << "\ntemplate: " << tok.Decode(want);
}

}  // namespace
}  // namespace streamd
