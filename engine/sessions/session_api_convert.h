// Values crossing between the engine's session API (engine/api/session_api.h) and the engine's
// own types: sampling, cache modes, session options and state, finish reasons, model facts, and
// the checks of Open's options. SessionService uses them at every call; the daemon's composition
// root and the tools that drive the engine directly use them too.
#pragma once

#include <cstdint>

#include "engine/api/session_api.h"
#include "engine/core/engine.h"
#include "engine/sessions/chat_formatter.h"
#include "engine/sessions/session_quotas.h"
#include "engine/sessions/session_registry.h"

namespace streamd {

// The api's Caller limits as the registry's quota checks count them.
inline SessionQuotas SessionQuotasOf(const api::TenantLimits& l) {
  return {l.max_sessions, l.max_generations, l.max_kv_blocks};
}

// Open options over the defaults, checked against the engine's and the model's limits; messages
// name the field ("open.window = 9000 is outside [1, 2044] ...").
StatusOr<SessionOptions> ResolveOpenOptions(const api::OpenOptions& open,
                                            const SessionOptions& defaults,
                                            const EngineConfig& engine, int32_t context_length,
                                            int32_t vocab_size);

// Value conversions between the api and the engine (also for code not yet on the api).
api::CacheState ToApiCacheState(const SessionInfo& info);
api::Sampling ToApiSampling(const SamplingParams& p);
SamplingParams FromApiSampling(const api::Sampling& p);
api::CacheMode ToApiCacheMode(CacheMode mode);
SessionOptions FromApiDefaults(const api::SessionDefaults& d);
api::SessionDefaults ToApiDefaults(const SessionOptions& o);
CacheMode FromApiCacheMode(api::CacheMode mode);
api::FinishReason ToApiFinishReason(FinishReason reason);
api::ModelInfo ModelInfoOf(const Engine& engine, const ChatFormatter& chat);

}  // namespace streamd
