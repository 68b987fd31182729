#include "server/proto_convert.h"

#include <algorithm>
#include <string>

namespace streamd::server {
namespace {

std::string Str(std::string_view s) { return std::string(s); }

Status Prefixed(const Status& s, std::string_view path) {
  if (s.ok()) return s;
  return Status(s.code(), Str(path) + "." + s.message());
}

}  // namespace

StatusOr<api::OpenOptions> ToOpenOptions(const v1::Open& open) {
  api::OpenOptions o;
  switch (open.cache_mode()) {
    case v1::CACHE_MODE_UNSPECIFIED:
      break;
    case v1::CACHE_MODE_DENSE:
      o.mode = api::CacheMode::kDense;
      break;
    case v1::CACHE_MODE_WINDOW:
      o.mode = api::CacheMode::kWindow;
      break;
    case v1::CACHE_MODE_SINK:
      o.mode = api::CacheMode::kSink;
      break;
    default:
      return InvalidArgumentError("open.cache_mode = " + std::to_string(open.cache_mode()) +
                                  " is not a CacheMode (1 dense, 2 window, 3 sink)");
  }
  if (open.has_sinks()) o.sinks = open.sinks();
  if (open.has_window()) o.window = open.window();
  o.sampling = ToOverrides(open.sampling());
  return o;
}

api::SamplingOverrides ToOverrides(const v1::SamplingParams& p) {
  api::SamplingOverrides o;
  if (p.has_temperature()) o.temperature = p.temperature();
  if (p.has_top_k()) o.top_k = p.top_k();
  if (p.has_top_p()) o.top_p = p.top_p();
  if (p.has_min_p()) o.min_p = p.min_p();
  if (p.has_repetition_penalty()) o.repetition_penalty = p.repetition_penalty();
  if (p.has_presence_penalty()) o.presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) o.frequency_penalty = p.frequency_penalty();
  if (p.has_penalty_last_n()) o.penalty_last_n = p.penalty_last_n();
  if (p.has_seed()) o.seed = p.seed();
  return o;
}

api::AppendInput ToAppendInput(const v1::Append& a) {
  api::AppendInput in;
  in.partial = a.partial();
  if (a.tokens_size() > 0) {
    in.kind = api::AppendInput::Kind::kTokens;
    in.tokens.assign(a.tokens().begin(), a.tokens().end());
    return in;
  }
  in.text = a.text();
  if (a.role() == v1::CHAT_ROLE_UNSPECIFIED) {
    in.kind = api::AppendInput::Kind::kText;
    in.parse_special = a.parse_special();
    return in;
  }
  in.kind = api::AppendInput::Kind::kTurn;
  in.role = a.role() == v1::CHAT_ROLE_SYSTEM ? api::Role::kSystem
            : a.role() == v1::CHAT_ROLE_USER ? api::Role::kUser
                                             : api::Role::kAssistant;
  return in;
}

Status ValidateTruncate(const v1::Truncate& t, const ServerLimits& limits) {
  STREAMD_RETURN_IF_ERROR(ValidateRequestId(t.request_id(), limits, "truncate.request_id"));
  if (t.keep_tokens() < 0) {
    return InvalidArgumentError("truncate.keep_tokens = " + std::to_string(t.keep_tokens()) +
                                " must be >= 0 (output tokens of the generation that stay)");
  }
  return OkStatus();
}

Status ValidateRequestId(std::string_view id, const ServerLimits& limits, std::string_view path) {
  if (id.size() > static_cast<size_t>(limits.max_request_id_bytes)) {
    return InvalidArgumentError(Str(path) + " is " + std::to_string(id.size()) +
                                " bytes, over the limit of " +
                                std::to_string(limits.max_request_id_bytes));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    if (id[i] < 0x20 || id[i] > 0x7e) {
      return InvalidArgumentError(Str(path) + " has a byte outside printable ASCII at offset " +
                                  std::to_string(i));
    }
  }
  return OkStatus();
}

