// The OpenAI-compatible request bodies as plain structs, parsed and validated from untrusted
// bytes. Every refusal is INVALID_ARGUMENT whose message starts with the field at fault
// ("max_tokens = 0 is outside [1, 4096]", "messages[2].content[0].type ..."), which becomes the
// error's `param` (http_errors.h).
//
// Unknown fields: OpenAI's SDKs and frameworks send fields streamd has never heard of (new ones
// every release), so unknown top-level fields are ignored. Fields streamd knows and cannot honour
// (tools, n > 1, logprobs, response_format other than text, ...) are refused with 400 naming the
// field, so that a client never silently gets something other than what it asked for. A JSON
// null is the same as an absent field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/status.h"
#include "server/http/http_sessions.h"

namespace streamd::http {

// The server's request limits (server_options.h ServerLimits and the engine's stop limits).
struct RequestLimits {
  int32_t max_tokens = 4096;            // max_tokens / max_completion_tokens upper bound
  int32_t max_content_bytes = 1 << 20;  // one message's text (limits.max_append_bytes)
  int32_t max_messages = 4096;          // messages (or input items) of one request
  size_t max_stop_strings = 16;
  size_t max_stop_bytes = 256;
  int32_t max_nesting = 32;  // JSON arrays/objects inside each other
};

struct ChatMessage {
  TurnRole role = TurnRole::kUser;
  std::string content;
};

// POST /v1/chat/completions.
struct ChatRequest {
  std::string model;  // echoed back; streamd serves the one model it has
  std::vector<ChatMessage> messages;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  GenerateParams params;
};

// POST /v1/responses.
struct ResponsesRequest {
  std::string model;
  std::string instructions;          // a system turn before the input
  std::vector<ChatMessage> input;    // a string input is one user message
  std::string previous_response_id;  // continue the session that produced it
  bool stream = false;
  bool store = true;  // false: the session is closed after the response
  GenerateParams params;
};

StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const RequestLimits& limits);
StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body,
                                                 const RequestLimits& limits);

}  // namespace streamd::http
