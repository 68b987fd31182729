#include "engine/sessions/session_service.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling/stop_string_matcher.h"
#include "engine/sessions/session_transfer.h"

namespace streamd {
namespace {

// The registry tells the holder of a session when it is closed elsewhere (CloseSession).
class Owner : public SessionOwner {
 public:
  explicit Owner(api::OnClosedElsewhere closed) : on_closed_(std::move(closed)) {}
  void OnSessionClosed(SessionId, const Status& why) override {
    closed_.store(true);
    if (on_closed_) on_closed_(why);
  }
  bool closed() const { return closed_.load(); }

 private:
  const api::OnClosedElsewhere on_closed_;
  std::atomic<bool> closed_{false};
};

// The metadata strings written or read through the service, each with the session's revision
// when it was known to be current, so that reading one back does not capture the session (a
// copy of its whole cache). An entry is used only while the session's revision is unchanged:
// a session that changed elsewhere (another replica sharing the snapshot directory, a driver
// that did not go through Metadata) is read again from its state (Engine::Capture). Bounded:
// beyond kMaxEntries an arbitrary session's entry goes (a later read captures again).
class MetadataCache {
 public:
  static constexpr size_t kMaxEntries = 1 << 16;

  std::optional<std::string> Get(SessionId id, uint64_t revision, const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.revision != revision) return std::nullopt;
    auto v = it->second.values.find(key);
    if (v == it->second.values.end()) return std::nullopt;
    return v->second;
  }
  void Put(SessionId id, uint64_t revision, const std::string& key, std::string value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.size() >= kMaxEntries && !entries_.count(id)) entries_.erase(entries_.begin());
    Entry& e = entries_[id];
    if (e.revision != revision) e.values.clear();
    e.revision = revision;
    e.values[key] = std::move(value);
  }
  // The session changed through its own driver here: the values stay current.
  void Advance(SessionId id, uint64_t revision) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = entries_.find(id); it != entries_.end()) it->second.revision = revision;
  }
  void Erase(SessionId id) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.erase(id);
  }

 private:
  struct Entry {
    uint64_t revision = 0;
    std::map<std::string, std::string> values;
  };
  std::mutex mu_;
  std::map<SessionId, Entry> entries_;
};

ChatRoleKind RoleOf(api::Role role) {
  switch (role) {
    case api::Role::kSystem:
      return ChatRoleKind::kSystem;
    case api::Role::kUser:
      return ChatRoleKind::kUser;
    case api::Role::kAssistant:
      break;
  }
  return ChatRoleKind::kAssistant;
}

SessionInput InputOf(api::AppendInput in) {
  SessionInput out;
  out.partial = in.partial;
  switch (in.kind) {
    case api::AppendInput::Kind::kTokens:
      out.kind = SessionInput::Kind::kTokens;
      out.tokens = std::move(in.tokens);
      break;
    case api::AppendInput::Kind::kText:
      out.kind = SessionInput::Kind::kRaw;
      out.text = std::move(in.text);
      out.parse_special = in.parse_special;
      break;
    case api::AppendInput::Kind::kTurn:
      out.kind = SessionInput::Kind::kTurn;
      out.role = RoleOf(in.role);
      out.text = std::move(in.text);
      break;
  }
  return out;
}

api::SessionSettings SettingsOf(const CacheSpec& spec, const SamplingParams& sampling,
                                int32_t max_blocks) {
  api::SessionSettings s;
  s.mode = ToApiCacheMode(spec.mode);
  s.sinks = spec.sinks;
  s.window = spec.window;
  s.sampling = ToApiSampling(sampling);
  s.max_blocks = max_blocks;
  return s;
}

class Service;

class ServiceSession final : public api::Session {
 public:
  ServiceSession(Service& service, api::Caller caller, std::shared_ptr<SessionRecord> s,
                 std::shared_ptr<Owner> owner);
  ~ServiceSession() override {
    if (!released_) Detach(CancelledError("its caller let go of it"));
  }

