// The one place where the HTTP front door meets the daemon's session internals: HttpSessions
// (http_sessions.h) over the Authenticator, SessionRegistry, SessionDriver, AdmissionQueue and
// Engine of a ServiceContext, driving a session the way a gRPC SessionStream does
// (session_stream.cc): the same driver, quotas and snapshot bookkeeping. It is the one file
// that knows where sessions live (engine/sessions since issue 29).
//
// Unlike a gRPC reaction, an HTTP worker thread may wait: Open and Resume block on the
// admission queue's and the registry's answers. The session's conversation (chat turns, the
// running generation, its bookkeeping and the state saved in the snapshot) is the engine's
// SessionDriver's, as for a gRPC stream; this file adds the caller's quotas, the HTTP layer's
// metadata string, and the translation of the driver's events into http_sessions.h's callbacks.
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <utility>

#include "engine/api/streamd_engine.h"
#include "engine/sessions/session_quotas.h"
#include "server/http/http_sessions.h"
#include "server/metrics_wiring.h"
#include "server/service_context.h"

namespace streamd::http {
namespace {

using server::ServiceContext;

// The key of the HTTP layer's metadata in the session's snapshot.
constexpr char kMetadataKey[] = "http.conversation";
// Beyond sessions.admission_timeout and resume_wait, the answer is late only if something is
// wrong; the request then fails instead of hanging.
constexpr std::chrono::seconds kAnswerSlack{30};

// The registry tells the driver of a session when it is closed elsewhere (CloseSession).
class Owner : public SessionOwner {
 public:
  void OnSessionClosed(SessionId, const Status&) override { closed_.store(true); }
  bool closed() const { return closed_.load(); }

 private:
  std::atomic<bool> closed_{false};
};

// The metadata strings written or read through this adapter, each with the session's revision
// when it was known to be current, so that reading one back does not capture the session (a
// copy of its whole cache). An entry is used only while the session's revision is unchanged:
// a session that changed elsewhere (a gRPC client, another replica sharing the snapshot
// directory) is read again from its state (Engine::Capture). Bounded: beyond kMaxEntries an
// arbitrary entry goes (a later read captures again).
class MetadataCache {
 public:
  static constexpr size_t kMaxEntries = 1 << 16;

  std::optional<std::string> Get(SessionId id, uint64_t revision) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(id);
    if (it == values_.end() || it->second.revision != revision) return std::nullopt;
    return it->second.value;
  }
  void Put(SessionId id, uint64_t revision, std::string value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (values_.size() >= kMaxEntries && !values_.count(id)) values_.erase(values_.begin());
    values_[id] = {revision, std::move(value)};
  }
  // The session changed through this adapter (its driver): the value stays current.
  void Advance(SessionId id, uint64_t revision) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = values_.find(id); it != values_.end()) it->second.revision = revision;
  }
  void Erase(SessionId id) {
    std::lock_guard<std::mutex> lock(mu_);
    values_.erase(id);
  }

 private:
  struct Entry {
    uint64_t revision = 0;
    std::string value;
  };
  std::mutex mu_;
  std::map<SessionId, Entry> values_;
};

DoneReason DoneReasonOf(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
    case FinishReason::kEndOfGeneration:
      return DoneReason::kStop;
    case FinishReason::kLength:
      return DoneReason::kLength;
    case FinishReason::kCancelled:
      return DoneReason::kCancelled;
    case FinishReason::kError:
      break;
  }
  return DoneReason::kError;
}

ChatRoleKind RoleKindOf(TurnRole role) {
  switch (role) {
    case TurnRole::kSystem:
      return ChatRoleKind::kSystem;
    case TurnRole::kUser:
      return ChatRoleKind::kUser;
    case TurnRole::kAssistant:
      break;
  }
  return ChatRoleKind::kAssistant;
}

class AdapterSession : public Session {
 public:
  AdapterSession(ServiceContext& ctx, HttpCaller caller, std::shared_ptr<SessionRecord> s,
                 std::shared_ptr<Owner> owner, std::shared_ptr<MetadataCache> cache)
      : ctx_(ctx),
        caller_(std::move(caller)),
        s_(std::move(s)),
        owner_(std::move(owner)),
        cache_(std::move(cache)) {}