StatusOr<api::GenerateRequest> ToGenerateRequest(const v1::Generate& g,
                                                 const api::Sampling& session_sampling,
                                                 const ServerLimits& limits, int32_t vocab_size) {
  api::GenerateRequest o;
  o.max_tokens = g.has_max_tokens() ? g.max_tokens() : limits.default_max_tokens;
  if (o.max_tokens < 1 || o.max_tokens > limits.max_tokens) {
    return InvalidArgumentError("generate.max_tokens = " + std::to_string(o.max_tokens) +
                                " is outside [1, " + std::to_string(limits.max_tokens) + "]");
  }
  for (int i = 0; i < g.stop_size(); ++i) {
    const std::string& stop = g.stop(i);
    if (const size_t bad = api::FindInvalidUtf8(stop); bad != std::string_view::npos) {
      return InvalidArgumentError("generate.stop[" + std::to_string(i) +
                                  "] is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
    }
    o.stop.push_back(stop);
  }
  // Messages: "stop: 17 stop strings, over the limit of 16", "stop[2] is empty", ...
  STREAMD_RETURN_IF_ERROR(Prefixed(api::ValidateStopStrings(o.stop), "generate"));
  STREAMD_RETURN_IF_ERROR(ValidateRequestId(g.request_id(), limits, "generate.request_id"));
  o.request_id = g.request_id();
  if (g.has_sampling()) {
    o.sampling = ToOverrides(g.sampling());
    // The engine's messages start with the field name ("top_p = 1.5 is out of range (0, 1]").
    STREAMD_RETURN_IF_ERROR(Prefixed(
        api::ValidateSampling(api::WithOverrides(session_sampling, o.sampling), vocab_size),
        "generate.sampling"));
  }
  return o;
}

Status ValidateAppend(const v1::Append& a, const ServerLimits& limits, int32_t vocab_size) {
  const bool has_text = !a.text().empty();
  const bool has_tokens = a.tokens_size() > 0;
  if (has_text == has_tokens) {
    return InvalidArgumentError(has_text ? "append: set either text or tokens, not both"
                                         : "append: text and tokens are both empty");
  }
  if (!v1::ChatRole_IsValid(a.role())) {
    return InvalidArgumentError("append.role = " + std::to_string(a.role()) +
                                " is not a ChatRole (1 system, 2 user, 3 assistant)");
  }
  if (has_tokens) {
    if (a.role() != v1::CHAT_ROLE_UNSPECIFIED) {
      return InvalidArgumentError("append.role needs text; token ids are appended as they are");
    }
    if (a.tokens_size() > limits.max_append_tokens) {
      return InvalidArgumentError("append.tokens has " + std::to_string(a.tokens_size()) +
                                  " ids, over the limit of " +
                                  std::to_string(limits.max_append_tokens));
    }
    for (int i = 0; i < a.tokens_size(); ++i) {
      if (a.tokens(i) < 0 || a.tokens(i) >= vocab_size) {
        return InvalidArgumentError(
            "append.tokens[" + std::to_string(i) + "] = " + std::to_string(a.tokens(i)) +
            " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
      }
    }
    return OkStatus();
  }
  if (a.text().size() > static_cast<size_t>(limits.max_append_bytes)) {
    return InvalidArgumentError("append.text is " + std::to_string(a.text().size()) +
                                " bytes, over the limit of " +
                                std::to_string(limits.max_append_bytes));
  }
  if (const size_t bad = api::FindInvalidUtf8(a.text()); bad != std::string_view::npos) {
    return InvalidArgumentError("append.text is not valid UTF-8 (byte offset " +
                                std::to_string(bad) + ")");
  }
  if (a.parse_special() && a.role() != v1::CHAT_ROLE_UNSPECIFIED) {
    return InvalidArgumentError(
        "append.parse_special is for raw text only; chat content never parses special tokens");
  }
  return OkStatus();
}

}  // namespace streamd::server
