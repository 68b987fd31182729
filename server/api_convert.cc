#include "server/api_convert.h"

namespace streamd::server {

v1::CacheMode ToProto(api::CacheMode mode) {
  switch (mode) {
    case api::CacheMode::kDense:
      return v1::CACHE_MODE_DENSE;
    case api::CacheMode::kWindow:
      return v1::CACHE_MODE_WINDOW;
    case api::CacheMode::kSink:
      return v1::CACHE_MODE_SINK;
  }
  return v1::CACHE_MODE_UNSPECIFIED;
}

v1::FinishReason ToProto(api::FinishReason reason) {
  switch (reason) {
    case api::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case api::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case api::FinishReason::kEndOfGeneration:
      return v1::FINISH_REASON_END_OF_GENERATION;
    case api::FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case api::FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

v1::SamplingParams ToProto(const api::Sampling& p) {
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

v1::CacheState ToProto(const api::CacheState& info) {
  v1::CacheState c;
  c.set_tokens_seen(info.tokens_seen);
  c.set_tokens_cached(info.tokens_cached);
  c.set_tokens_evicted(info.tokens_evicted);
  c.set_pending_tokens(info.pending_tokens);
  c.set_blocks_held(info.blocks_held);
  return c;
}

v1::SessionSettings ToProto(const api::SessionSettings& in) {
  v1::SessionSettings s;
  s.set_cache_mode(ToProto(in.mode));
  s.set_sinks(in.sinks);
  s.set_window(in.window);
  *s.mutable_sampling() = ToProto(in.sampling);
  s.set_max_blocks(in.max_blocks);
  return s;
}

v1::SessionInfo ToProto(const api::SessionInfo& in) {
  v1::SessionInfo out;
  out.set_session_id(in.id);
  *out.mutable_settings() = ToProto(in.settings);
  *out.mutable_cache() = ToProto(in.cache);
  out.set_generating(in.generating);
  out.set_offloaded(in.offloaded);
  out.set_attached(in.attached);
  out.set_idle_s(in.idle_s);
  return out;
}

v1::ModelInfo ToProto(const api::ModelInfo& m) {
  v1::ModelInfo info;
  info.set_name(m.name);
  info.set_architecture(m.architecture);
  info.set_vocab_size(m.vocab_size);
  info.set_context_length(m.context_length);
  info.set_chat_template(m.chat_template);
  for (int32_t id : m.end_of_generation_ids) info.add_end_of_generation_ids(id);
  info.set_bos_id(m.bos_id);
  info.set_add_bos(m.add_bos);
  return info;
}

}  // namespace streamd::server
