// How the engine host and the server's parts feed StreamdMetrics and the log: the host's hooks,
// and the scrape hooks that copy its stats (sessions, KV pool, token totals, residency, tenants)
// into gauges at every scrape (one consistent reading). Kept apart from grpc_server.cc so that
// every series' source is in one place: docs/METRICS.md's table follows this file.
#pragma once

#include <functional>
#include <vector>

#include "engine/api/engine_host.h"
#include "server/authenticator.h"
#include "server/metrics/snapshot_metrics.h"
#include "server/metrics/streamd_metrics.h"

namespace streamd::server {

// The host's hooks: engine steps, sessions closed, snapshot writes, loads, refusals, offloads,
// residency transitions and Resumes that waited for one (metrics when `m` / `snapshots` are not
// null), and log lines naming the session, the file and the reason (a transition or wait over a
// second is a warning).
api::HostHooks MakeHostHooks(metrics::StreamdMetrics* m, metrics::SnapshotMetrics* snapshots);

// The host's notes about its start, at their levels.
void LogHostNotes(const std::vector<api::HostNote>& notes);

// Counts refused calls in streamd_auth_failures_total{reason} (every reason exported from 0);
// a no-op without metrics.
std::function<void(AuthFailure)> AuthFailureCounter(metrics::StreamdMetrics* m);

// Everything not event-driven, read at every scrape from host.Stats(): sessions by state,
// attached and offloaded sessions, the KV pool and the token counters. `snapshots` may be null
// (no snapshot directory).
void AddScrapeHooks(metrics::StreamdMetrics& m, const api::EngineHost& host,
                    metrics::SnapshotMetrics* snapshots);

// Per-tenant usage of the tenants `keys` holds (none: nothing added).
void AddTenantScrapeHooks(metrics::StreamdMetrics& m, const api::EngineHost& host,
                          const Authenticator& keys);

}  // namespace streamd::server