  const std::string& id() const override { return id_; }
  api::SessionSettings settings() const override {
    return SettingsOf(s_->spec, s_->options.sampling, s_->max_blocks);
  }
  api::EngineLimits limits() const override;
  StatusOr<api::CacheState> State() const override;
  bool closed_elsewhere() const override { return owner_->closed(); }
  bool Append(api::AppendInput input, AppendDone done) override;
  Status Generate(api::GenerateRequest request, api::GenerationObserver observer) override;
  Status Cancel(const std::string& request_id) override;
  void CancelFromObserver(Status why) override;
  void Truncate(std::string request_id, int64_t keep_tokens,
                std::function<void(StatusOr<api::CacheState>)> done) override;
  void Fork(std::function<void(StatusOr<Forked>)> done) override;
  bool WhenIdle(std::function<void()> then) override;
  void StopGeneration(const Status& why) override;
  void Detach(const Status& why, std::function<void()> written = {}) override;
  Status Close(const Status& why) override;
  std::string Metadata(const std::string& key) override;
  Status SetMetadata(const std::string& key, const std::string& value) override;

 private:
  Status Live() const;
  Status CheckTokens(const std::string& what) const;

  Service& service_;
  const api::Caller caller_;
  const std::shared_ptr<SessionRecord> s_;
  const std::shared_ptr<Owner> owner_;
  const std::string id_;
  std::atomic<bool> released_{false};
};

class Service final : public api::Engine {
 public:
  explicit Service(SessionServiceParts parts)
      : p_(std::move(parts)),
        defaults_(FromApiDefaults(p_.session_defaults)),
        model_(ModelInfoOf(p_.engine, p_.chat)) {}

  std::shared_ptr<void> Open(const api::Caller& caller, const api::OpenOptions& open,
                             api::SessionDone done, api::OnClosedElsewhere closed) override {
    // A broken backend is the engine's Open's to report (UNAVAILABLE naming the fault).
    if (p_.draining) {
      done(UnavailableError("open: streamd is shutting down and accepts no new sessions"));
      return nullptr;
    }
    auto options = ResolveOpenOptions(open, defaults_, p_.engine.config(), model_.context_length,
                                      model_.vocab_size);
    if (options.ok()) {
      options->tenant = caller.tenant;  // it owns the session, and its snapshot says so
      if (caller.metered) {
        Status quota = CheckOpenQuota(p_.registry, p_.engine.config(), model_.context_length,
                                      *options, SessionQuotasOf(caller.limits));
        if (!quota.ok()) options = Refused(quota);
      }
    }
    if (!options.ok()) {
      done(options.status());
      return nullptr;
    }
    // The caller holds the owner until it has its answer: the admission queue drops the Open of
    // a caller that let go (its weak pointer expires) without opening anything.
    auto owner = std::make_shared<Owner>(std::move(closed));
    p_.admission.Submit(
        *std::move(options), owner, caller.client,
        [this, caller, weak = std::weak_ptr<Owner>(owner),
         done = std::move(done)](StatusOr<std::shared_ptr<SessionRecord>> s) {
          if (!s.ok()) return done(s.status());
          std::shared_ptr<Owner> held = weak.lock();
          if (held == nullptr) {
            // Nobody was told its id: nobody could ever resume it.
            (void)p_.registry.Close((*s)->id, CancelledError("its caller let go"));
            return done(CancelledError("open: the caller let go while it was opened"));
          }
          done(Wrap(caller, std::move(s).value(), std::move(held)));
        });
    return owner;
  }

  void Resume(const api::Caller& caller, const std::string& id_text, api::SessionDone done,
              api::OnClosedElsewhere closed) override {
    if (p_.draining) return done(UnavailableError("streamd is shutting down"));
    auto id = SessionId::Parse(id_text, "session_id");
    if (!id.ok()) return done(id.status());
    auto owner = std::make_shared<Owner>(std::move(closed));
    // A resident session is attached at once; an offloaded one is read back first.
    p_.registry.Attach(
        *id, owner,
        [this, caller, owner, done = std::move(done)](StatusOr<std::shared_ptr<SessionRecord>> s) {
          if (!s.ok()) return done(s.status());
          done(Wrap(caller, std::move(s).value(), owner));
        },
        caller.admin ? std::nullopt : std::optional<std::string>(caller.tenant));
  }

  std::vector<api::SessionInfo> ListSessions(const api::Caller& caller) const override {
    std::vector<api::SessionInfo> out;
    for (const std::shared_ptr<SessionRecord>& s : p_.registry.All()) {
      if (!caller.admin && s->options.tenant != caller.tenant) continue;
      if (auto info = Describe(s->id); info.ok()) out.push_back(std::move(info).value());
    }
    return out;
  }

  StatusOr<api::SessionInfo> GetSession(const api::Caller& caller,
                                        const std::string& id_text) const override {
    STREAMD_ASSIGN_OR_RETURN(SessionId id, SessionId::Parse(id_text, "session_id"));
    STREAMD_RETURN_IF_ERROR(Visible(caller, id));
    return Describe(id);
  }

