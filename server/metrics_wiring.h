// How the server's parts feed StreamdMetrics: the hooks each part takes, and the scrape hooks
// that copy the engine's pool, the session registry, the admission queue and the tenants into
// gauges at every scrape (one consistent reading of each). Kept apart from grpc_server.cc so
// that every series' source is in one place: docs/METRICS.md's table follows this file.
#pragma once

#include <functional>

#include "engine/api/streamd_engine.h"
#include "engine/sessions/admission_queue.h"
#include "engine/sessions/session_registry.h"
#include "server/authenticator.h"
#include "server/metrics/snapshot_metrics.h"
#include "server/metrics/streamd_metrics.h"

namespace streamd::server {

// The persister's hooks: snapshot metrics (when `m` is not null) and log lines naming the
// session, the file and the reason.
PersisterHooks MakePersisterHooks(metrics::SnapshotMetrics* m);

// The session registry's hooks: sessions closed, offloads and loads (each freeing blocks wakes
// the oldest waiting Open in `admission`), residency transitions and Resumes that waited for
// one (metrics when `m` / `snapshots` are not null, and log lines: a transition or wait over a
// second is a warning, with the session and what it waited for).
RegistryHooks MakeRegistryHooks(metrics::StreamdMetrics* m, metrics::SnapshotMetrics* snapshots,
                                AdmissionQueue* admission);

// Counts refused calls in streamd_auth_failures_total{reason} (every reason exported from 0);
// a no-op without metrics.
std::function<void(AuthFailure)> AuthFailureCounter(metrics::StreamdMetrics* m);

// EngineConfig::step_observer: step duration and tokens.
std::function<void(const StepReport&)> StepObserver(metrics::StreamdMetrics& m);

// Everything not event-driven, read at every scrape: sessions by state (the engine for active
// and idle, the admission queue for queued), attached and offloaded sessions (the registry),
// the KV pool and the token counters (Engine::Stats), and per-tenant usage when `keys` holds
// tenants. `snapshots` may be null (no snapshot directory).
void AddScrapeHooks(metrics::StreamdMetrics& m, const Engine& engine,
                    const SessionRegistry& registry, const AdmissionQueue& admission,
                    metrics::SnapshotMetrics* snapshots, const Authenticator& keys);

}  // namespace streamd::server
