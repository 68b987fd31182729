#include "server/proto_convert.h"

#include <algorithm>
#include <string>

#include "engine/api/streamd_engine.h"

namespace streamd::server {
namespace {

std::string Str(std::string_view s) { return std::string(s); }

Status Prefixed(const Status& s, std::string_view path) {
  if (s.ok()) return s;
  return Status(s.code(), Str(path) + "." + s.message());
}

}  // namespace

int32_t MaxWindow(const EngineConfig& engine, const ModelLimits& model, int32_t sinks) {
  return std::min(engine.max_window, model.context_length - sinks);
}

StatusOr<SessionOptions> ToSessionOptions(const v1::Open& open, const SessionOptions& defaults,
                                          const EngineConfig& engine, const ModelLimits& model) {
  SessionOptions o = defaults;
  switch (open.cache_mode()) {
    case v1::CACHE_MODE_UNSPECIFIED:
      break;
    case v1::CACHE_MODE_DENSE:
      o.mode = CacheMode::kDense;
      break;
    case v1::CACHE_MODE_WINDOW:
      o.mode = CacheMode::kWindow;
      break;
    case v1::CACHE_MODE_SINK:
      o.mode = CacheMode::kSink;
      break;
    default:
      return InvalidArgumentError("open.cache_mode = " + std::to_string(open.cache_mode()) +
                                  " is not a CacheMode (1 dense, 2 window, 3 sink)");
  }
  if (open.has_sinks()) {
    if (o.mode != CacheMode::kSink) {
      return InvalidArgumentError("open.sinks is only used with CACHE_MODE_SINK (cache mode is " +
                                  Str(CacheModeName(o.mode)) + ")");
    }
    o.sinks = open.sinks();
  }
  if (open.has_window()) {
    if (o.mode == CacheMode::kDense) {
      return InvalidArgumentError(
          "open.window is not used with CACHE_MODE_DENSE (the window is the model context of " +
          std::to_string(model.context_length) + ")");
    }
    o.window = open.window();
  }
  if (o.mode == CacheMode::kSink && (o.sinks < 0 || o.sinks > engine.max_sinks)) {
    return InvalidArgumentError("open.sinks = " + std::to_string(o.sinks) + " is outside [0, " +
                                std::to_string(engine.max_sinks) + "]");
  }
  if (o.mode != CacheMode::kDense) {
    const int32_t sinks = o.mode == CacheMode::kSink ? o.sinks : 0;
    const int32_t max_window = MaxWindow(engine, model, sinks);
    if (o.window < 1 || o.window > max_window) {
      return InvalidArgumentError(
          "open.window = " + std::to_string(o.window) + " is outside [1, " +
          std::to_string(max_window) + "] (min of the server's max_window " +
          std::to_string(engine.max_window) + " and the model context " +
          std::to_string(model.context_length) + " minus " + std::to_string(sinks) + " sinks)");
    }
  }
  STREAMD_ASSIGN_OR_RETURN(o.sampling, MergeSampling(open.sampling(), defaults.sampling,
                                                     model.vocab_size, "open.sampling"));
  return o;
}

StatusOr<SamplingParams> MergeSampling(const v1::SamplingParams& p, const SamplingParams& base,
                                       int32_t vocab_size, std::string_view path) {
  SamplingParams s = base;
  if (p.has_temperature()) s.temperature = p.temperature();
  if (p.has_top_k()) s.top_k = p.top_k();
  if (p.has_top_p()) s.top_p = p.top_p();
  if (p.has_min_p()) s.min_p = p.min_p();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  if (p.has_presence_penalty()) s.presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) s.frequency_penalty = p.frequency_penalty();
  if (p.has_penalty_last_n()) s.penalty_last_n = p.penalty_last_n();
  if (p.has_seed()) s.seed = p.seed();
  // The engine's messages start with the field name ("top_p = 1.5 is out of range (0, 1]").
  STREAMD_RETURN_IF_ERROR(Prefixed(ValidateSamplingParams(s, vocab_size), path));
  return s;
}