  Status CloseSession(const api::Caller& caller, const std::string& id_text,
                      const Status& why) override {
    STREAMD_ASSIGN_OR_RETURN(SessionId id, SessionId::Parse(id_text, "session_id"));
    STREAMD_RETURN_IF_ERROR(Visible(caller, id));
    return p_.registry.Close(id, why);
  }

  StatusOr<std::vector<uint8_t>> ExportSession(const api::Caller& caller,
                                               const std::string& id_text) override {
    STREAMD_ASSIGN_OR_RETURN(SessionId id, SessionId::Parse(id_text, "session_id"));
    return ExportSessionSnapshot(
        p_.registry, p_.engine, p_.snapshots, id,
        [&caller](const std::string& tenant) { return caller.admin || tenant == caller.tenant; });
  }

  StatusOr<api::ImportedSession> ImportSession(const api::Caller& caller,
                                               const std::vector<uint8_t>& bytes) override {
    if (!caller.admin) {
      return Status(StatusCode::kPermissionDenied,
                    "import: only an admin may import a session (it creates a session of "
                    "whatever tenant its snapshot names)");
    }
    STREAMD_ASSIGN_OR_RETURN(const ImportedSession imported,
                             ImportSessionSnapshot(p_.registry, p_.engine, p_.snapshots, bytes));
    return api::ImportedSession{imported.id.ToString(), imported.resident};
  }

  Status Serving() const override {
    if (p_.draining) return UnavailableError("streamd is shutting down");
    return p_.engine.BackendHealth();
  }
  Status BackendHealth() const override { return p_.engine.BackendHealth(); }
  bool Ready() const override {
    return p_.engine.BackendHealth().ok() && p_.admission.waiting() == 0 &&
           p_.engine.CanAdmit(defaults_);
  }
  void Drain() override { p_.draining = true; }
  bool draining() const override { return p_.draining; }
  const api::ModelInfo& model() const override { return model_; }

  api::EngineLimits LimitsFor(int32_t sinks) const override {
    const EngineConfig& e = p_.engine.config();
    api::EngineLimits l;
    l.max_sinks = e.max_sinks;
    l.max_window = std::min(e.max_window, model_.context_length - sinks);
    l.max_stop_strings = static_cast<int32_t>(StopStringMatcher::kMaxStops);
    l.max_stop_bytes = static_cast<int32_t>(StopStringMatcher::kMaxStopBytes);
    l.default_max_tokens = p_.default_max_tokens;
    l.persistent = p_.registry.persister() != nullptr;
    return l;
  }

  // For the sessions it hands out.
  const SessionServiceParts& parts() const { return p_; }
  MetadataCache& metadata() { return *metadata_; }
  Status Refused(const Status& quota) const {
    if (p_.on_quota_refusal) p_.on_quota_refusal(quota);
    return quota;
  }

 private:
  std::unique_ptr<api::Session> Wrap(const api::Caller& caller, std::shared_ptr<SessionRecord> s,
                                     std::shared_ptr<Owner> owner) {
    return std::make_unique<ServiceSession>(*this, caller, std::move(s), std::move(owner));
  }

  // NOT_FOUND, exactly as for a session that does not exist, unless `caller` may see `id`.
  Status Visible(const api::Caller& caller, SessionId id) const {
    const std::optional<std::string> tenant = TenantOf(p_.registry, id);
    if (tenant && (caller.admin || *tenant == caller.tenant)) return OkStatus();
    return SessionNotFound(id, p_.registry.options());
  }

  StatusOr<api::SessionInfo> Describe(SessionId id) const {
    STREAMD_ASSIGN_OR_RETURN(const SessionView view, DescribeSession(p_.registry, p_.engine, id));
    api::SessionInfo info;
    info.id = id.ToString();
    info.tenant = view.cache.tenant;
    info.settings = SettingsOf(view.spec, view.sampling, view.max_blocks);
    info.cache = ToApiCacheState(view.cache);
    info.generating = view.generating;
    info.offloaded = view.offloaded;
    info.attached = view.attached;
    info.idle_s = view.idle_s;
    return info;
  }

  SessionServiceParts p_;
  const SessionOptions defaults_;  // p_.session_defaults as the engine takes them
  const api::ModelInfo model_;
  // Shared with the detaches that run on the task thread after a session was let go.
  std::shared_ptr<MetadataCache> metadata_ = std::make_shared<MetadataCache>();

  friend class ServiceSession;
};