  // Detaches the session once its generation is over (cancelled first, if one still runs), as a
  // gRPC stream that ends does; nothing here waits for that.
  ~AdapterSession() override {
    // Closed here, or elsewhere meanwhile (CloseSession): gone from the registry.
    if (closed_ || owner_->closed()) return;
    Engine& engine = ctx_.engine;
    SessionRegistry& registry = ctx_.registry;
    const std::function<void()> detach = [&engine, &registry, s = s_, cache = cache_] {
      // Every change since the metadata was last written was this driver's own.
      if (auto info = engine.Get(s->id); info.ok()) cache->Advance(s->id, info->revision);
      registry.Detach(s);
    };
    if (!ctx_.driver.CancelThen(s_, CancelledError("the HTTP request ended"), detach)) detach();
  }

  std::string id() const override { return s_->id.ToString(); }

  int64_t ContextTokens() const override {
    auto info = ctx_.engine.Get(s_->id);
    return info.ok() ? info->tokens_seen : 0;
  }

  Status Append(TurnRole role, const std::string& text) override {
    if (ctx_.metrics != nullptr) ctx_.metrics->RecordRequest(metrics::RequestKind::kAppend);
    if (Status live = Live(); !live.ok()) return live;
    if (Status quota = CheckTokenQuota("append"); !quota.ok()) {
      ctx_.auth->LogQuotaRefusal(quota);
      return quota;
    }
    SessionInput input;
    input.kind = SessionInput::Kind::kTurn;
    input.role = RoleKindOf(role);
    input.text = text;
    // No generation runs here (an Answer appends before it generates), so the driver answers at
    // once; the future only carries the answer across a barge-in's wait if one ever happened.
    auto answer = std::make_shared<std::promise<StatusOr<int64_t>>>();
    auto future = answer->get_future();
    ctx_.driver.Append(s_, std::move(input), [answer](StatusOr<int64_t> appended, bool) {
      answer->set_value(std::move(appended));
    });
    StatusOr<int64_t> appended = future.get();
    if (!appended.ok()) return appended.status();
    Charge(*appended);
    return OkStatus();
  }

  Status Generate(const GenerateParams& p, GenerationCallbacks callbacks) override {
    if (Status live = Live(); !live.ok()) return live;
    if (ctx_.draining) return UnavailableError("streamd is shutting down");
    if (ctx_.auth != nullptr && caller_.authenticated) {
      Status quota = CheckGenerationQuota(ctx_.registry, caller_.tenant,
                                          ctx_.auth->SessionQuotasOf(caller_.tenant));
      if (quota.ok()) quota = CheckTokenQuota("generate");
      if (!quota.ok()) {
        ctx_.auth->LogQuotaRefusal(quota);
        return quota;
      }
    }
    GenerateOptions o;
    o.max_tokens = p.max_tokens > 0 ? p.max_tokens : ctx_.options.limits.default_max_tokens;
    o.stop = p.stop;
    o.request_id = p.request_id;
    if (p.temperature || p.top_p || p.presence_penalty || p.frequency_penalty || p.seed) {
      SamplingParams sampling = s_->options.sampling;
      if (p.temperature) sampling.temperature = *p.temperature;
      if (p.top_p) sampling.top_p = *p.top_p;
      if (p.presence_penalty) sampling.presence_penalty = *p.presence_penalty;
      if (p.frequency_penalty) sampling.frequency_penalty = *p.frequency_penalty;
      if (p.seed) sampling.seed = *p.seed;
      // The ranges were checked by the parser; top_k against this model's vocabulary here.
      STREAMD_RETURN_IF_ERROR(ValidateSamplingParams(sampling, ctx_.model.vocab_size));
      o.sampling = sampling;
    }
    if (ctx_.metrics != nullptr) ctx_.metrics->RecordRequest(metrics::RequestKind::kGenerate);
    metrics::StreamdMetrics* m = ctx_.metrics;
    streamd::GenerationCallbacks driver_callbacks;
    // The scheduler thread: text and the end go to the HTTP layer's queue, nothing more.
    driver_callbacks.on_event = [callbacks = std::move(callbacks), m](GenerationEvent&& e) {
      if (e.kind == GenerationEvent::Kind::kToken) {
        if (callbacks.on_text && !e.text.empty()) callbacks.on_text(e.text);
        return;
      }
      if (m != nullptr) {
        m->RecordGeneration({server::FinishedOf(e.reason), e.prompt_tokens, e.output_tokens,
                             e.time_to_first_token_s, e.total_s});
      }
      GenerationEnd end;
      end.reason = DoneReasonOf(e.reason);
      end.status = e.status;  // an error, or why the server cancelled it
      end.tail_text = std::move(e.tail_text);
      end.output_tokens = e.output_tokens;
      if (callbacks.on_done) callbacks.on_done(end);
    };
    // The task thread, once the session's state is saved: the tokens are charged.
    driver_callbacks.on_ended = [auth = ctx_.auth, budget = ctx_.budget,
                                 caller = caller_](int64_t output_tokens) {
      if (auth == nullptr || budget == nullptr || !caller.authenticated) return;
      budget->Charge(caller.tenant, auth->QuotasOf(caller.tenant).tokens_per_second, output_tokens);
    };
    return ctx_.driver.Generate(s_, std::move(o), std::move(driver_callbacks));
  }

