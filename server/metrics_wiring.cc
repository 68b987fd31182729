#include "server/metrics_wiring.h"

#include <spdlog/spdlog.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "server/metrics/families.h"

namespace streamd::server {

PersisterHooks MakePersisterHooks(metrics::SnapshotMetrics* m) {
  PersisterHooks h;
  h.on_written = [m](SessionId, int64_t bytes, double seconds) {
    if (m == nullptr) return;
    m->writes.Increment();
    m->written_bytes.Increment(static_cast<double>(bytes));
    m->write_bytes.Observe(static_cast<double>(bytes));
    m->write_seconds.Observe(seconds);
  };
  h.on_write_failed = [m](SessionId id, const Status& why) {
    const std::string reason(StatusCodeName(why.code()));
    if (m != nullptr) {
      m->RecordWriteError(why.code() == StatusCode::kResourceExhausted  ? "RESOURCE_EXHAUSTED"
                          : why.code() == StatusCode::kPermissionDenied ? "PERMISSION_DENIED"
                                                                        : "INTERNAL");
    }
    spdlog::error("snapshot of session {} not written ({}): {}; it keeps serving from memory",
                  id.valid() ? id.ToString() : std::string("-"), reason, why.message());
  };
  h.on_loaded = [m](SessionId id, int64_t bytes, double seconds) {
    if (m != nullptr) {
      m->loads.Increment();
      m->load_seconds.Observe(seconds);
    }
    spdlog::debug("session {} restored from its snapshot ({} bytes, {:.1f} ms)", id.ToString(),
                  bytes, seconds * 1e3);
  };
  h.on_rejected = [m](const std::string& file, const std::string& moved_to, const Status& why) {
    const std::string reason(StatusCodeName(why.code()));
    if (m != nullptr) {
      m->RecordRejected(why.code() == StatusCode::kFailedPrecondition ? "FAILED_PRECONDITION"
                        : why.code() == StatusCode::kInvalidArgument  ? "INVALID_ARGUMENT"
                                                                      : "DATA_LOSS");
    }
    if (moved_to.empty()) {
      // Another model's snapshot (never moved: it is that model's), or a move that failed.
      spdlog::error("snapshot {} refused ({}): {}; left where it is", file, reason, why.message());
    } else {
      spdlog::error("snapshot {} refused ({}): {}; moved to {}", file, reason, why.message(),
                    moved_to);
    }
  };
  return h;
}

RegistryHooks MakeRegistryHooks(metrics::StreamdMetrics* m, metrics::SnapshotMetrics* snapshots,
                                AdmissionQueue* admission) {
  RegistryHooks h;
  h.on_close = [m, admission] {
    if (m != nullptr) m->sessions_closed.Increment();
    admission->Notify();
  };
  h.on_offload = [snapshots, admission] {
    if (snapshots != nullptr) snapshots->offloads.Increment();
    admission->Notify();
  };
  h.on_transition = [snapshots](SessionId id, std::string_view transition, std::string_view outcome,
                                double seconds) {
    if (snapshots != nullptr) snapshots->RecordTransition(transition, outcome, seconds);
    // A transition holds its session's Resumes: a slow one is worth a warning.
    const auto level = seconds >= 1.0 ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "session {}: {} ended ({}) after {:.1f} ms", id.ToString(), transition,
                outcome, seconds * 1e3);
  };
  h.on_resume_waited = [snapshots](SessionId id, std::string_view outcome, double seconds) {
    if (snapshots != nullptr) snapshots->RecordResumeWait(outcome, seconds);
    const auto level = outcome == "timed_out" ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "session {}: a Resume waited {:.1f} ms for its offload or load ({})",
                id.valid() ? id.ToString() : std::string("-"), seconds * 1e3, outcome);
  };
  return h;
}

