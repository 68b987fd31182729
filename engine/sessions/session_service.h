// SessionService: the engine's session API (engine/api/session_api.h) over the parts that keep a
// session's life: the Engine, the SessionRegistry (residency, the reaper), the SessionDriver
// (input, generation, barge-in, rollback), the AdmissionQueue (Opens waiting for blocks), the
// tenants' quotas and token budgets. It is the one place where the api's values meet those
// parts, so a transport holding an api::Engine never sees a SessionRecord, a cache or a pool.
//
// The parts are owned by whoever built them (the daemon's SessionHost, session_host.h) and must
// outlive the service and every api::Session it hands out.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/api/session_api.h"
#include "engine/core/engine.h"
#include "engine/sessions/admission_queue.h"
#include "engine/sessions/chat_formatter.h"
#include "engine/sessions/session_api_convert.h"
#include "engine/sessions/session_driver.h"
#include "engine/sessions/session_quotas.h"
#include "engine/sessions/session_registry.h"
#include "engine/sessions/token_budget.h"

namespace streamd {

struct SessionServiceParts {
  Engine& engine;
  SessionRegistry& registry;
  SessionDriver& driver;
  AdmissionQueue& admission;
  const ChatFormatter& chat;
  TokenBudget& budget;
  // Shutdown began (api::Engine::Drain sets it; the transports ask api::Engine::draining()): no
  // new sessions or generations.
  std::atomic<bool>& draining;
  // What snapshots are stamped with (an export without a snapshot directory); may be null.
  const SnapshotContext* snapshots = nullptr;
  api::SessionDefaults session_defaults;  // Open's absent fields
  int32_t default_max_tokens = 256;
  // A caller's quota refused a call (for a rate-limited log line); optional.
  std::function<void(const Status&)> on_quota_refusal;
};

std::unique_ptr<api::Engine> MakeSessionService(SessionServiceParts parts);

}  // namespace streamd
