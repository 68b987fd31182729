// http_request_fuzz: the HTTP front door's request parsing (server/http/openai_request.cc) on
// arbitrary bodies, and what the server makes of its results: the error mapping
// (http_errors.cc), the answers' formatting (openai_response.cc) and the conversation record
// (conversation.cc). The first byte picks the endpoint; the rest is the body.
//
// Properties: parsing never crashes, hangs or allocates without bound; a refusal is
// INVALID_ARGUMENT whose error body is JSON with status 400; an accepted request is within
// every limit; whatever text was accepted formats into valid JSON, and into one server-sent
// event that nothing inside can end early.
//
// With STREAMD_HTTP_REQUEST_FUZZ_SEEDS it is instead `http_request_fuzz_seeds DIR`: writes the
// seed corpus (requests of both endpoints, valid and refused), each checked as the fuzzer would.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/http/conversation.h"
#include "server/http/http_errors.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"

namespace {

using streamd::StatusCode;
using namespace streamd::http;

[[noreturn]] void Fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "http_request_fuzz: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

RequestLimits Limits() {
  RequestLimits l;
  l.max_tokens = 64;
  l.max_content_bytes = 512;
  l.max_messages = 16;
  l.max_stop_strings = 4;
  l.max_stop_bytes = 16;
  l.max_nesting = 8;
  return l;
}

void CheckRefusal(const streamd::Status& s) {
  if (s.code() != StatusCode::kInvalidArgument) {
    Fail("refusal is not INVALID_ARGUMENT", s.message());
  }
  const HttpError e = ToHttpError(s);
  if (e.status != 400) Fail("refusal is not 400", s.message());
  if (!nlohmann::json::accept(e.body)) Fail("error body is not JSON", e.body);
}

// Accepted text must make valid answers, and one SSE event each.
void CheckFormats(const std::string& text) {
  const AnswerHead head{"chatcmpl-x", 1, "m"};
  const std::string whole = ChatCompletionJson(head, text, DoneReason::kStop, {});
  if (!nlohmann::json::accept(whole)) Fail("chat.completion is not JSON", whole);
  const std::string event = SseEvent(ChatChunkJson(head, {.text = text}));
  if (event.find("\n\n") != event.size() - 2) Fail("a chunk ends its event early", event);
  const std::string response = ResponseJson({"resp_x_1", 1, "m"}, {.text = text});
  if (!nlohmann::json::accept(response)) Fail("response is not JSON", response);
}

void CheckParams(const GenerateParams& p, const RequestLimits& l) {
  if (p.max_tokens < 0 || p.max_tokens > l.max_tokens) Fail("max_tokens", "out of range");
  if (p.stop.size() > l.max_stop_strings) Fail("stop", "too many");
  for (const std::string& s : p.stop) {
    if (s.empty() || s.size() > l.max_stop_bytes) Fail("stop", s);
  }
  if (p.temperature && !(*p.temperature >= 0 && *p.temperature <= 100)) Fail("temperature", "");
  if (p.top_p && !(*p.top_p > 0 && *p.top_p <= 1)) Fail("top_p", "");
}

void CheckMessages(const std::vector<ChatMessage>& messages, const RequestLimits& l) {
  if (messages.size() > static_cast<size_t>(l.max_messages)) Fail("messages", "too many");
  Conversation c;
  for (const ChatMessage& m : messages) {
    if (m.content.size() > static_cast<size_t>(l.max_content_bytes)) Fail("content", m.content);
    CheckFormats(m.content);
    c.Add(m.role, m.content);
  }
  // The record of these messages matches them, and nothing is new after all of them.
  auto start = NewMessagesStart(c, messages);
  if (!start.ok() || *start != messages.size()) Fail("conversation", "does not match itself");
  auto back = Conversation::Decode(c.Encode());
  if (!back.ok() || back->hash != c.hash || back->turns != c.turns) Fail("record", c.Encode());
}

void RunOne(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const RequestLimits limits = Limits();
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto r = ParseChatRequest(body, limits);
      if (!r.ok()) {
        CheckRefusal(r.status());
        break;
      }
      if (r->messages.empty()) Fail("messages", "accepted empty");
      CheckParams(r->params, limits);
      CheckMessages(r->messages, limits);
      break;
    }
    case 1: {
      auto r = ParseResponsesRequest(body, limits);
      if (!r.ok()) {
        CheckRefusal(r.status());
        break;
      }
      if (r->input.empty()) Fail("input", "accepted empty");
      CheckParams(r->params, limits);
      CheckMessages(r->input, limits);
      break;
    }
    default: {
      // A conversation record read from a snapshot is untrusted too.
      auto c = Conversation::Decode(body);
      if (c.ok() && (c->turns < 0 || c->responses < 0)) Fail("record", body);
      break;
    }
  }
}

}  // namespace

#ifndef STREAMD_HTTP_REQUEST_FUZZ_SEEDS

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunOne(data, size);
  return 0;
}

#else

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: http_request_fuzz_seeds DIR\n");
    return 2;
  }
  const std::pair<char, const char*> seeds[] = {
      {0, R"({"model":"m","messages":[{"role":"user","content":"Hi"}]})"},
      {0,
       R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":"b"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":8,"temperature":0.5,"top_p":0.9,"seed":1,"stop":["x","y"],"n":1})"},
      {0,
       R"({"messages":[{"role":"user","content":"x"}],"stop":"END","max_completion_tokens":3,"presence_penalty":1,"frequency_penalty":-1})"},
      {0, R"({"messages":[{"role":"tool","content":"x"}],"tools":[{"type":"function"}]})"},
      {0, R"({"messages":[{"role":"user","content":5}],"max_tokens":"5","logprobs":true})"},
      {0,
       R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]})"},
      {0, R"({"messages": [)"},
      {1,
       R"({"model":"m","input":"Hi","instructions":"Be brief.","max_output_tokens":5,"store":false})"},
      {1,
       R"({"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"a"}]}],"previous_response_id":"resp_0123456789abcdef0123456789abcdef_1"})"},
      {1, R"({"input":"x","text":{"format":{"type":"json_schema"}},"reasoning":{}})"},
      {2, "v1 3 0123456789abcdef 1"},
  };
  int n = 0;
  for (const auto& [endpoint, body] : seeds) {
    const std::string bytes = std::string(1, endpoint) + body;
    RunOne(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());  // aborts if broken
    std::ofstream out(std::string(argv[1]) + "/seed" + std::to_string(n++), std::ios::binary);
    out << bytes;
  }
  return 0;
}

#endif