std::function<void(AuthFailure)> AuthFailureCounter(metrics::StreamdMetrics* m) {
  if (m == nullptr) return [](AuthFailure) {};
  auto& family = prometheus::BuildCounter()
                     .Name("streamd_auth_failures_total")
                     .Help(
                         "Calls refused by authentication (missing, malformed or unknown API "
                         "key) or authorization (not_admin).")
                     .Register(*m->registry);
  std::array<prometheus::Counter*, kNumAuthFailures> by_reason{};
  for (int i = 0; i < kNumAuthFailures; ++i) {
    by_reason[static_cast<size_t>(i)] =
        &family.Add({{"reason", AuthFailureName(static_cast<AuthFailure>(i))}});
  }
  return [by_reason](AuthFailure why) { by_reason[static_cast<size_t>(why)]->Increment(); };
}

std::function<void(const StepReport&)> StepObserver(metrics::StreamdMetrics& m) {
  return [&m](const StepReport& r) { m.RecordStep(r.seconds, r.tokens); };
}

void AddScrapeHooks(metrics::StreamdMetrics& m, const Engine& engine,
                    const SessionRegistry& registry, const AdmissionQueue& admission,
                    metrics::SnapshotMetrics* snapshots, const Authenticator& keys) {
  // Counters copied from the engine's totals: each scrape adds what happened since the last.
  auto last = std::make_shared<EngineStats>();
  m.AddScrapeHook([&m, &engine, &admission, last] {
    const EngineStats st = engine.Stats();
    m.SetSessions(st.generating, st.sessions - st.generating, admission.waiting());
    m.SetKvBlocks(st.blocks_used, st.blocks_total - st.blocks_used,
                  st.bytes_per_token * engine.config().block_size);
    m.SetKvReservedBlocks(st.blocks_reserved + st.blocks_headroom);
    m.prompt_tokens.Increment(static_cast<double>(st.tokens_appended - last->tokens_appended));
    m.generation_tokens.Increment(static_cast<double>(st.tokens_out - last->tokens_out));
    m.evicted_tokens.Increment(static_cast<double>(st.tokens_evicted - last->tokens_evicted));
    *last = st;
  });
  m.AddScrapeHook([&m, &registry, snapshots] {
    int64_t attached = 0;
    std::array<int64_t, 4> by_residency{};  // indexed by Residency
    for (const auto& session : registry.All()) {
      std::lock_guard<std::mutex> lock(session->mu);
      attached += session->attached;
      ++by_residency[static_cast<size_t>(session->residency)];
    }
    m.sessions_attached.Set(static_cast<double>(attached));
    if (snapshots == nullptr) return;
    const auto count = [&](Residency r) {
      return static_cast<double>(by_residency[static_cast<size_t>(r)]);
    };
    snapshots->sessions_offloaded.Set(count(Residency::kOffloaded));
    for (Residency r : {Residency::kOffloading, Residency::kLoading}) {
      snapshots->sessions_in_transition.Add({{"state", ResidencyName(r)}}).Set(count(r));
    }
  });
  if (!keys.enabled()) return;
  // Per tenant; the label values are the keys file's tenants only, so the number of series is
  // bounded by the file, never by what clients send.
  auto& sessions = prometheus::BuildGauge()
                       .Name("streamd_tenant_sessions")
                       .Help("Sessions a tenant holds (resident or on disk).")
                       .Register(*m.registry);
  auto& generating = prometheus::BuildGauge()
                         .Name("streamd_tenant_generations")
                         .Help("Generations a tenant runs now.")
                         .Register(*m.registry);
  auto& blocks = prometheus::BuildGauge()
                     .Name("streamd_tenant_kv_blocks")
                     .Help("KV blocks reserved by a tenant's resident sessions.")
                     .Register(*m.registry);
  m.AddScrapeHook([&sessions, &generating, &blocks, &keys, &registry] {
    for (const std::string& tenant : keys.Tenants()) {
      const SessionRegistry::Usage u = registry.UsageOf(tenant);
      sessions.Add({{"tenant", tenant}}).Set(u.sessions);
      generating.Add({{"tenant", tenant}}).Set(u.generating);
      blocks.Add({{"tenant", tenant}}).Set(static_cast<double>(u.blocks));
    }
  });
}

}  // namespace streamd::server