  void Cancel() override { (void)ctx_.driver.Cancel(s_, ""); }

  Status Close() override {
    closed_ = true;
    cache_->Erase(s_->id);
    // A running generation's end is delivered before the session goes.
    return ctx_.registry.Close(s_->id, CancelledError("closed over HTTP"), owner_.get());
  }

  std::string Metadata() override {
    if (auto info = ctx_.engine.Get(s_->id); info.ok()) {
      if (auto cached = cache_->Get(s_->id, info->revision)) return *cached;
    }
    // Changed elsewhere, or restored from a snapshot: read it from the session's state.
    auto state = ctx_.engine.Capture(s_->id);
    if (!state.ok()) return {};
    std::string value;
    if (auto it = state->metadata.find(kMetadataKey); it != state->metadata.end()) {
      value = it->second;
    }
    cache_->Put(s_->id, state->revision, value);
    return value;
  }

  Status SetMetadata(const std::string& value) override {
    STREAMD_RETURN_IF_ERROR(ctx_.engine.SetMetadata(s_->id, kMetadataKey, value));
    if (auto info = ctx_.engine.Get(s_->id); info.ok()) cache_->Put(s_->id, info->revision, value);
    ctx_.registry.Touched(*s_);
    return OkStatus();
  }

 private:
  Status Live() const {
    if (owner_->closed()) {
      return Status(StatusCode::kAborted, "session " + s_->id.ToString() + " was closed meanwhile");
    }
    return OkStatus();
  }

  Status CheckTokenQuota(const std::string& what) const {
    if (ctx_.auth == nullptr || ctx_.budget == nullptr || !caller_.authenticated) {
      return OkStatus();
    }
    return ctx_.budget->Check(caller_.tenant, ctx_.auth->QuotasOf(caller_.tenant).tokens_per_second,
                              what);
  }

  void Charge(int64_t tokens) const {
    if (ctx_.auth == nullptr || ctx_.budget == nullptr || !caller_.authenticated) return;
    ctx_.budget->Charge(caller_.tenant, ctx_.auth->QuotasOf(caller_.tenant).tokens_per_second,
                        tokens);
  }

  ServiceContext& ctx_;
  const HttpCaller caller_;
  const std::shared_ptr<SessionRecord> s_;
  const std::shared_ptr<Owner> owner_;
  const std::shared_ptr<MetadataCache> cache_;
  bool closed_ = false;
};

class ServerSessions : public HttpSessions {
 public:
  explicit ServerSessions(ServiceContext& ctx) : ctx_(ctx) {}

