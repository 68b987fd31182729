#include "server/metrics_wiring.h"

#include <spdlog/spdlog.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>

#include "server/metrics/families.h"

namespace streamd::server {

namespace {
const std::string& Id(const std::string& session) {
  static const std::string kNone = "-";
  return session.empty() ? kNone : session;
}
}  // namespace

api::HostHooks MakeHostHooks(metrics::StreamdMetrics* m, metrics::SnapshotMetrics* sm) {
  api::HostHooks h;
  if (m != nullptr)
    h.on_step = [m](double seconds, int64_t tokens) { m->RecordStep(seconds, tokens); };
  h.on_written = [sm](const std::string&, int64_t bytes, double seconds) {
    if (sm == nullptr) return;
    sm->writes.Increment();
    sm->written_bytes.Increment(static_cast<double>(bytes));
    sm->write_bytes.Observe(static_cast<double>(bytes));
    sm->write_seconds.Observe(seconds);
  };
  h.on_write_failed = [sm](const std::string& id, const Status& why) {
    const std::string reason(StatusCodeName(why.code()));
    if (sm != nullptr) {
      sm->RecordWriteError(why.code() == StatusCode::kResourceExhausted  ? "RESOURCE_EXHAUSTED"
                           : why.code() == StatusCode::kPermissionDenied ? "PERMISSION_DENIED"
                                                                         : "INTERNAL");
    }
    spdlog::error("snapshot of session {} not written ({}): {}; it keeps serving from memory",
                  Id(id), reason, why.message());
  };
  h.on_loaded = [sm](const std::string& id, int64_t bytes, double seconds) {
    if (sm != nullptr) {
      sm->loads.Increment();
      sm->load_seconds.Observe(seconds);
    }
    spdlog::debug("session {} restored from its snapshot ({} bytes, {:.1f} ms)", Id(id), bytes,
                  seconds * 1e3);
  };
  h.on_rejected = [sm](const std::string& file, const std::string& moved_to, const Status& why) {
    const std::string reason(StatusCodeName(why.code()));
    if (sm != nullptr) {
      sm->RecordRejected(why.code() == StatusCode::kFailedPrecondition ? "FAILED_PRECONDITION"
                         : why.code() == StatusCode::kInvalidArgument  ? "INVALID_ARGUMENT"
                                                                       : "DATA_LOSS");
    }
    // Left where it is: another model's snapshot (never moved: it is that model's), or a move
    // that failed.
    spdlog::error("snapshot {} refused ({}): {}; {}", file, reason, why.message(),
                  moved_to.empty() ? "left where it is" : "moved to " + moved_to);
  };
  h.on_close = [m] {
    if (m != nullptr) m->sessions_closed.Increment();
  };
  h.on_offload = [sm] {
    if (sm != nullptr) sm->offloads.Increment();
  };
  h.on_transition = [sm](const std::string& id, std::string_view transition,
                         std::string_view outcome, double seconds) {
    if (sm != nullptr) sm->RecordTransition(transition, outcome, seconds);
    // A transition holds its session's Resumes: a slow one is worth a warning.
    const auto level = seconds >= 1.0 ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "session {}: {} ended ({}) after {:.1f} ms", Id(id), transition, outcome,
                seconds * 1e3);
  };
  h.on_resume_waited = [sm](const std::string& id, std::string_view outcome, double seconds) {
    if (sm != nullptr) sm->RecordResumeWait(outcome, seconds);
    const auto level = outcome == "timed_out" ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "session {}: a Resume waited {:.1f} ms for its offload or load ({})", Id(id),
                seconds * 1e3, outcome);
  };
  return h;
}

void LogHostNotes(const std::vector<api::HostNote>& notes) {
  for (const api::HostNote& n : notes) {
    spdlog::log(n.level == api::HostNote::Level::kError     ? spdlog::level::err
                : n.level == api::HostNote::Level::kWarning ? spdlog::level::warn
                                                            : spdlog::level::info,
                "{}", n.text);
  }
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

void AddScrapeHooks(metrics::StreamdMetrics& m, const api::EngineHost& host,
                    metrics::SnapshotMetrics* snapshots) {
  // Counters copied from the host's totals: each scrape adds what happened since the last.
  auto last = std::make_shared<api::HostStats>();
  m.AddScrapeHook([&m, &host, snapshots, last] {
    const api::HostStats st = host.Stats();
    m.SetSessions(st.generating, st.sessions - st.generating, st.waiting_opens);
    m.SetKvBlocks(st.blocks_used, st.blocks_total - st.blocks_used, st.block_bytes,
                  st.local_used_bytes, st.local_capacity_bytes);
    m.SetKvReservedBlocks(st.blocks_reserved);
    m.prompt_tokens.Increment(static_cast<double>(st.tokens_appended - last->tokens_appended));
    m.generation_tokens.Increment(static_cast<double>(st.tokens_out - last->tokens_out));
    m.evicted_tokens.Increment(static_cast<double>(st.tokens_evicted - last->tokens_evicted));
    *last = st;
    m.sessions_attached.Set(static_cast<double>(st.attached));
    if (snapshots == nullptr) return;
    snapshots->sessions_offloaded.Set(st.offloaded);
    snapshots->sessions_in_transition.Add({{"state", "offloading"}}).Set(st.offloading);
    snapshots->sessions_in_transition.Add({{"state", "loading"}}).Set(st.loading);
  });
}

void AddTenantScrapeHooks(metrics::StreamdMetrics& m, const api::EngineHost& host,
                          const Authenticator& keys) {
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
  m.AddScrapeHook([&sessions, &generating, &blocks, &keys, &host] {
    for (const std::string& tenant : keys.Tenants()) {
      const api::TenantUsage u = host.UsageOf(tenant);
      sessions.Add({{"tenant", tenant}}).Set(u.sessions);
      generating.Add({{"tenant", tenant}}).Set(u.generating);
      blocks.Add({{"tenant", tenant}}).Set(static_cast<double>(u.blocks));
    }
  });
}

}  // namespace streamd::server
