#include "engine/sessions/session_api_convert.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling/stop_string_matcher.h"
#include "engine/tokenizer/utf8.h"

namespace streamd {
namespace {

std::string Str(std::string_view s) { return std::string(s); }

}  // namespace

StatusOr<SessionOptions> ResolveOpenOptions(const api::OpenOptions& open,
                                            const SessionOptions& defaults,
                                            const EngineConfig& engine, int32_t context_length,
                                            int32_t vocab_size) {
  SessionOptions o = defaults;
  if (open.mode) o.mode = FromApiCacheMode(*open.mode);
  if (open.sinks) {
    if (o.mode != CacheMode::kSink) {
      return InvalidArgumentError("open.sinks is only used with CACHE_MODE_SINK (cache mode is " +
                                  Str(CacheModeName(o.mode)) + ")");
    }
    o.sinks = *open.sinks;
  }
  if (open.window) {
    if (o.mode == CacheMode::kDense) {
      return InvalidArgumentError(
          "open.window is not used with CACHE_MODE_DENSE (the window is the model context of " +
          std::to_string(context_length) + ")");
    }
    o.window = *open.window;
  }
  if (o.mode == CacheMode::kSink && (o.sinks < 0 || o.sinks > engine.max_sinks)) {
    return InvalidArgumentError("open.sinks = " + std::to_string(o.sinks) + " is outside [0, " +
                                std::to_string(engine.max_sinks) + "]");
  }
  if (o.mode != CacheMode::kDense) {
    const int32_t sinks = o.mode == CacheMode::kSink ? o.sinks : 0;
    const int32_t max_window = std::min(engine.max_window, context_length - sinks);
    if (o.window < 1 || o.window > max_window) {
      return InvalidArgumentError(
          "open.window = " + std::to_string(o.window) + " is outside [1, " +
          std::to_string(max_window) + "] (min of the server's max_window " +
          std::to_string(engine.max_window) + " and the model context " +
          std::to_string(context_length) + " minus " + std::to_string(sinks) + " sinks)");
    }
  }
  o.sampling = FromApiSampling(api::WithOverrides(ToApiSampling(defaults.sampling), open.sampling));
  if (Status valid = ValidateSamplingParams(o.sampling, vocab_size); !valid.ok()) {
    return Status(valid.code(), "open.sampling." + valid.message());
  }
  return o;
}

api::CacheState ToApiCacheState(const SessionInfo& i) {
  api::CacheState c;
  c.tokens_seen = i.tokens_seen;
  c.tokens_cached = i.tokens_cached;
  c.tokens_evicted = i.tokens_evicted;
  c.pending_tokens = i.pending_tokens;
  c.generating = i.generating;
  c.blocks_held = i.blocks_held;
  c.max_blocks = i.max_blocks;
  c.revision = i.revision;
  return c;
}

api::Sampling ToApiSampling(const SamplingParams& p) {
  return {p.temperature,
          p.top_k,
          p.top_p,
          p.min_p,
          p.repetition_penalty,
          p.presence_penalty,
          p.frequency_penalty,
          p.penalty_last_n,
          p.seed};
}

SamplingParams FromApiSampling(const api::Sampling& p) {
  SamplingParams s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.repetition_penalty = p.repetition_penalty;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.penalty_last_n = p.penalty_last_n;
  s.seed = p.seed;
  return s;
}

api::CacheMode ToApiCacheMode(CacheMode mode) {
  switch (mode) {
    case CacheMode::kDense:
      return api::CacheMode::kDense;
    case CacheMode::kWindow:
      return api::CacheMode::kWindow;
    case CacheMode::kSink:
      break;
  }
  return api::CacheMode::kSink;
}

SessionOptions FromApiDefaults(const api::SessionDefaults& d) {
  SessionOptions o;
  o.mode = FromApiCacheMode(d.mode);
  o.sinks = d.sinks;
  o.window = d.window;
  o.sampling = FromApiSampling(d.sampling);
  o.admission_timeout = d.admission_timeout;
  return o;
}

api::SessionDefaults ToApiDefaults(const SessionOptions& o) {
  api::SessionDefaults d;
  d.mode = ToApiCacheMode(o.mode);
  d.sinks = o.sinks;
  d.window = o.window;
  d.sampling = ToApiSampling(o.sampling);
  d.admission_timeout = o.admission_timeout;
  return d;
}

CacheMode FromApiCacheMode(api::CacheMode mode) {
  switch (mode) {
    case api::CacheMode::kDense:
      return CacheMode::kDense;
    case api::CacheMode::kWindow:
      return CacheMode::kWindow;
    case api::CacheMode::kSink:
      break;
  }
  return CacheMode::kSink;
}

api::FinishReason ToApiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return api::FinishReason::kLength;
    case FinishReason::kStop:
      return api::FinishReason::kStop;
    case FinishReason::kEndOfGeneration:
      return api::FinishReason::kEndOfGeneration;
    case FinishReason::kCancelled:
      return api::FinishReason::kCancelled;
    case FinishReason::kError:
      break;
  }
  return api::FinishReason::kError;
}

api::ModelInfo ModelInfoOf(const Engine& engine, const ChatFormatter& chat) {
  const LlamaConfig& c = engine.model().config();
  const tokenizer::Tokenizer& t = engine.tokenizer();
  api::ModelInfo info;
  info.name = c.name;
  info.architecture = c.architecture;
  info.vocab_size = t.vocab_size();
  info.context_length = c.context_length;
  info.chat_template = std::string(chat.template_name());
  info.end_of_generation_ids.assign(t.end_of_generation_ids().begin(),
                                    t.end_of_generation_ids().end());
  info.bos_id = t.bos_id();
  info.add_bos = t.add_bos();
  return info;
}

namespace api {

Status ValidateSampling(const Sampling& s, int32_t vocab_size) {
  return ValidateSamplingParams(FromApiSampling(s), vocab_size);
}
Status ValidateStopStrings(const std::vector<std::string>& stop) {
  return StopStringMatcher::Validate(stop);
}
size_t FindInvalidUtf8(std::string_view text) { return tokenizer::FindInvalidUtf8(text); }

}  // namespace api

}  // namespace streamd