ServiceSession::ServiceSession(Service& service, api::Caller caller,
                               std::shared_ptr<SessionRecord> s, std::shared_ptr<Owner> owner)
    : service_(service),
      caller_(std::move(caller)),
      s_(std::move(s)),
      owner_(std::move(owner)),
      id_(s_->id.ToString()) {}

api::EngineLimits ServiceSession::limits() const { return service_.LimitsFor(s_->spec.sinks); }

StatusOr<api::CacheState> ServiceSession::State() const {
  STREAMD_ASSIGN_OR_RETURN(const SessionInfo info, service_.parts().engine.Get(s_->id));
  return ToApiCacheState(info);
}

Status ServiceSession::Live() const {
  if (owner_->closed()) {
    return Status(StatusCode::kAborted, "session " + id_ + " was closed meanwhile");
  }
  if (released_) return Status(StatusCode::kAborted, "session " + id_ + " was let go");
  return OkStatus();
}

Status ServiceSession::CheckTokens(const std::string& what) const {
  if (!caller_.metered) return OkStatus();
  Status s = service_.parts().budget.Check(caller_.tenant, caller_.limits.tokens_per_second, what);
  return s.ok() ? s : service_.Refused(s);
}

bool ServiceSession::Append(api::AppendInput input, AppendDone done) {
  if (Status live = Live(); !live.ok()) {
    done(live, false);
    return false;
  }
  if (Status quota = CheckTokens("append"); !quota.ok()) {
    done(quota, false);
    return false;
  }
  // Barge-in: an Append while a generation runs cancels it and goes on after its end (the
  // driver), so the context never changes under a generation.
  return service_.parts().driver.Append(
      s_, InputOf(std::move(input)),
      [this_caller = caller_, budget = &service_.parts().budget, done = std::move(done)](
          StatusOr<int64_t> appended, bool later) {
        if (appended.ok() && this_caller.metered) {
          budget->Charge(this_caller.tenant, this_caller.limits.tokens_per_second, *appended);
        }
        done(std::move(appended), later);
      });
}

Status ServiceSession::Generate(api::GenerateRequest r, api::GenerationObserver observer) {
  STREAMD_RETURN_IF_ERROR(Live());
  const SessionServiceParts& p = service_.parts();
  if (p.draining) return UnavailableError("streamd is shutting down");
  if (caller_.metered) {
    Status quota =
        CheckGenerationQuota(p.registry, caller_.tenant, SessionQuotasOf(caller_.limits));
    if (!quota.ok()) return service_.Refused(quota);
    STREAMD_RETURN_IF_ERROR(CheckTokens("generate"));
  }
  GenerateOptions o;
  o.max_tokens = r.max_tokens > 0 ? r.max_tokens : p.default_max_tokens;
  o.stop = std::move(r.stop);
  o.request_id = std::move(r.request_id);
  if (r.sampling.any()) {
    SamplingParams sampling =
        FromApiSampling(api::WithOverrides(ToApiSampling(s_->options.sampling), r.sampling));
    // The transport checked the ranges it knows; top_k against this model's vocabulary here.
    STREAMD_RETURN_IF_ERROR(ValidateSamplingParams(sampling, service_.model().vocab_size));
    o.sampling = sampling;
  }
  GenerationCallbacks callbacks;
  callbacks.on_event = [on_token = std::move(observer.on_token),
                        on_end = std::move(observer.on_end)](GenerationEvent&& e) {
    if (e.kind == GenerationEvent::Kind::kToken) {
      if (on_token) on_token({std::move(e.request_id), e.token, std::move(e.text), e.index});
      return;
    }
    if (!on_end) return;
    api::GenerationEnd end;
    end.request_id = std::move(e.request_id);
    end.reason = ToApiFinishReason(e.reason);
    end.status = std::move(e.status);
    end.tail_text = std::move(e.tail_text);
    end.usage = {e.prompt_tokens, e.output_tokens, e.time_to_first_token_s, e.total_s};
    on_end(std::move(end));
  };
  callbacks.on_ended = [caller = caller_, budget = &p.budget,
                        settled = std::move(observer.on_settled)](int64_t output_tokens) {
    if (caller.metered) {
      budget->Charge(caller.tenant, caller.limits.tokens_per_second, output_tokens);
    }
    if (settled) settled();
  };
  return p.driver.Generate(s_, std::move(o), std::move(callbacks));
}

Status ServiceSession::Cancel(const std::string& request_id) {
  STREAMD_RETURN_IF_ERROR(Live());
  return service_.parts().driver.Cancel(s_, request_id);
}

