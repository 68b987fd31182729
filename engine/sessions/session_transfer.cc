#include "engine/sessions/session_transfer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>

#include "engine/snapshot/snapshot_format.h"

namespace streamd {
namespace {

// The counters of an offloaded session: what its snapshot holds, counted as the engine counts a
// resident one (SessionCache::tokens_cached), with no blocks held.
SessionInfo StoredInfo(const SnapshotSummary& s) {
  SessionInfo info;
  info.id = s.id;
  const int64_t sinks = std::min<int64_t>(s.tokens_seen, s.sinks);
  const int64_t cached = sinks + std::min<int64_t>(s.tokens_seen - sinks, s.window);
  info.tokens_seen = s.tokens_seen + s.pending_tokens;
  info.tokens_cached = cached;
  info.tokens_evicted = s.tokens_seen - cached;
  info.pending_tokens = s.pending_tokens;
  info.blocks_held = 0;
  info.tenant = s.tenant;
  return info;
}

}  // namespace

StatusOr<SessionView> DescribeSession(const SessionRegistry& registry, const Engine& engine,
                                      SessionId id) {
  std::shared_ptr<SessionRecord> s = registry.Find(id);
  if (s == nullptr) return SessionNotFound(id, registry.options());
  Residency residency;
  SnapshotSummary stored;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    residency = s->residency;
    stored = s->stored;
  }
  SessionView view;
  view.id = id;
  view.spec = s->spec;
  view.sampling = s->options.sampling;
  view.max_blocks = s->max_blocks;
  // Resident, or on its way out (its engine copy is whole until the offload frees it): the
  // engine's counters. On disk or on its way in: its snapshot's.
  StatusOr<SessionInfo> info = NotFoundError("");
  if (residency == Residency::kResident || residency == Residency::kOffloading) {
    info = engine.Get(id);
    if (!info.ok() && residency == Residency::kResident) return info.status();
  }
  if (info.ok()) {
    view.cache = *info;
    view.generating = info->generating;
  } else {
    if (residency == Residency::kOffloading) {  // freed meanwhile: its snapshot is complete
      if (auto summary = registry.persister()->Summary(id); summary.ok()) stored = *summary;
    }
    view.cache = StoredInfo(stored);
    view.offloaded = true;
  }
  std::lock_guard<std::mutex> lock(s->mu);
  view.attached = s->attached;
  view.idle_s =
      s->attached ? 0.0 : std::chrono::duration<double>(Clock::now() - s->detached_at).count();
  return view;
}

std::optional<std::string> TenantOf(const SessionRegistry& registry, SessionId id) {
  if (std::shared_ptr<SessionRecord> s = registry.Find(id)) return s->options.tenant;
  if (SessionPersister* p = registry.persister(); p != nullptr) {
    if (auto summary = p->Summary(id); summary.ok() && summary->id == id) return summary->tenant;
  }
  return std::nullopt;
}

StatusOr<std::vector<uint8_t>> ExportSessionSnapshot(
    const SessionRegistry& registry, Engine& engine, const SnapshotContext* snapshots, SessionId id,
    const std::function<bool(const std::string& tenant)>& can_see) {
  const std::optional<std::string> tenant = TenantOf(registry, id);
  if (!tenant || !can_see(*tenant)) return SessionNotFound(id, registry.options());
  std::shared_ptr<SessionRecord> s = registry.Find(id);
  if (SessionPersister* persister = registry.persister(); persister != nullptr) {
    if (s == nullptr && !persister->Summary(id).ok()) {
      return SessionNotFound(id, registry.options());
    }
    return persister->Export(id);
  }
  if (s == nullptr) return SessionNotFound(id, registry.options());
  if (snapshots == nullptr) return UnimplementedError("export: this daemon cannot make snapshots");
  STREAMD_ASSIGN_OR_RETURN(const SessionState state, engine.Capture(id));
  return EncodeSnapshot(state, *snapshots);
}

StatusOr<ImportedSession> ImportSessionSnapshot(SessionRegistry& registry, Engine& engine,
                                                const SnapshotContext* snapshots,
                                                std::span<const uint8_t> bytes) {
  if (bytes.empty()) return InvalidArgumentError("import: no snapshot bytes were sent");
  if (SessionPersister* persister = registry.persister(); persister != nullptr) {
    STREAMD_ASSIGN_OR_RETURN(const SessionPersister::Imported imported, persister->Import(bytes));
    registry.AdoptImported(imported.summary, imported.restored.metadata,
                           imported.restored.last_token, imported.resident);
    return ImportedSession{imported.summary.id, imported.resident};
  }
  if (snapshots == nullptr) return UnimplementedError("import: this daemon cannot read snapshots");
  STREAMD_ASSIGN_OR_RETURN(const SessionState state, DecodeSnapshot(bytes, *snapshots));
  STREAMD_ASSIGN_OR_RETURN(const SnapshotSummary summary, ReadSnapshotSummary(bytes));
  if (registry.Find(state.id) != nullptr) {
    return AlreadyExistsError("import: session " + state.id.ToString() + " already exists here");
  }
  STREAMD_RETURN_IF_ERROR(engine.Restore(state));
  const int32_t last = !state.pending.empty()         ? state.pending.back()
                       : !state.cached_tokens.empty() ? state.cached_tokens.back()
                                                      : -1;
  registry.AdoptImported(summary, state.metadata, last, /*resident=*/true);
  return ImportedSession{state.id, true};
}

}  // namespace streamd
