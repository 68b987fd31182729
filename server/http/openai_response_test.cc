#include "server/http/openai_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace streamd::http {
namespace {

using nlohmann::json;

const AnswerHead kHead{"chatcmpl-1", 1700000000, "smol"};

// The JSON of one "data: ..." event.
json DataOf(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  return json::parse(event.substr(6, event.size() - 8));
}

TEST(OpenAIResponseTest, ChatCompletion) {
  const json j = json::parse(
      ChatCompletionJson(kHead, "Hello", DoneReason::kLength,
                         {.prompt_tokens = 10, .cached_tokens = 4, .completion_tokens = 3}));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["model"], "smol");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(OpenAIResponseTest, ChunksAsServerSentEvents) {
  const json first = DataOf(SseEvent(ChatChunkJson(kHead, {.role = true})));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json text = DataOf(SseEvent(ChatChunkJson(kHead, {.text = "He said \"hi\"\n"})));
  EXPECT_EQ(text["choices"][0]["delta"]["content"], "He said \"hi\"\n");
  EXPECT_FALSE(text["choices"][0]["delta"].contains("role"));
  const json last = DataOf(SseEvent(ChatChunkJson(kHead, {.reason = DoneReason::kStop})));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const json usage = DataOf(SseEvent(ChatChunkJson(
      kHead, {.usage = Usage{.prompt_tokens = 2, .completion_tokens = 1}, .usage_only = true})));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 3);
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  // A newline in the text never ends the event: JSON escapes it.
  EXPECT_EQ(SseEvent(ChatChunkJson(kHead, {.text = "a\n\nb"})).find("\n\n"),
            SseEvent(ChatChunkJson(kHead, {.text = "a\n\nb"})).size() - 2);
}

TEST(OpenAIResponseTest, NamedEvents) {
  EXPECT_EQ(SseEvent("{}", "response.completed"), "event: response.completed\ndata: {}\n\n");
}

TEST(OpenAIResponseTest, ResponseObject) {
  const json j =
      json::parse(ResponseJson({"resp_abc_2", 1, "smol"}, {.status = "completed",
                                                           .text = "Hi",
                                                           .usage = Usage{5, 3, 2},
                                                           .previous_response_id = "resp_abc_1"}));
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["previous_response_id"], "resp_abc_1");
  EXPECT_EQ(j["output"][0]["type"], "message");
  EXPECT_EQ(j["output"][0]["id"], "msg_abc_2");
  EXPECT_EQ(j["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "Hi");
  EXPECT_EQ(j["usage"]["input_tokens"], 5);
  EXPECT_EQ(j["usage"]["input_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(j["usage"]["output_tokens"], 2);
  const json incomplete = json::parse(ResponseJson({"resp_x_1", 1, "m"}, {.status = "incomplete"}));
  EXPECT_EQ(incomplete["incomplete_details"]["reason"], "max_output_tokens");
  const json delta = json::parse(ResponseDeltaJson("msg_x", "He", 4));
  EXPECT_EQ(delta["type"], "response.output_text.delta");
  EXPECT_EQ(delta["delta"], "He");
  EXPECT_EQ(delta["sequence_number"], 4);
}

TEST(OpenAIResponseTest, ResponseStreamEventsAreNumberedInOrder) {
  int64_t sequence = 0;
  const AnswerHead head{"resp_abc_1", 1, "m"};
  std::string events = ResponseStreamOpening(head, {.status = "in_progress"}, &sequence);
  events +=
      SseEvent(ResponseDeltaJson("msg_abc_1", "Hi", sequence++), "response.output_text.delta");
  events += ResponseStreamClosing(head, {.text = "Hi", .usage = Usage{3, 0, 1}}, &sequence);
  std::vector<std::string> types;
  size_t at = 0;
  int64_t expected = 0;
  while (at < events.size()) {
    const size_t end = events.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    const std::string event = events.substr(at, end - at);
    at = end + 2;
    const size_t data = event.find("\ndata: ");
    ASSERT_NE(data, std::string::npos) << event;
    const json j = json::parse(event.substr(data + 7));
    EXPECT_EQ(event.substr(7, data - 7), j["type"]);  // "event: TYPE" names the data's type
    EXPECT_EQ(j["sequence_number"], expected++);
    types.push_back(j["type"]);
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.completed"}));
  EXPECT_EQ(sequence, 9);
}

TEST(OpenAIResponseTest, Models) {
  const json j = json::parse(ModelListJson("smol", 7));
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "smol");
  EXPECT_EQ(j["data"][0]["object"], "model");
}

}  // namespace
}  // namespace streamd::http