SessionInput ToSessionInput(const v1::Append& a) {
  SessionInput in;
  in.partial = a.partial();
  if (a.tokens_size() > 0) {
    in.kind = SessionInput::Kind::kTokens;
    in.tokens.assign(a.tokens().begin(), a.tokens().end());
    return in;
  }
  in.text = a.text();
  if (a.role() == v1::CHAT_ROLE_UNSPECIFIED) {
    in.kind = SessionInput::Kind::kRaw;
    in.parse_special = a.parse_special();
    return in;
  }
  in.kind = SessionInput::Kind::kTurn;
  in.role = a.role() == v1::CHAT_ROLE_SYSTEM ? ChatRoleKind::kSystem
            : a.role() == v1::CHAT_ROLE_USER ? ChatRoleKind::kUser
                                             : ChatRoleKind::kAssistant;
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

StatusOr<GenerateOptions> ToGenerateOptions(const v1::Generate& g,
                                            const SamplingParams& session_sampling,
                                            const ServerLimits& limits, int32_t vocab_size) {
  GenerateOptions o;
  o.max_tokens = g.has_max_tokens() ? g.max_tokens() : limits.default_max_tokens;
  if (o.max_tokens < 1 || o.max_tokens > limits.max_tokens) {
    return InvalidArgumentError("generate.max_tokens = " + std::to_string(o.max_tokens) +
                                " is outside [1, " + std::to_string(limits.max_tokens) + "]");
  }
  for (int i = 0; i < g.stop_size(); ++i) {
    const std::string& stop = g.stop(i);
    if (const size_t bad = tokenizer::FindInvalidUtf8(stop); bad != std::string_view::npos) {
      return InvalidArgumentError("generate.stop[" + std::to_string(i) +
                                  "] is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
    }
    o.stop.push_back(stop);
  }
  // Messages: "stop: 17 stop strings, over the limit of 16", "stop[2] is empty", ...
  STREAMD_RETURN_IF_ERROR(Prefixed(StopStringMatcher::Validate(o.stop), "generate"));
  STREAMD_RETURN_IF_ERROR(ValidateRequestId(g.request_id(), limits, "generate.request_id"));
  o.request_id = g.request_id();
  if (g.has_sampling()) {
    STREAMD_ASSIGN_OR_RETURN(SamplingParams s, MergeSampling(g.sampling(), session_sampling,
                                                             vocab_size, "generate.sampling"));
    o.sampling = s;
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
  if (const size_t bad = tokenizer::FindInvalidUtf8(a.text()); bad != std::string_view::npos) {
    return InvalidArgumentError("append.text is not valid UTF-8 (byte offset " +
                                std::to_string(bad) + ")");
  }
  if (a.parse_special() && a.role() != v1::CHAT_ROLE_UNSPECIFIED) {
    return InvalidArgumentError(
        "append.parse_special is for raw text only; chat content never parses special tokens");
  }
  return OkStatus();
}

v1::CacheMode ToProto(CacheMode mode) {
  switch (mode) {
    case CacheMode::kDense:
      return v1::CACHE_MODE_DENSE;
    case CacheMode::kWindow:
      return v1::CACHE_MODE_WINDOW;
    case CacheMode::kSink:
      return v1::CACHE_MODE_SINK;
  }
  return v1::CACHE_MODE_UNSPECIFIED;
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEndOfGeneration:
      return v1::FINISH_REASON_END_OF_GENERATION;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

v1::SamplingParams ToProto(const SamplingParams& p) {
  v1::SamplingParams out;
  out.set_temperature(p.temperature);
  out.set_top_k(p.top_k);
  out.set_top_p(p.top_p);
  out.set_min_p(p.min_p);
  out.set_repetition_penalty(p.repetition_penalty);
  out.set_presence_penalty(p.presence_penalty);
  out.set_frequency_penalty(p.frequency_penalty);
  out.set_penalty_last_n(p.penalty_last_n);
  out.set_seed(p.seed);
  return out;
}

v1::CacheState ToCacheState(const SessionInfo& info) {
  v1::CacheState c;
  c.set_tokens_seen(info.tokens_seen);
  c.set_tokens_cached(info.tokens_cached);
  c.set_tokens_evicted(info.tokens_evicted);
  c.set_pending_tokens(info.pending_tokens);
  c.set_blocks_held(info.blocks_held);
  return c;
}

v1::SessionSettings ToSettings(const CacheSpec& spec, const SamplingParams& sampling,
                               int32_t max_blocks) {
  v1::SessionSettings s;
  s.set_cache_mode(ToProto(spec.mode));
  s.set_sinks(spec.sinks);
  s.set_window(spec.window);
  *s.mutable_sampling() = ToProto(sampling);
  s.set_max_blocks(max_blocks);
  return s;
}

}  // namespace streamd::server
