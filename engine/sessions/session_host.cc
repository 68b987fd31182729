#include "engine/sessions/session_host.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "engine/sessions/session_quotas.h"
#include "engine/sessions/session_service.h"
#include "engine/sessions/session_storage.h"

namespace streamd {
namespace {

using Level = api::HostNote::Level;

std::string IdText(SessionId id) { return id.valid() ? id.ToString() : std::string(); }

PersisterHooks PersisterHooksOf(const api::HostHooks& h) {
  PersisterHooks p;
  if (h.on_written) {
    p.on_written = [f = h.on_written](SessionId id, int64_t b, double s) { f(IdText(id), b, s); };
  }
  if (h.on_write_failed) {
    p.on_write_failed = [f = h.on_write_failed](SessionId id, const Status& why) {
      f(IdText(id), why);
    };
  }
  if (h.on_loaded) {
    p.on_loaded = [f = h.on_loaded](SessionId id, int64_t b, double s) { f(IdText(id), b, s); };
  }
  p.on_rejected = h.on_rejected;
  return p;
}

// What the start found in the flat layout of snapshot_dir (before per-model directories).
std::vector<api::HostNote> MigrationNotes(const std::string& root, const SnapshotContext& model,
                                          const ModelDirMigration& m) {
  const std::string at = "sessions.snapshot_dir " + root + ": ";
  std::vector<api::HostNote> notes;
  notes.push_back({Level::kInfo, at + "the snapshots of model \"" + model.model_name +
                                     "\" (fingerprint " + model.model_fingerprint + ") are in " +
                                     m.dir});
  if (m.moved > 0 || m.superseded > 0) {
    notes.push_back({Level::kInfo, at + "moved " + std::to_string(m.moved) +
                                       " snapshots of this model from the flat layout into " +
                                       m.dir +
                                       (m.superseded > 0 ? ", and " + std::to_string(m.superseded) +
                                                               " older copies into its rejected/"
                                                         : std::string())});
  }
  if (m.other_models > 0) {
    notes.push_back({Level::kInfo, at + std::to_string(m.other_models) +
                                       " snapshots of other models in the flat layout left "
                                       "untouched (their daemons move them into their own "
                                       "directories)"});
  }
  for (const std::string& f : m.unreadable) {
    notes.push_back(
        {Level::kWarning, at + "flat file " + f + " left untouched, its header cannot be read"});
  }
  for (const std::string& f : m.failed) {
    notes.push_back(
        {Level::kError, at + f + " not moved into " + m.dir + "; it stays where it is"});
  }
  return notes;
}

class SessionHost final : public api::EngineHost {
 public:
  SessionHost(SessionHostParts parts, const api::HostOptions& o, const api::HostHooks& hooks,
              std::unique_ptr<SessionPersister> persister)
      : owner_(std::move(parts.owner)),
        engine_(parts.engine),
        options_(o),
        persister_(std::move(persister)),
        registry_(engine_,
                  RegistryOptions{
                      o.idle_timeout, o.offload_after, o.resume_wait, o.max_detached_share, {}},
                  persister_.get()),
        chat_(parts.chat, engine_.tokenizer()),
        driver_(engine_, registry_, chat_, tasks_),
        admission_(registry_, o.max_waiting_opens) {
    if (parts.snapshots != nullptr) snapshots_ = *parts.snapshots;
    SessionServiceParts sp{engine_, registry_, driver_, admission_, chat_, budget_, draining_};
    if (snapshots_) sp.snapshots = &*snapshots_;
    sp.session_defaults = o.session_defaults;
    sp.default_max_tokens = o.default_max_tokens;
    sp.on_quota_refusal = [this](const Status& q) { OnRefusal(q); };
    api_ = MakeSessionService(std::move(sp));
    registry_.set_hooks(RegistryHooksOf(hooks));
    const auto& model = engine_.model();
    info_.model_name = model.config().name;
    info_.backend_name = std::string(model.backend_name());
    info_.device = model.device_description();
    if (snapshots_) info_.model_fingerprint = snapshots_->model_fingerprint;
    info_.notes = std::move(parts.notes);
  }

  api::Engine& sessions() override { return *api_; }
  const api::HostInfo& info() const override { return info_; }

  void SetTenantLimits(std::function<api::TenantLimits(const std::string&)> limits,
                       std::function<void(const Status&)> on_refusal) override {
    on_refusal_ = std::move(on_refusal);
    if (!limits) return;
    const int32_t context_length = api_->model().context_length;
    admission_.set_check(
        [this, limits = std::move(limits), context_length](const SessionOptions& s) {
          Status q = CheckOpenQuota(registry_, engine_.config(), context_length, s,
                                    SessionQuotasOf(limits(s.tenant)));
          if (!q.ok()) OnRefusal(q);
          return q;
        });
  }

  std::vector<api::HostNote> Start() override {
    std::vector<api::HostNote> notes;
    if (persister_ != nullptr) {
      // Before sessions are served, so that listings show them; Resume finds a snapshot by its
      // id anyway, loaded or not.
      const bool load = options_.restore_on_start;
      const int32_t found = registry_.RestoreFromStore(load);
      notes.push_back(
          {Level::kInfo, "sessions.snapshot_dir " + persister_->store().dir() + ": " +
                             std::to_string(found) + " session snapshots found" +
                             (found > 0 && load ? ", restoring them in the background" : "")});
    }
    registry_.StartReaper();
    return notes;
  }

  bool PersistAll(std::chrono::steady_clock::time_point deadline) override {
    return persister_ == nullptr || registry_.PersistAll(deadline);
  }

