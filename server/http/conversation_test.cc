#include "server/http/conversation.h"

#include <gtest/gtest.h>

namespace streamd::http {
namespace {

std::vector<ChatMessage> History() {
  return {{TurnRole::kSystem, "Be brief."},
          {TurnRole::kUser, "Hi"},
          {TurnRole::kAssistant, "Hello!"},
          {TurnRole::kUser, "And now?"}};
}

TEST(ConversationTest, EncodeDecodeRoundTrip) {
  Conversation c;
  c.Add(TurnRole::kUser, "Hi");
  c.responses = 3;
  auto d = Conversation::Decode(c.Encode());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->turns, 1);
  EXPECT_EQ(d->hash, c.hash);
  EXPECT_EQ(d->responses, 3);
  auto empty = Conversation::Decode("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->turns, 0);
  EXPECT_EQ(Conversation::Decode("v1 x").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(Conversation::Decode(c.Encode() + " extra").status().code(), StatusCode::kDataLoss);
}

TEST(ConversationTest, OnlyMessagesAfterTheStoredTurnsAreNew) {
  const std::vector<ChatMessage> h = History();
  Conversation stored;
  for (int i = 0; i < 3; ++i) stored.Add(h[i].role, h[i].content);
  auto start = NewMessagesStart(stored, h);
  ASSERT_TRUE(start.ok()) << start.status().message();
  EXPECT_EQ(*start, 3u);
  EXPECT_EQ(*NewMessagesStart(Conversation{}, h), 0u);
}

TEST(ConversationTest, AnotherHistoryIsRefused) {
  std::vector<ChatMessage> h = History();
  Conversation stored;
  for (int i = 0; i < 3; ++i) stored.Add(h[i].role, h[i].content);
  h[2].content = "Hello";  // the answer edited
  auto edited = NewMessagesStart(stored, h);
  ASSERT_FALSE(edited.ok());
  EXPECT_EQ(edited.status().code(), StatusCode::kFailedPrecondition);
  h = History();
  h[1].role = TurnRole::kSystem;  // same text, other role
  EXPECT_FALSE(NewMessagesStart(stored, h).ok());
  h = History();
  h.resize(2);  // shorter than the session
  auto shorter = NewMessagesStart(stored, h);
  ASSERT_FALSE(shorter.ok());
  EXPECT_EQ(shorter.status().message().rfind("messages has 2 entries", 0), 0u);
}

TEST(ConversationTest, TurnBoundariesMatter) {
  Conversation a, b;
  a.Add(TurnRole::kUser, "ab");
  a.Add(TurnRole::kUser, "c");
  b.Add(TurnRole::kUser, "a");
  b.Add(TurnRole::kUser, "bc");
  EXPECT_NE(a.hash, b.hash);
}

}  // namespace
}  // namespace streamd::http
