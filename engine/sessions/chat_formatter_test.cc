// ChatFormatter against the default model's tokenizer and ChatML template ($STREAMD_MODEL).
#include "engine/sessions/chat_formatter.h"

#include <gtest/gtest.h>

#include "tests/test_env.h"

namespace streamd {
namespace {

class ChatFormatterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::ModelPathOrFail();
    ASSERT_FALSE(path.empty());
    auto file = gguf::GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto tok = tokenizer::Tokenizer::FromGguf(**file);
    ASSERT_TRUE(tok.ok());
    tokenizer_ = std::move(tok).value();
    auto chat = tokenizer::ChatTemplate::FromGguf(**file, *tokenizer_);
    ASSERT_TRUE(chat.ok());
    chat_ = std::make_unique<tokenizer::ChatTemplate>(*chat);
    formatter_ = std::make_unique<ChatFormatter>(*chat_, *tokenizer_);
  }
  std::string Text(const std::vector<int32_t>& ids) const { return tokenizer_->Decode(ids); }

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> chat_;
  std::unique_ptr<ChatFormatter> formatter_;
};

TEST_F(ChatFormatterTest, ConversationMatchesTheTemplateTurnByTurn) {
  ASSERT_NE(formatter_, nullptr);
  EXPECT_EQ(formatter_->template_name(), "chatml");
  ChatState state = ChatState::kNone;
  auto first = formatter_->Turn(ChatRoleKind::kUser, "Hi there", /*first_input=*/true, &state);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(state, ChatState::kAwaitingAssistant);
  std::string all = Text(*first);
  all += Text(formatter_->GenerationPrompt(&state));
  EXPECT_EQ(state, ChatState::kAssistantOpen);
  // The whole conversation as the template renders it at once.
  std::vector<tokenizer::ChatMessage> messages = {{"user", "Hi there"}};
  auto rendered = chat_->Render(messages, true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(all, *rendered);

  // The model answers and ends with <|im_end|>; the next user turn completes the closing.
  const auto im_end = tokenizer_->FindToken("<|im_end|>");
  ASSERT_TRUE(im_end.has_value());
  auto answer = tokenizer_->Encode("Hello!", false, false);
  all += Text(*answer) + Text({*im_end});
  ChatFormatter::OnGenerationEnd(true, &state);
  EXPECT_EQ(state, ChatState::kAssistantClosed);
  auto second = formatter_->Turn(ChatRoleKind::kUser, "Bye", false, &state);
  ASSERT_TRUE(second.ok());
  all += Text(*second) + Text(formatter_->GenerationPrompt(&state));
  messages.push_back({"assistant", "Hello!"});
  messages.push_back({"user", "Bye"});
  rendered = chat_->Render(messages, true);
  EXPECT_EQ(all, *rendered);
}

TEST_F(ChatFormatterTest, ContentNeverBecomesSpecialTokens) {
  ASSERT_NE(formatter_, nullptr);
  ChatState state = ChatState::kNone;
  auto turn = formatter_->Turn(ChatRoleKind::kUser, "<|im_end|>", false, &state);
  ASSERT_TRUE(turn.ok());
  int specials = 0;
  for (int32_t id : *turn) specials += tokenizer_->IsSpecial(id);
  EXPECT_EQ(specials, 2);  // only the framing's <|im_start|> and <|im_end|>
  auto raw = formatter_->Raw("<|im_end|>", /*parse_special=*/true, false, &state);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->size(), 1u);
  EXPECT_EQ(state, ChatState::kNone);
}

TEST_F(ChatFormatterTest, AnOpenAssistantTurnIsClosedBeforeTheNextTurn) {
  ASSERT_NE(formatter_, nullptr);
  ChatState state = ChatState::kAssistantOpen;  // a generation ended by length
  auto turn = formatter_->Turn(ChatRoleKind::kUser, "go on", false, &state);
  ASSERT_TRUE(turn.ok());
  EXPECT_EQ(Text(*turn), "<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n");
}

}  // namespace
}  // namespace streamd
