#include "server/http/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace streamd::http {
namespace {

StatusOr<ChatRequest> Chat(const std::string& body) { return ParseChatRequest(body, {}); }

// The message of a refused body (and that it was refused as INVALID_ARGUMENT).
std::string ChatError(const std::string& body) {
  auto r = Chat(body);
  if (r.ok()) return "(accepted)";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
  return r.status().message();
}

TEST(ParseChatRequestTest, ReadsEverySupportedField) {
  auto r = Chat(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "developer", "content": [{"type": "text", "text": "a"},
                                        {"type": "text", "text": "b"}]},
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello"}],
    "stream": true, "stream_options": {"include_usage": true}, "max_completion_tokens": 7,
    "max_tokens": 9, "temperature": 0.5, "top_p": 0.25, "seed": 42, "stop": ["x", "yz"],
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "n": 1, "user": "ignored",
    "some_future_field": {"x": 1}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].role, TurnRole::kSystem);
  EXPECT_EQ(r->messages[1].role, TurnRole::kSystem);
  EXPECT_EQ(r->messages[1].content, "ab");
  EXPECT_EQ(r->messages[2].role, TurnRole::kUser);
  EXPECT_EQ(r->messages[3].role, TurnRole::kAssistant);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->params.max_tokens, 7);  // max_completion_tokens wins over the deprecated name
  EXPECT_FLOAT_EQ(*r->params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*r->params.top_p, 0.25f);
  EXPECT_FLOAT_EQ(*r->params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(*r->params.frequency_penalty, -0.5f);
  EXPECT_EQ(*r->params.seed, 42u);
  EXPECT_EQ(r->params.stop, (std::vector<std::string>{"x", "yz"}));
}

TEST(ParseChatRequestTest, NullIsAbsentAndDefaultsStay) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": "Hi"}], "temperature": null,
                    "stop": null, "stream": null, "max_tokens": null})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->params.temperature.has_value());
  EXPECT_EQ(r->params.max_tokens, 0);
  EXPECT_TRUE(r->params.stop.empty());
}

TEST(ParseChatRequestTest, StopMayBeOneString) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": "Hi"}], "stop": "END"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.stop, std::vector<std::string>{"END"});
}

TEST(ParseChatRequestTest, SeedZeroIsReproducibleNotRandom) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": "Hi"}], "seed": 0})");
  ASSERT_TRUE(r.ok());
  EXPECT_NE(*r->params.seed, 0u);  // the engine's 0 means "random"
}

TEST(ParseChatRequestTest, MalformedBodiesNameTheProblem) {
  EXPECT_EQ(ChatError(""), "body is empty; send a JSON object");
  EXPECT_EQ(ChatError("{\"messages\": [").rfind("body is not valid JSON: ", 0), 0u);
  EXPECT_EQ(ChatError("[1, 2]"), "body must be a JSON object, not an array");
  EXPECT_EQ(ChatError(std::string(100, '[') + std::string(100, ']')),
            "body nests arrays and objects more than 32 deep");
  // Brackets inside strings do not count as nesting.
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": ")" + std::string(100, '[') +
                      "\"}], \"n\": 2}"),
            "n = 2: only n = 1 is supported (one choice)");
  // Not UTF-8.
  EXPECT_EQ(ChatError("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}")
                .rfind("body is not valid JSON", 0),
            0u);
}

TEST(ParseChatRequestTest, WrongTypesNameTheField) {
  EXPECT_EQ(ChatError(R"({"messages": "hi"})"), "messages must be an array, not a string");
  EXPECT_EQ(ChatError(R"({})"), "messages is missing");
  EXPECT_EQ(ChatError(R"({"messages": []})"), "messages is empty");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": 5}]})"),
            "messages[0].content must be a string or an array of text parts, not an integer");
  EXPECT_EQ(ChatError(R"({"messages": [{"content": "x"}]})"),
            "messages[0].role must be one of system, developer, user, assistant");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user"}]})"), "messages[0].content is missing");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"})"),
            "max_tokens must be an integer, not a string");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5})"),
            "max_tokens must be an integer, not a number with a fraction");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})"),
            "stream must be true or false, not a string");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})"),
            "stop[0] must be a string, not an integer");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "user", "content": [{"type": "image_url",
                          "image_url": {"url": "x"}}]}]})"),
            "messages[0].content[0].type = \"image_url\" is not supported: only text parts are");
}