  api::HostStats Stats() const override {
    const EngineStats st = engine_.Stats();
    api::HostStats out;
    out.sessions = st.sessions;
    out.generating = st.generating;
    out.waiting_opens = admission_.waiting();
    out.blocks_total = st.blocks_total;
    out.blocks_used = st.blocks_used;
    out.blocks_reserved = st.blocks_reserved + st.blocks_headroom;
    out.block_bytes = st.bytes_per_token * engine_.config().block_size;
    const int64_t local_block_bytes = st.local_bytes_per_token * engine_.config().block_size;
    out.local_used_bytes = st.local_blocks_used * local_block_bytes;
    out.local_capacity_bytes = st.local_blocks_total * local_block_bytes;
    out.tokens_appended = st.tokens_appended;
    out.tokens_out = st.tokens_out;
    out.tokens_evicted = st.tokens_evicted;
    for (const auto& session : registry_.All()) {
      std::lock_guard<std::mutex> lock(session->mu);
      out.attached += session->attached;
      switch (session->residency) {
        case Residency::kOffloaded:
          ++out.offloaded;
          break;
        case Residency::kOffloading:
          ++out.offloading;
          break;
        case Residency::kLoading:
          ++out.loading;
          break;
        case Residency::kResident:
          break;
      }
    }
    return out;
  }

  api::TenantUsage UsageOf(const std::string& tenant) const override {
    const SessionRegistry::Usage u = registry_.UsageOf(tenant);
    return {u.sessions, u.generating, static_cast<int64_t>(u.blocks)};
  }

 private:
  void OnRefusal(const Status& q) const {
    if (on_refusal_) on_refusal_(q);
  }

  // A closed or offloaded session freed blocks: the oldest waiting Open may fit now.
  RegistryHooks RegistryHooksOf(const api::HostHooks& h) {
    RegistryHooks r;
    r.on_close = [this, f = h.on_close] {
      if (f) f();
      admission_.Notify();
    };
    r.on_offload = [this, f = h.on_offload] {
      if (f) f();
      admission_.Notify();
    };
    if (h.on_transition) {
      r.on_transition = [f = h.on_transition](SessionId id, std::string_view transition,
                                              std::string_view outcome, double seconds) {
        f(IdText(id), transition, outcome, seconds);
      };
    }
    if (h.on_resume_waited) {
      r.on_resume_waited = [f = h.on_resume_waited](SessionId id, std::string_view outcome,
                                                    double seconds) {
        f(IdText(id), outcome, seconds);
      };
    }
    return r;
  }

  std::shared_ptr<void> owner_;  // first: destroyed last
  Engine& engine_;
  const api::HostOptions options_;
  std::optional<SnapshotContext> snapshots_;
  api::HostInfo info_;
  std::function<void(const Status&)> on_refusal_;  // set before Start
  std::unique_ptr<SessionPersister> persister_;    // null: memory only; outlives the registry
  SessionRegistry registry_;
  ChatFormatter chat_;
  // Before tasks_: the tasks still queued when tasks_ stops call into it.
  SessionDriver driver_;
  TaskRunner tasks_;
  TokenBudget budget_;
  std::atomic<bool> draining_{false};  // the session service's Drain
  // Before api_; it calls into registry_.
  AdmissionQueue admission_;
  std::unique_ptr<api::Engine> api_;  // over the parts above
};

}  // namespace

StatusOr<std::unique_ptr<api::EngineHost>> MakeSessionHost(SessionHostParts parts,
                                                           const api::HostOptions& options,
                                                           api::HostHooks hooks) {
  std::unique_ptr<SessionPersister> persister;
  if (!options.snapshot_dir.empty()) {
    if (parts.snapshots == nullptr) {
      return InvalidArgumentError(
          "sessions.snapshot_dir is set but the engine gave no snapshot context");
    }
    // One directory per model under snapshot_dir: models sharing it never touch each other's
    // sessions (session_storage.h).
    ModelDirMigration migration;
    auto opened = OpenSessionStorage(
        parts.engine, options.snapshot_dir, *parts.snapshots,
        PersisterOptions{options.snapshot_interval, std::chrono::milliseconds(1000)},
        PersisterHooksOf(hooks), &migration);
    if (!opened.ok()) {
      return Status(opened.status().code(), "sessions.snapshot_dir: " + opened.status().message());
    }
    for (api::HostNote& n : MigrationNotes(options.snapshot_dir, *parts.snapshots, migration)) {
      parts.notes.push_back(std::move(n));
    }
    persister = std::move(opened).value();
  }
  return std::unique_ptr<api::EngineHost>(
      new SessionHost(std::move(parts), options, hooks, std::move(persister)));
}

EngineConfig ToEngineConfig(const api::EngineSettings& s, const api::HostHooks& hooks) {
  EngineConfig out;
  out.block_size = s.block_size;
  out.pool_bytes = s.pool_bytes;
  out.pool_fraction = s.pool_fraction;
  out.planner.max_batch_tokens = s.max_batch_tokens;
  out.planner.max_batch_sessions = s.max_batch_sessions;
  out.planner.shared_step_tokens = s.shared_step_tokens;
  out.threads = s.threads;
  out.max_chunk = s.max_chunk;
  out.max_sessions = s.max_sessions;
  out.max_sinks = s.max_sinks;
  out.max_window = s.max_window;
  out.max_pending_tokens = s.max_pending_tokens;
  out.local_layer_caches = s.local_layer_caches;
  if (hooks.on_step) {
    out.step_observer = [f = hooks.on_step](const StepReport& r) { f(r.seconds, r.tokens); };
  }
  return out;
}

}  // namespace streamd
