// The OpenAI-compatible answers as JSON text: chat.completion, chat.completion.chunk (one
// server-sent event each), the Responses API's response object and its stream events, and the
// model list. Pure formatting: no I/O, no sessions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "server/http/http_sessions.h"

namespace streamd::http {

struct Usage {
  int64_t prompt_tokens = 0;  // the whole context the answer was generated from
  int64_t cached_tokens = 0;  // of those, already in the session's cache before this request
  int64_t completion_tokens = 0;
};

// "stop" or "length"; a cancelled or failed generation has no OpenAI reason (the caller sends an
// error instead).
const char* FinishReasonName(DoneReason reason);

// Now, in Unix seconds (an answer's "created", the model's).
int64_t UnixSeconds();

// What identifies one answer in all its pieces.
struct AnswerHead {
  std::string id;       // "chatcmpl-..." or "resp_..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

std::string ChatCompletionJson(const AnswerHead& head, const std::string& text, DoneReason reason,
                               const Usage& usage);
// One chunk. The first carries the role; `text` may be empty; `reason` ends the choice;
// `usage_only` is the final chunk of stream_options.include_usage (no choices).
struct ChunkParts {
  bool role = false;
  std::string text;
  std::optional<DoneReason> reason;
  std::optional<Usage> usage;
  bool usage_only = false;
};
std::string ChatChunkJson(const AnswerHead& head, const ChunkParts& parts);

// A server-sent event: "data: JSON\n\n", with "event: NAME\n" first when `event` is given.
std::string SseEvent(const std::string& json, const char* event = nullptr);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// The Responses API's response object. status "completed", or "incomplete" (max_output_tokens)
// or "in_progress" (the first stream event, with no output yet).
struct ResponseParts {
  std::string status = "completed";
  std::string text;
  std::optional<Usage> usage;
  std::string previous_response_id;
  std::string instructions;
};
std::string ResponseJson(const AnswerHead& head, const ResponseParts& parts);
// The stream's events: response.output_text.delta and the item's id.
std::string ResponseDeltaJson(const std::string& item_id, const std::string& delta,
                              int64_t sequence);
std::string MessageItemId(const std::string& response_id);  // "msg_..." of a response
// The stream's events around the deltas, as server-sent events, numbered from *sequence on
// (advanced): response.created, response.in_progress, response.output_item.added,
// response.content_part.added; and after the text response.output_text.done,
// response.content_part.done, response.output_item.done, response.completed. The SDKs' stream
// helpers build the response from exactly these.
std::string ResponseStreamOpening(const AnswerHead& head, const ResponseParts& in_progress,
                                  int64_t* sequence);
std::string ResponseStreamClosing(const AnswerHead& head, const ResponseParts& done,
                                  int64_t* sequence);

std::string ModelListJson(const std::string& model, int64_t created);
std::string ModelJson(const std::string& model, int64_t created);

}  // namespace streamd::http
