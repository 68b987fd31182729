// ChatFormatter on the families users bring: the real Qwen2.5 and Llama 3.1 templates with the
// real Qwen2 and Llama-3 vocabularies (llama.cpp's, from $STREAMD_VOCAB_DIR:
// `scripts/fetch-test-vocab.sh --golden`; `make test` sets it). Turn by turn, the tokens must be
// the template's rendering of the same conversation, framing encoded with special tokens and
// content without.
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
#include "tests/support/tokenizer_test_util.h"

namespace streamd {
namespace {

using Ids = std::vector<int32_t>;

struct Family {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatTemplate> chat;
};

// The vocabulary ggml-vocab-`vocab`.gguf with the template templates/`jinja`.jinja, or null
// after recording why not.
std::unique_ptr<Family> LoadFamily(const std::string& vocab, const std::string& jinja) {
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
  std::ifstream in(dir + "/templates/" + jinja + ".jinja", std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (text.empty()) {
    ADD_FAILURE() << "missing " << dir << "/templates/" << jinja << ".jinja";
    return nullptr;
  }
  auto family = std::make_unique<Family>();
  family->tokenizer = std::move(tok).value();
  const tokenizer::Tokenizer& t = *family->tokenizer;
  family->chat =
      std::make_unique<tokenizer::ChatTemplate>(tokenizer::ChatTemplate::FromTemplateText(
          text, std::string(t.TokenText(t.bos_id())), std::string(t.TokenText(t.eos_id()))));
  return family;
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

}  // namespace
}  // namespace streamd
