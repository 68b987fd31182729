#include "server/http/openai_request.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

namespace streamd::http {
namespace {

using nlohmann::json;

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a number with a fraction";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    default:
      break;
  }
  return "something else";
}

Status WrongType(const std::string& field, const char* expected, const json& got) {
  return InvalidArgumentError(field + " must be " + expected + ", not " + TypeName(got));
}

// Deeply nested input is refused before it is parsed: the parser's and the value's work grow
// with depth, and no valid request nests more than a few levels.
Status CheckNesting(std::string_view body, int32_t max_depth) {
  int32_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return InvalidArgumentError("body nests arrays and objects more than " +
                                    std::to_string(max_depth) + " deep");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return OkStatus();
}

StatusOr<json> ParseObject(std::string_view body, const RequestLimits& limits) {
  if (body.empty()) return InvalidArgumentError("body is empty; send a JSON object");
  STREAMD_RETURN_IF_ERROR(CheckNesting(body, limits.max_nesting));
  // nlohmann::json reports errors by throwing (and checks that strings are UTF-8): caught here,
  // at the library's edge.
  try {
    json root = json::parse(body);
    if (!root.is_object()) return WrongType("body", "a JSON object", root);
    return root;
  } catch (const json::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, ..." -> "parse error at line 1, ..."
    if (const size_t end = what.find("] "); what.rfind("[json.", 0) == 0 && end != what.npos) {
      what = what.substr(end + 2);
    }
    return InvalidArgumentError("body is not valid JSON: " + what);
  }
}