void ServiceSession::CancelFromObserver(Status why) {
  service_.parts().driver.CancelFromSink(s_, std::move(why));
}

void ServiceSession::Truncate(std::string request_id, int64_t keep_tokens,
                              std::function<void(StatusOr<api::CacheState>)> done) {
  if (Status live = Live(); !live.ok()) return done(live);
  service_.parts().driver.Truncate(s_, std::move(request_id), keep_tokens,
                                   [done = std::move(done)](StatusOr<SessionInfo> info) {
                                     if (!info.ok()) return done(info.status());
                                     done(ToApiCacheState(*info));
                                   });
}

void ServiceSession::Fork(std::function<void(StatusOr<Forked>)> done) {
  if (Status live = Live(); !live.ok()) return done(live);
  const SessionServiceParts& p = service_.parts();
  if (p.draining) return done(UnavailableError("streamd is shutting down"));
  Service* service = &service_;
  // A fork is one more session of the tenant: the driver asks its quota on its one task
  // thread, so that forks of several callers of one tenant are checked one at a time.
  p.driver.Fork(
      s_,
      [service, caller = caller_, s = s_] {
        if (!caller.metered) return OkStatus();
        const SessionServiceParts& parts = service->parts();
        Status quota =
            CheckOpenQuota(parts.registry, parts.engine.config(), service->model().context_length,
                           s->options, SessionQuotasOf(caller.limits), "fork");
        return quota.ok() ? quota : service->Refused(quota);
      },
      [service, done = std::move(done)](StatusOr<std::shared_ptr<SessionRecord>> fork) {
        if (!fork.ok()) return done(fork.status());
        Forked forked;
        forked.id = (*fork)->id.ToString();
        if (auto info = service->parts().engine.Get((*fork)->id); info.ok()) {
          forked.cache = ToApiCacheState(*info);
        }
        done(std::move(forked));
      });
}

bool ServiceSession::WhenIdle(std::function<void()> then) {
  return service_.parts().driver.WhenIdle(s_, std::move(then));
}

void ServiceSession::StopGeneration(const Status& why) {
  service_.parts().driver.StopGeneration(*s_, why);
}

void ServiceSession::Detach(const Status& why, std::function<void()> written) {
  if (released_.exchange(true) || owner_->closed()) {
    // Closed here or elsewhere (CloseSession): gone from the registry, nothing to write.
    if (written) written();
    return;
  }
  Engine& engine = service_.parts().engine;
  SessionRegistry& registry = service_.parts().registry;
  // A session is detached once its generation is over; nothing here waits for that.
  const std::function<void()> detach = [&engine, &registry, s = s_, cache = service_.metadata_,
                                        written = std::move(written)] {
    // Every change since the metadata was last written was this driver's own.
    if (auto info = engine.Get(s->id); info.ok()) cache->Advance(s->id, info->revision);
    registry.Detach(s, written);
  };
  if (!service_.parts().driver.CancelThen(s_, why, detach)) detach();
}

Status ServiceSession::Close(const Status& why) {
  released_ = true;
  service_.metadata().Erase(s_->id);
  // A running generation's end is delivered before the session goes.
  return service_.parts().registry.Close(s_->id, why, owner_.get());
}

std::string ServiceSession::Metadata(const std::string& key) {
  Engine& engine = service_.parts().engine;
  if (auto info = engine.Get(s_->id); info.ok()) {
    if (auto cached = service_.metadata().Get(s_->id, info->revision, key)) return *cached;
  }
  // Changed elsewhere, or restored from a snapshot: read it from the session's state.
  auto state = engine.Capture(s_->id);
  if (!state.ok()) return {};
  std::string value;
  if (auto it = state->metadata.find(key); it != state->metadata.end()) value = it->second;
  service_.metadata().Put(s_->id, state->revision, key, value);
  return value;
}

Status ServiceSession::SetMetadata(const std::string& key, const std::string& value) {
  STREAMD_RETURN_IF_ERROR(Live());
  Engine& engine = service_.parts().engine;
  STREAMD_RETURN_IF_ERROR(engine.SetMetadata(s_->id, key, value));
  if (auto info = engine.Get(s_->id); info.ok()) {
    service_.metadata().Put(s_->id, info->revision, key, value);
  }
  service_.parts().registry.Touched(*s_);
  return OkStatus();
}

}  // namespace

std::unique_ptr<api::Engine> MakeSessionService(SessionServiceParts parts) {
  return std::make_unique<Service>(std::move(parts));
}

}  // namespace streamd
