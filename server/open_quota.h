// The session quotas of a tenant (auth.keys_file: max_sessions, max_kv_blocks) for one Open.
//
// Checked twice: by the stream when the Open arrives (an early, clear refusal), and by the
// admission queue just before the Open is tried, where Opens go one at a time: two Opens of one
// tenant that race can both pass the first check, never the second.
#pragma once

#include <string_view>

#include "engine/api/streamd_engine.h"
#include "server/authenticator.h"
#include "engine/sessions/session_registry.h"

namespace streamd::server {

// OK, or RESOURCE_EXHAUSTED naming the tenant, the quota and its value. options.tenant says
// whose Open it is ("" or a tenant without quotas: OK); `context_length` bounds windows.
// `what` is the request the message names: "open", or "fork" (a fork is one more session with
// its parent's options).
Status CheckOpenQuota(const Authenticator& auth, const SessionRegistry& registry,
                      const EngineConfig& engine, int32_t context_length,
                      const SessionOptions& options, std::string_view what = "open");

}  // namespace streamd::server