// The member `key` of `o`, or null when absent or null.
const json* Field(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

Status GetString(const json& o, const char* key, std::string* out) {
  const json* v = Field(o, key);
  if (v == nullptr) return OkStatus();
  if (!v->is_string()) return WrongType(key, "a string", *v);
  *out = v->get<std::string>();
  return OkStatus();
}

Status GetBool(const json& o, const char* key, bool* out) {
  const json* v = Field(o, key);
  if (v == nullptr) return OkStatus();
  if (!v->is_boolean()) return WrongType(key, "true or false", *v);
  *out = v->get<bool>();
  return OkStatus();
}

StatusOr<std::optional<double>> GetNumber(const json& o, const char* key, double lo, double hi,
                                          bool lo_open = false) {
  const json* v = Field(o, key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return WrongType(key, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
    const auto shown = [](double b) {
      std::ostringstream out;
      out << b;  // 0, 100, -2: as the limits are written
      return out.str();
    };
    std::string range = (lo_open ? "(" : "[") + shown(lo) + ", " + shown(hi) + "]";
    return InvalidArgumentError(std::string(key) + " = " + v->dump() + " is outside " + range);
  }
  return std::optional<double>(x);
}

StatusOr<std::optional<int64_t>> GetInteger(const json& o, const char* key, int64_t lo,
                                            int64_t hi) {
  const json* v = Field(o, key);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_number_integer()) return WrongType(key, "an integer", *v);
  const bool negative = v->is_number_unsigned() ? false : v->get<int64_t>() < 0;
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return InvalidArgumentError(std::string(key) + " = " + v->dump() + " is outside [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  const int64_t x = negative || !v->is_number_unsigned() ? v->get<int64_t>()
                                                         : static_cast<int64_t>(v->get<uint64_t>());
  if (x < lo || x > hi) {
    return InvalidArgumentError(std::string(key) + " = " + v->dump() + " is outside [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return std::optional<int64_t>(x);
}

// Fields streamd knows and does not serve: refused rather than ignored. `allowed` says which
// values are harmless (tool_choice "none", response_format {"type": "text"}, ...).
Status RefuseUnsupported(const json& o) {
  struct Refusal {
    const char* key;
    const char* why;
    bool (*allowed)(const json&);
  };
  static const Refusal kRefused[] = {
      {"tools", "tool calling is not supported",
       [](const json& v) { return v.is_array() && v.empty(); }},
      {"functions", "function calling is not supported",
       [](const json& v) { return v.is_array() && v.empty(); }},
      {"tool_choice", "tool calling is not supported",
       [](const json& v) { return v.is_string() && v.get<std::string>() == "none"; }},
      {"function_call", "function calling is not supported",
       [](const json& v) { return v.is_string() && v.get<std::string>() == "none"; }},
      {"parallel_tool_calls", "tool calling is not supported",
       [](const json& v) { return v.is_boolean(); }},
      {"logprobs", "log probabilities are not returned",
       [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
      {"top_logprobs", "log probabilities are not returned",
       [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 0; }},
      {"logit_bias", "logit_bias is not supported",
       [](const json& v) { return v.is_object() && v.empty(); }},
      {"response_format", "only {\"type\": \"text\"} is supported",
       [](const json& v) { return v.is_object() && v.value("type", "") == "text"; }},
      {"audio", "audio output is not supported", [](const json&) { return false; }},
      {"modalities", "only [\"text\"] is supported",
       [](const json& v) { return v == json::array({"text"}); }},
      {"prediction", "predicted outputs are not supported", [](const json&) { return false; }},
      {"background", "background responses are not supported",
       [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
      {"reasoning", "reasoning options are not supported", [](const json&) { return false; }},
      {"web_search_options", "web search is not supported", [](const json&) { return false; }},
      {"conversation", "conversations are not supported; use previous_response_id",
       [](const json&) { return false; }},
  };
  for (const Refusal& r : kRefused) {
    const json* v = Field(o, r.key);
    if (v != nullptr && !r.allowed(*v)) {
      return InvalidArgumentError(std::string(r.key) + ": " + r.why + " by streamd");
    }
  }
  if (const json* n = Field(o, "n")) {
    if (!n->is_number_integer() || n->get<int64_t>() != 1) {
      return InvalidArgumentError("n = " + n->dump() + ": only n = 1 is supported (one choice)");
    }
  }
  return OkStatus();
}

TurnRole RoleOf(const std::string& role, bool* ok) {
  *ok = true;
  if (role == "system" || role == "developer") return TurnRole::kSystem;
  if (role == "user") return TurnRole::kUser;
  if (role == "assistant") return TurnRole::kAssistant;
  *ok = false;
  return TurnRole::kUser;
}

// A message's content: a string, or an array of text parts ({"type": "text", "text": ...};
// the Responses API's "input_text" and "output_text" too).
Status ParseContent(const json& content, const std::string& field, const RequestLimits& limits,
                    std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
  } else if (content.is_array()) {
    out->clear();
    for (size_t j = 0; j < content.size(); ++j) {
      const std::string part_field = field + "[" + std::to_string(j) + "]";
      const json& part = content[j];
      if (!part.is_object()) return WrongType(part_field, "an object", part);
      const json* type = Field(part, "type");
      if (type == nullptr || !type->is_string()) {
        return InvalidArgumentError(part_field + ".type must be a string (\"text\")");
      }
      const std::string t = type->get<std::string>();
      if (t != "text" && t != "input_text" && t != "output_text") {
        return InvalidArgumentError(part_field + ".type = \"" + t +
                                    "\" is not supported: only text parts are");
      }
      const json* text = Field(part, "text");
      if (text == nullptr || !text->is_string()) {
        return InvalidArgumentError(part_field + ".text must be a string");
      }
      *out += text->get<std::string>();
    }
  } else {
    return WrongType(field, "a string or an array of text parts", content);
  }
  if (out->size() > static_cast<size_t>(limits.max_content_bytes)) {
    return InvalidArgumentError(field + " is " + std::to_string(out->size()) +
                                " bytes, over the limit of " +
                                std::to_string(limits.max_content_bytes));
  }
  return OkStatus();
}

// One message object of `messages` (or of the Responses API's `input`).
StatusOr<ChatMessage> ParseMessage(const json& m, const std::string& field,
                                   const RequestLimits& limits) {
  if (!m.is_object()) return WrongType(field, "an object", m);
  if (const json* type = Field(m, "type");
      type != nullptr && !(type->is_string() && type->get<std::string>() == "message")) {
    return InvalidArgumentError(field + ".type = " + type->dump() +
                                " is not supported: only messages are");
  }
  const json* role = Field(m, "role");
  if (role == nullptr || !role->is_string()) {
    return InvalidArgumentError(field + ".role must be one of system, developer, user, assistant");
  }
  bool known = false;
  ChatMessage out;
  out.role = RoleOf(role->get<std::string>(), &known);
  if (!known) {
    return InvalidArgumentError(field + ".role = " + role->dump() +
                                " is not supported (system, developer, user, assistant; no tool "
                                "messages: tool calling is not supported)");
  }
  for (const char* key : {"tool_calls", "function_call", "audio"}) {
    if (Field(m, key) != nullptr) {
      return InvalidArgumentError(field + "." + key + " is not supported by streamd");
    }
  }
  const json* content = Field(m, "content");
  if (content == nullptr) return InvalidArgumentError(field + ".content is missing");
  STREAMD_RETURN_IF_ERROR(ParseContent(*content, field + ".content", limits, &out.content));
  return out;
}

Status ParseStop(const json& o, const RequestLimits& limits, std::vector<std::string>* out) {
  const json* stop = Field(o, "stop");
  if (stop == nullptr) return OkStatus();
  if (stop->is_string()) {
    out->push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    for (size_t i = 0; i < stop->size(); ++i) {
      if (!(*stop)[i].is_string()) {
        return WrongType("stop[" + std::to_string(i) + "]", "a string", (*stop)[i]);
      }
      out->push_back((*stop)[i].get<std::string>());
    }
  } else {
    return WrongType("stop", "a string or an array of strings", *stop);
  }
  if (out->size() > limits.max_stop_strings) {
    return InvalidArgumentError("stop has " + std::to_string(out->size()) +
                                " strings, over the limit of " +
                                std::to_string(limits.max_stop_strings));
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const std::string field = stop->is_string() ? "stop" : "stop[" + std::to_string(i) + "]";
    if ((*out)[i].empty()) return InvalidArgumentError(field + " is empty");
    if ((*out)[i].size() > limits.max_stop_bytes) {
      return InvalidArgumentError(field + " is " + std::to_string((*out)[i].size()) +
                                  " bytes, over the limit of " +
                                  std::to_string(limits.max_stop_bytes));
    }
  }
  return OkStatus();
}

// temperature, top_p, seed, and the token limit under `max_keys` (the first one present wins).
Status ParseSampling(const json& o, const RequestLimits& limits,
                     std::initializer_list<const char*> max_keys, GenerateParams* p) {
  for (const char* key : max_keys) {
    STREAMD_ASSIGN_OR_RETURN(auto max, GetInteger(o, key, 1, limits.max_tokens));
    if (max) {
      p->max_tokens = static_cast<int32_t>(*max);
      break;
    }
  }
  // The engine's ranges (engine/sampling/sampling_params.h); OpenAI documents [0, 2].
  STREAMD_ASSIGN_OR_RETURN(auto temperature, GetNumber(o, "temperature", 0, 100));
  if (temperature) p->temperature = static_cast<float>(*temperature);
  STREAMD_ASSIGN_OR_RETURN(auto top_p, GetNumber(o, "top_p", 0, 1, /*lo_open=*/true));
  if (top_p) p->top_p = static_cast<float>(*top_p);
  for (auto [key, dest] : {std::pair{"presence_penalty", &p->presence_penalty},
                           std::pair{"frequency_penalty", &p->frequency_penalty}}) {
    STREAMD_ASSIGN_OR_RETURN(auto penalty, GetNumber(o, key, -2, 2));
    if (penalty) *dest = static_cast<float>(*penalty);
  }
  STREAMD_ASSIGN_OR_RETURN(auto seed, GetInteger(o, "seed", std::numeric_limits<int64_t>::min(),
                                                 std::numeric_limits<int64_t>::max()));
  // The engine takes seed 0 as "random": OpenAI's seed 0 becomes the (otherwise unused by
  // 64-bit clients) all-ones seed, so that every seed is reproducible.
  if (seed) p->seed = *seed == 0 ? ~uint64_t{0} : static_cast<uint64_t>(*seed);
  return OkStatus();
}

}  // namespace

StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const RequestLimits& limits) {
  STREAMD_ASSIGN_OR_RETURN(json o, ParseObject(body, limits));
  STREAMD_RETURN_IF_ERROR(RefuseUnsupported(o));
  ChatRequest r;
  STREAMD_RETURN_IF_ERROR(GetString(o, "model", &r.model));
  STREAMD_RETURN_IF_ERROR(GetBool(o, "stream", &r.stream));
  if (const json* so = Field(o, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (const json* u = Field(*so, "include_usage")) {
      if (!u->is_boolean()) return WrongType("stream_options.include_usage", "true or false", *u);
      r.include_usage = u->get<bool>();
    }
  }
  const json* messages = Field(o, "messages");
  if (messages == nullptr) return InvalidArgumentError("messages is missing");
  if (!messages->is_array()) return WrongType("messages", "an array", *messages);
  if (messages->empty()) return InvalidArgumentError("messages is empty");
  if (messages->size() > static_cast<size_t>(limits.max_messages)) {
    return InvalidArgumentError("messages has " + std::to_string(messages->size()) +
                                " entries, over the limit of " +
                                std::to_string(limits.max_messages));
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    STREAMD_ASSIGN_OR_RETURN(
        ChatMessage m, ParseMessage((*messages)[i], "messages[" + std::to_string(i) + "]", limits));
    r.messages.push_back(std::move(m));
  }
  STREAMD_RETURN_IF_ERROR(
      ParseSampling(o, limits, {"max_completion_tokens", "max_tokens"}, &r.params));
  STREAMD_RETURN_IF_ERROR(ParseStop(o, limits, &r.params.stop));
  return r;
}

StatusOr<ResponsesRequest> ParseResponsesRequest(std::string_view body,
                                                 const RequestLimits& limits) {
  STREAMD_ASSIGN_OR_RETURN(json o, ParseObject(body, limits));
  STREAMD_RETURN_IF_ERROR(RefuseUnsupported(o));
  if (const json* text = Field(o, "text")) {
    const json* format = text->is_object() ? Field(*text, "format") : nullptr;
    if (format != nullptr && !(format->is_object() && format->value("type", "") == "text")) {
      return InvalidArgumentError("text.format: only {\"type\": \"text\"} is supported");
    }
  }
  ResponsesRequest r;
  STREAMD_RETURN_IF_ERROR(GetString(o, "model", &r.model));
  STREAMD_RETURN_IF_ERROR(GetString(o, "instructions", &r.instructions));
  if (r.instructions.size() > static_cast<size_t>(limits.max_content_bytes)) {
    return InvalidArgumentError("instructions is " + std::to_string(r.instructions.size()) +
                                " bytes, over the limit of " +
                                std::to_string(limits.max_content_bytes));
  }
  STREAMD_RETURN_IF_ERROR(GetString(o, "previous_response_id", &r.previous_response_id));
  STREAMD_RETURN_IF_ERROR(GetBool(o, "stream", &r.stream));
  STREAMD_RETURN_IF_ERROR(GetBool(o, "store", &r.store));
  const json* input = Field(o, "input");
  if (input == nullptr) return InvalidArgumentError("input is missing");
  if (input->is_string()) {
    ChatMessage m;
    STREAMD_RETURN_IF_ERROR(ParseContent(*input, "input", limits, &m.content));
    r.input.push_back(std::move(m));
  } else if (input->is_array()) {
    if (input->empty()) return InvalidArgumentError("input is empty");
    if (input->size() > static_cast<size_t>(limits.max_messages)) {
      return InvalidArgumentError("input has " + std::to_string(input->size()) +
                                  " items, over the limit of " +
                                  std::to_string(limits.max_messages));
    }
    for (size_t i = 0; i < input->size(); ++i) {
      STREAMD_ASSIGN_OR_RETURN(
          ChatMessage m, ParseMessage((*input)[i], "input[" + std::to_string(i) + "]", limits));
      r.input.push_back(std::move(m));
    }
  } else {
    return WrongType("input", "a string or an array of messages", *input);
  }
  STREAMD_RETURN_IF_ERROR(ParseSampling(o, limits, {"max_output_tokens"}, &r.params));
  return r;
}

}  // namespace streamd::http