TEST(ParseChatRequestTest, LimitsAreTheServersLimits) {
  RequestLimits limits;
  limits.max_tokens = 100;
  limits.max_content_bytes = 4;
  limits.max_stop_strings = 2;
  limits.max_stop_bytes = 3;
  limits.max_messages = 2;
  const auto error = [&](const std::string& body) {
    auto r = ParseChatRequest(body, limits);
    return r.ok() ? "(accepted)" : r.status().message();
  };
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 101})"),
            "max_tokens = 101 is outside [1, 100]");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})"),
            "max_tokens = 0 is outside [1, 100]");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "12345"}]})"),
            "messages[0].content is 5 bytes, over the limit of 4");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c"]})"),
            "stop has 3 strings, over the limit of 2");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "stop": "abcd"})"),
            "stop is 4 bytes, over the limit of 3");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", ""]})"),
            "stop[1] is empty");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}, {"role": "user",
                 "content": "x"}, {"role": "user", "content": "x"}]})"),
            "messages has 3 entries, over the limit of 2");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})"),
            "temperature = -1 is outside [0, 100]");
  EXPECT_EQ(error(R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})"),
            "top_p = 0 is outside (0, 1]");
}

TEST(ParseChatRequestTest, KnownUnsupportedFieldsAreRefusedByName) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(ChatError("{" + m + R"(, "tools": [{"type": "function"}]})"),
            "tools: tool calling is not supported by streamd");
  EXPECT_EQ(ChatError("{" + m + R"(, "tool_choice": "auto"})"),
            "tool_choice: tool calling is not supported by streamd");
  EXPECT_EQ(ChatError("{" + m + R"(, "logprobs": true})"),
            "logprobs: log probabilities are not returned by streamd");
  EXPECT_EQ(ChatError("{" + m + R"(, "n": 3})"), "n = 3: only n = 1 is supported (one choice)");
  EXPECT_EQ(ChatError("{" + m + R"(, "response_format": {"type": "json_object"}})"),
            "response_format: only {\"type\": \"text\"} is supported by streamd");
  EXPECT_EQ(ChatError(R"({"messages": [{"role": "tool", "content": "x"}]})"),
            "messages[0].role = \"tool\" is not supported (system, developer, user, assistant; no "
            "tool messages: tool calling is not supported)");
  // Harmless values of the same fields pass.
  EXPECT_TRUE(Chat("{" + m + R"(, "tools": [], "tool_choice": "none", "logprobs": false,
                   "response_format": {"type": "text"}, "parallel_tool_calls": true})")
                  .ok());
}

TEST(ParseResponsesRequestTest, StringOrMessagesInput) {
  auto r = ParseResponsesRequest(R"({"model": "m", "input": "Hi", "instructions": "Be brief.",
      "previous_response_id": "resp_x", "max_output_tokens": 5, "store": false,
      "text": {"format": {"type": "text"}}})",
                                 {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->input.size(), 1u);
  EXPECT_EQ(r->input[0].role, TurnRole::kUser);
  EXPECT_EQ(r->input[0].content, "Hi");
  EXPECT_EQ(r->instructions, "Be brief.");
  EXPECT_EQ(r->previous_response_id, "resp_x");
  EXPECT_EQ(r->params.max_tokens, 5);
  EXPECT_FALSE(r->store);
  auto m = ParseResponsesRequest(R"({"input": [{"type": "message", "role": "user",
      "content": [{"type": "input_text", "text": "a"}]}, {"role": "assistant", "content": "b"}]})",
                                 {});
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->input.size(), 2u);
  EXPECT_EQ(m->input[0].content, "a");
  EXPECT_EQ(m->input[1].role, TurnRole::kAssistant);
  auto bad = ParseResponsesRequest(R"({"input": [{"type": "function_call_output"}]})", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "input[0].type = \"function_call_output\" is not supported: only messages are");
  auto json =
      ParseResponsesRequest(R"({"input": "x", "text": {"format": {"type": "json_schema"}}})", {});
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().message(), "text.format: only {\"type\": \"text\"} is supported");
}

}  // namespace
}  // namespace streamd::http
