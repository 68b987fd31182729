// A tenant's session quotas, counted where its sessions are (the registry): how many sessions it
// holds, how many KV blocks their bounds reserve, how many generations run. Who the tenant is and
// what its quotas are is the caller's (server/: auth.keys_file); 0 means unlimited.
//
// The Open check runs twice: when the Open arrives (an early, clear refusal), and in the
// admission queue just before the Open is tried, where Opens go one at a time: two Opens of one
// tenant that race can both pass the first check, never the second.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/core/engine.h"
#include "engine/sessions/session_registry.h"

namespace streamd {

struct SessionQuotas {
  int32_t max_sessions = 0;
  int32_t max_generations = 0;
  int32_t max_kv_blocks = 0;
};

// OK, or RESOURCE_EXHAUSTED naming the tenant, the quota and its value, for one more session with
// `options` (options.tenant says whose; "" has none). `context_length` bounds windows. `what` is
// the request the message names: "open", or "fork" (one more session with its parent's options).
Status CheckOpenQuota(const SessionRegistry& registry, const EngineConfig& engine,
                      int32_t context_length, const SessionOptions& options,
                      const SessionQuotas& quotas, std::string_view what = "open");

// OK, or RESOURCE_EXHAUSTED when `tenant` already runs max_generations generations.
Status CheckGenerationQuota(const SessionRegistry& registry, const std::string& tenant,
                            const SessionQuotas& quotas);

}  // namespace streamd