  StatusOr<HttpCaller> Authenticate(const std::string* authorization) const override {
    HttpCaller caller;
    if (ctx_.auth == nullptr) return caller;
    STREAMD_ASSIGN_OR_RETURN(server::Caller c, ctx_.auth->AuthenticateHeader(authorization));
    caller.tenant = c.tenant;
    caller.admin = c.admin;
    caller.authenticated = c.authenticated;
    return caller;
  }

  StatusOr<std::unique_ptr<Session>> Open(const HttpCaller& caller) override {
    if (ctx_.metrics != nullptr) ctx_.metrics->RecordRequest(metrics::RequestKind::kOpen);
    STREAMD_RETURN_IF_ERROR(Serving());
    SessionOptions options = ctx_.options.session_defaults;
    options.tenant = caller.tenant;  // it owns the session, and its snapshot says so
    if (ctx_.auth != nullptr && caller.authenticated) {
      Status quota = CheckOpenQuota(ctx_.registry, ctx_.engine.config(), ctx_.model.context_length,
                                    options, ctx_.auth->SessionQuotasOf(options.tenant));
      if (!quota.ok()) {
        ctx_.auth->LogQuotaRefusal(quota);
        return quota;
      }
    }
    auto owner = std::make_shared<Owner>();
    auto answer = std::make_shared<std::promise<StatusOr<std::shared_ptr<SessionRecord>>>>();
    auto future = answer->get_future();
    ctx_.admission.Submit(
        options, owner, caller.client,
        [answer](StatusOr<std::shared_ptr<SessionRecord>> s) { answer->set_value(std::move(s)); });
    if (future.wait_for(options.admission_timeout + kAnswerSlack) != std::future_status::ready) {
      return UnavailableError("no answer from the admission queue");
    }
    StatusOr<std::shared_ptr<SessionRecord>> s = future.get();
    if (ctx_.metrics != nullptr) {
      (s.ok() ? ctx_.metrics->sessions_opened : ctx_.metrics->sessions_rejected).Increment();
    }
    if (!s.ok()) return s.status();
    return std::unique_ptr<Session>(
        new AdapterSession(ctx_, caller, std::move(s).value(), std::move(owner), cache_));
  }

  StatusOr<std::unique_ptr<Session>> Resume(const HttpCaller& caller,
                                            const std::string& id_text) override {
    if (ctx_.metrics != nullptr) ctx_.metrics->RecordRequest(metrics::RequestKind::kResume);
    STREAMD_RETURN_IF_ERROR(Serving());
    STREAMD_ASSIGN_OR_RETURN(SessionId id, SessionId::Parse(id_text, "session"));
    auto owner = std::make_shared<Owner>();
    auto answer = std::make_shared<std::promise<StatusOr<std::shared_ptr<SessionRecord>>>>();
    auto future = answer->get_future();
    // A resident session is attached at once; an offloaded one is read back first.
    ctx_.registry.Attach(
        id, owner,
        [answer](StatusOr<std::shared_ptr<SessionRecord>> s) { answer->set_value(std::move(s)); },
        caller.admin ? std::nullopt : std::optional<std::string>(caller.tenant));
    if (future.wait_for(ctx_.options.persistence.resume_wait + kAnswerSlack) !=
        std::future_status::ready) {
      return UnavailableError("session " + id.ToString() + " could not be read back in time");
    }
    StatusOr<std::shared_ptr<SessionRecord>> s = future.get();
    if (!s.ok()) return s.status();
    return std::unique_ptr<Session>(
        new AdapterSession(ctx_, caller, std::move(s).value(), std::move(owner), cache_));
  }

  Status Serving() const override {
    if (ctx_.draining) return UnavailableError("streamd is shutting down");
    return ctx_.engine.BackendHealth();
  }

  std::string ModelName() const override { return ctx_.model_info.name(); }

 private:
  ServiceContext& ctx_;
  // Shared with the detaches that run on the task thread after a request's end.
  std::shared_ptr<MetadataCache> cache_ = std::make_shared<MetadataCache>();
};

}  // namespace

std::unique_ptr<HttpSessions> MakeServerSessions(server::ServiceContext& ctx) {
  return std::make_unique<ServerSessions>(ctx);
}

}  // namespace streamd::http
