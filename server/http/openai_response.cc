#include "server/http/openai_response.h"

#include <chrono>
#include <nlohmann/json.hpp>

namespace streamd::http {
namespace {

using nlohmann::json;

// Generated text is UTF-8 by construction (the engine holds partial characters back); the
// replacement handler only guards against a bug turning into an exception.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json ChatUsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json ResponseUsageJson(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

}  // namespace

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* FinishReasonName(DoneReason reason) {
  return reason == DoneReason::kLength ? "length" : "stop";
}

std::string ChatCompletionJson(const AnswerHead& head, const std::string& text, DoneReason reason,
                               const Usage& usage) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}}},
                 {"logprobs", nullptr},
                 {"finish_reason", FinishReasonName(reason)}};
  return Dump({{"id", head.id},
               {"object", "chat.completion"},
               {"created", head.created},
               {"model", head.model},
               {"choices", json::array({choice})},
               {"usage", ChatUsageJson(usage)},
               {"system_fingerprint", nullptr}});
}

std::string ChatChunkJson(const AnswerHead& head, const ChunkParts& parts) {
  json chunk = {{"id", head.id},
                {"object", "chat.completion.chunk"},
                {"created", head.created},
                {"model", head.model},
                {"system_fingerprint", nullptr}};
  if (parts.usage_only) {
    chunk["choices"] = json::array();
  } else {
    json delta = json::object();
    if (parts.role) delta["role"] = "assistant";
    if (!parts.text.empty() || parts.role) delta["content"] = parts.text;
    json choice = {
        {"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (parts.reason) choice["finish_reason"] = FinishReasonName(*parts.reason);
    chunk["choices"] = json::array({choice});
  }
  // With include_usage every chunk carries "usage": null but the last, which has the numbers.
  if (parts.usage) {
    chunk["usage"] = ChatUsageJson(*parts.usage);
  }
  return Dump(chunk);
}

std::string SseEvent(const std::string& json_text, const char* event) {
  std::string out;
  if (event != nullptr) out += std::string("event: ") + event + "\n";
  out += "data: " + json_text + "\n\n";
  return out;
}

std::string MessageItemId(const std::string& response_id) {
  // resp_X -> msg_X: one message per response.
  const size_t underscore = response_id.find('_');
  return "msg_" +
         (underscore == std::string::npos ? response_id : response_id.substr(underscore + 1));
}

namespace {

json OutputText(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
}

json MessageItem(const std::string& response_id, const std::string& status, json content) {
  return {{"type", "message"},
          {"id", MessageItemId(response_id)},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

std::string Event(const char* type, int64_t* sequence, json body) {
  body["type"] = type;
  body["sequence_number"] = (*sequence)++;
  return SseEvent(Dump(body), type);
}

}  // namespace

// Events are appended one statement at a time: the operands of `+` are evaluated in no set
// order, and each Event takes the next sequence number.
std::string ResponseStreamOpening(const AnswerHead& head, const ResponseParts& in_progress,
                                  int64_t* sequence) {
  const json response = json::parse(ResponseJson(head, in_progress));
  const std::string item = MessageItemId(head.id);
  std::string out = Event("response.created", sequence, {{"response", response}});
  out += Event("response.in_progress", sequence, {{"response", response}});
  out += Event("response.output_item.added", sequence,
               {{"output_index", 0}, {"item", MessageItem(head.id, "in_progress", json::array())}});
  out += Event(
      "response.content_part.added", sequence,
      {{"item_id", item}, {"output_index", 0}, {"content_index", 0}, {"part", OutputText("")}});
  return out;
}

std::string ResponseStreamClosing(const AnswerHead& head, const ResponseParts& done,
                                  int64_t* sequence) {
  const std::string item = MessageItemId(head.id);
  const json text = json::array({OutputText(done.text)});
  std::string out = Event("response.output_text.done", sequence,
                          {{"item_id", item},
                           {"output_index", 0},
                           {"content_index", 0},
                           {"text", done.text},
                           {"logprobs", json::array()}});
  out += Event("response.content_part.done", sequence,
               {{"item_id", item},
                {"output_index", 0},
                {"content_index", 0},
                {"part", OutputText(done.text)}});
  out += Event("response.output_item.done", sequence,
               {{"output_index", 0}, {"item", MessageItem(head.id, "completed", text)}});
  out +=
      Event("response.completed", sequence, {{"response", json::parse(ResponseJson(head, done))}});
  return out;
}

std::string ResponseJson(const AnswerHead& head, const ResponseParts& parts) {
  json output = json::array();
  if (parts.status != "in_progress") {
    output.push_back(MessageItem(head.id, "completed", json::array({OutputText(parts.text)})));
  }
  json r = {{"id", head.id},
            {"object", "response"},
            {"created_at", head.created},
            {"status", parts.status},
            {"model", head.model},
            {"output", output},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"instructions", nullptr},
            {"metadata", json::object()},
            {"parallel_tool_calls", false},
            {"tool_choice", "none"},
            {"tools", json::array()},
            {"previous_response_id", nullptr},
            {"usage", nullptr}};
  if (parts.status == "incomplete") {
    r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  }
  if (!parts.instructions.empty()) r["instructions"] = parts.instructions;
  if (!parts.previous_response_id.empty()) r["previous_response_id"] = parts.previous_response_id;
  if (parts.usage) r["usage"] = ResponseUsageJson(*parts.usage);
  return Dump(r);
}

std::string ResponseDeltaJson(const std::string& item_id, const std::string& delta,
                              int64_t sequence) {
  return Dump({{"type", "response.output_text.delta"},
               {"item_id", item_id},
               {"output_index", 0},
               {"content_index", 0},
               {"delta", delta},
               {"logprobs", json::array()},
               {"sequence_number", sequence}});
}

std::string ModelJson(const std::string& model, int64_t created) {
  return Dump({{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "streamd"}});
}

std::string ModelListJson(const std::string& model, int64_t created) {
  return Dump(
      {{"object", "list"}, {"data", json::array({json::parse(ModelJson(model, created))})}});
}

}  // namespace streamd::http
