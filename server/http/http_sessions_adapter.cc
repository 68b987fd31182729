// The one place where the HTTP front door meets the daemon's session internals: HttpSessions
// (http_sessions.h) over the SessionRegistry, the AdmissionQueue, the Engine and the
// ChatFormatter of a ServiceContext, driving a session the way a gRPC SessionStream does
// (session_stream.cc): the same chat state, generation flags, quotas and snapshot bookkeeping.
// When sessions move into the engine (issue 29), this file is what gets ported.
//
// Unlike a gRPC reaction, an HTTP worker thread may wait: Open and Resume block on the
// admission queue's and the registry's answers, and a Session's destructor waits for its
// cancelled generation to end before it detaches the session. The engine's EventSink only
// updates the session's state and calls the HTTP layer's callbacks; what a gRPC stream does
// after a generation on its task thread (charging tokens, saving the chat state) is done here
// by the next call on the Session, on the HTTP worker's thread.
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <utility>

#include "engine/api/streamd_engine.h"
#include "server/http/http_sessions.h"
#include "server/open_quota.h"
#include "server/service_context.h"

namespace streamd::http {
namespace {

using server::ChatState;
using server::ServerSession;
using server::ServiceContext;

// The key of the HTTP layer's metadata in the session's snapshot.
constexpr char kMetadataKey[] = "http.conversation";
// How long a cancelled generation may take to report its end (one forward pass at most).
constexpr std::chrono::seconds kCancelWait{10};
// Beyond sessions.admission_timeout and resume_wait, the answer is late only if something is
// wrong; the request then fails instead of hanging.
constexpr std::chrono::seconds kAnswerSlack{30};

// The registry tells the driver of a session when it is closed elsewhere (CloseSession).
class Owner : public server::SessionOwner {
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
    case FinishReason::kEndOfGeneration: return DoneReason::kStop;
    case FinishReason::kLength: return DoneReason::kLength;
    case FinishReason::kCancelled: return DoneReason::kCancelled;
    case FinishReason::kError: break;
  }
  return DoneReason::kError;
}

// vLLM's finished_reason values, as the gRPC stream counts them.
metrics::Finished FinishedOf(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
    case FinishReason::kEndOfGeneration: return metrics::Finished::kStop;
    case FinishReason::kLength: return metrics::Finished::kLength;
    case FinishReason::kCancelled: return metrics::Finished::kAbort;
    case FinishReason::kError: break;
  }
  return metrics::Finished::kError;
}

server::ChatRoleKind RoleKindOf(TurnRole role) {
  switch (role) {
    case TurnRole::kSystem: return server::ChatRoleKind::kSystem;
    case TurnRole::kUser: return server::ChatRoleKind::kUser;
    case TurnRole::kAssistant: break;
  }
  return server::ChatRoleKind::kAssistant;
}

class AdapterSession : public Session {
 public:
  AdapterSession(ServiceContext& ctx, HttpCaller caller, std::shared_ptr<ServerSession> s,
                 std::shared_ptr<Owner> owner, MetadataCache& cache)
      : ctx_(ctx), caller_(std::move(caller)), s_(std::move(s)), owner_(std::move(owner)),
        cache_(cache) {}

  ~AdapterSession() override {
    if (closed_) return;
    StopGeneration();
    // Closed elsewhere meanwhile (CloseSession): gone from the registry, nothing to detach.
    if (owner_->closed()) return;
    AfterGeneration();
    // Every change since the metadata was last written was this driver's own.
    if (auto info = ctx_.engine.Get(s_->id); info.ok()) cache_.Advance(s_->id, info->revision);
    ctx_.registry.Detach(s_);
  }

  std::string id() const override { return s_->id.ToString(); }

  int64_t ContextTokens() const override {
    auto info = ctx_.engine.Get(s_->id);
    return info.ok() ? info->tokens_seen : 0;
  }

  Status Append(TurnRole role, const std::string& text) override {
    AfterGeneration();
    if (ctx_.metrics != nullptr) ctx_.metrics->RecordRequest(metrics::RequestKind::kAppend);
    if (Status live = Live(); !live.ok()) return live;
    if (Status quota = CheckTokenQuota("append"); !quota.ok()) return quota;
    ChatState chat;
    bool first_input;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (s_->generating) return FailedPreconditionError("the session is generating");
      // An open partial (left by a gRPC client) is replaced, as a final Append over gRPC does:
      // encoded from the state before it.
      chat = s_->partial_open ? s_->chat_before_partial : s_->chat;
      first_input = !(s_->partial_open ? s_->has_input_before_partial : s_->has_input);
    }
    auto tokens = ctx_.chat.Turn(RoleKindOf(role), text, first_input, &chat);
    if (!tokens.ok()) return tokens.status();
    if (tokens->empty()) return InvalidArgumentError("the message encodes to no tokens");
    Charge(static_cast<int64_t>(tokens->size()));
    // The chat state goes into the snapshot together with the tokens it describes.
    STREAMD_RETURN_IF_ERROR(ctx_.engine.Append(s_->id, *tokens, server::ChatMetadata(chat, true)));
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      s_->partial_open = false;
      s_->partial_tokens.clear();
      s_->chat = chat;
      s_->has_input = true;
    }
    ctx_.registry.Touched(*s_);
    return OkStatus();
  }

  Status Generate(const GenerateParams& p, GenerationCallbacks callbacks) override {
    AfterGeneration();
    if (Status live = Live(); !live.ok()) return live;
    if (ctx_.draining) return UnavailableError("streamd is shutting down");
    STREAMD_RETURN_IF_ERROR(CheckGenerationQuota());
    STREAMD_RETURN_IF_ERROR(CheckTokenQuota("generate"));
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
    ChatState chat;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (s_->generating) return FailedPreconditionError("the session is already generating");
      chat = s_->chat;
    }
    // After a system/user turn the answer starts with the template's assistant header.
    const std::vector<int32_t> prompt = ctx_.chat.GenerationPrompt(&chat);
    if (!prompt.empty()) {
      STREAMD_RETURN_IF_ERROR(ctx_.engine.Append(s_->id, prompt, server::ChatMetadata(chat, true),
                                                 Engine::AppendMode::kAfterPartial));
    }
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      s_->chat = chat;
      s_->has_input = s_->has_input || !prompt.empty();
      s_->generating = true;
      ++s_->generation;
      s_->request_id = o.request_id;
      s_->cancel_reason = OkStatus();
    }
    if (ctx_.metrics != nullptr) ctx_.metrics->RecordRequest(metrics::RequestKind::kGenerate);
    const Status started = ctx_.engine.Generate(
        s_->id, std::move(o),
        [s = s_, callbacks = std::move(callbacks), pending = pending_,
         m = ctx_.metrics](GenerationEvent&& e) {
          if (m != nullptr && e.kind == GenerationEvent::Kind::kDone) {
            m->RecordGeneration({FinishedOf(e.reason), e.prompt_tokens, e.output_tokens,
                                 e.time_to_first_token_s, e.total_s});
          }
          OnEvent(*s, callbacks, *pending, std::move(e));
        });
    if (!started.ok()) {
      {
        std::lock_guard<std::mutex> lock(s_->mu);
        s_->generating = false;
      }
      s_->generation_ended.notify_all();
    }
    return started;
  }

  void Cancel() override { (void)ctx_.engine.Cancel(s_->id); }

  Status Close() override {
    StopGeneration();
    AfterGeneration();
    closed_ = true;
    cache_.Erase(s_->id);
    return ctx_.registry.Close(s_->id, CancelledError("closed over HTTP"), owner_.get());
  }

  std::string Metadata() override {
    if (auto info = ctx_.engine.Get(s_->id); info.ok()) {
      if (auto cached = cache_.Get(s_->id, info->revision)) return *cached;
    }
    // Changed elsewhere, or restored from a snapshot: read it from the session's state.
    auto state = ctx_.engine.Capture(s_->id);
    if (!state.ok()) return {};
    std::string value;
    if (auto it = state->metadata.find(kMetadataKey); it != state->metadata.end()) {
      value = it->second;
    }
    cache_.Put(s_->id, state->revision, value);
    return value;
  }

  Status SetMetadata(const std::string& value) override {
    AfterGeneration();
    STREAMD_RETURN_IF_ERROR(ctx_.engine.SetMetadata(s_->id, kMetadataKey, value));
    if (auto info = ctx_.engine.Get(s_->id); info.ok()) cache_.Put(s_->id, info->revision, value);
    ctx_.registry.Touched(*s_);
    return OkStatus();
  }

 private:
  // What the engine's thread leaves for the HTTP thread after a generation.
  struct Pending {
    std::atomic<bool> ended{false};
    std::atomic<int64_t> output_tokens{0};
  };

  // The EventSink (engine thread): no engine calls, no waiting.
  static void OnEvent(ServerSession& s, const GenerationCallbacks& callbacks, Pending& pending,
                      GenerationEvent&& e) {
    if (e.kind == GenerationEvent::Kind::kToken) {
      if (callbacks.on_text && !e.text.empty()) callbacks.on_text(e.text);
      return;
    }
    Status note;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.generating = false;
      s.request_id.clear();
      note = std::exchange(s.cancel_reason, OkStatus());
      server::ChatFormatter::OnGenerationEnd(e.reason == FinishReason::kEndOfGeneration, &s.chat);
    }
    pending.output_tokens.store(e.output_tokens);
    pending.ended.store(true);
    s.generation_ended.notify_all();
    GenerationEnd end;
    end.reason = DoneReasonOf(e.reason);
    end.status = !e.status.ok() ? e.status : note;
    end.tail_text = std::move(e.tail_text);
    end.output_tokens = e.output_tokens;
    if (callbacks.on_done) callbacks.on_done(end);
  }

  // The gRPC stream's AfterGeneration: tokens charged, the chat state saved with the session.
  void AfterGeneration() {
    if (!pending_->ended.exchange(false)) return;
    Charge(pending_->output_tokens.exchange(0));
    ChatState chat;
    bool has_input;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      chat = s_->chat;
      has_input = s_->has_input;
    }
    for (const auto& [key, value] : server::ChatMetadata(chat, has_input)) {
      (void)ctx_.engine.SetMetadata(s_->id, key, value);
    }
    ctx_.registry.Touched(*s_);
  }

  void StopGeneration() {
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (!s_->generating) return;
    }
    (void)ctx_.engine.Cancel(s_->id);
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->generation_ended.wait_for(lock, kCancelWait, [&] { return !s_->generating; });
  }

  Status Live() const {
    if (owner_->closed()) {
      return Status(StatusCode::kAborted, "session " + s_->id.ToString() + " was closed meanwhile");
    }
    return OkStatus();
  }

  Status CheckGenerationQuota() const {
    if (ctx_.auth == nullptr || !caller_.authenticated) return OkStatus();
    const int32_t limit = ctx_.auth->QuotasOf(caller_.tenant).max_generations;
    if (limit <= 0) return OkStatus();
    const int32_t running = ctx_.registry.UsageOf(caller_.tenant).generating;
    if (running < limit) return OkStatus();
    return ResourceExhaustedError("tenant " + caller_.tenant + " runs " + std::to_string(running) +
                                  " generations, its quota max_generations = " +
                                  std::to_string(limit) + "; retry when one ends");
  }

  Status CheckTokenQuota(const std::string& what) const {
    if (ctx_.auth == nullptr || ctx_.budget == nullptr || !caller_.authenticated) {
      return OkStatus();
    }
    return ctx_.budget->Check(caller_.tenant,
                              ctx_.auth->QuotasOf(caller_.tenant).tokens_per_second, what);
  }

  void Charge(int64_t tokens) const {
    if (ctx_.auth == nullptr || ctx_.budget == nullptr || !caller_.authenticated) return;
    ctx_.budget->Charge(caller_.tenant, ctx_.auth->QuotasOf(caller_.tenant).tokens_per_second,
                        tokens);
  }

  ServiceContext& ctx_;
  const HttpCaller caller_;
  const std::shared_ptr<ServerSession> s_;
  const std::shared_ptr<Owner> owner_;
  MetadataCache& cache_;
  std::shared_ptr<Pending> pending_ = std::make_shared<Pending>();
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
      Status quota = server::CheckOpenQuota(*ctx_.auth, ctx_.registry, ctx_.engine.config(),
                                            ctx_.model.context_length, options);
      if (!quota.ok()) {
        ctx_.auth->LogQuotaRefusal(quota);
        return quota;
      }
    }
    auto owner = std::make_shared<Owner>();
    auto answer = std::make_shared<std::promise<StatusOr<std::shared_ptr<ServerSession>>>>();
    auto future = answer->get_future();
    ctx_.admission.Submit(options, owner, caller.client,
                          [answer](StatusOr<std::shared_ptr<ServerSession>> s) {
                            answer->set_value(std::move(s));
                          });
    if (future.wait_for(options.admission_timeout + kAnswerSlack) != std::future_status::ready) {
      return UnavailableError("no answer from the admission queue");
    }
    StatusOr<std::shared_ptr<ServerSession>> s = future.get();
    if (ctx_.metrics != nullptr) {
      (s.ok() ? ctx_.metrics->sessions_opened : ctx_.metrics->sessions_rejected).Increment();
    }
    if (!s.ok()) return s.status();
    return std::unique_ptr<Session>(
        new AdapterSession(ctx_, caller, *std::move(s), std::move(owner), cache_));
  }

  StatusOr<std::unique_ptr<Session>> Resume(const HttpCaller& caller,
                                            const std::string& id_text) override {
    if (ctx_.metrics != nullptr) ctx_.metrics->RecordRequest(metrics::RequestKind::kResume);
    STREAMD_RETURN_IF_ERROR(Serving());
    STREAMD_ASSIGN_OR_RETURN(SessionId id, SessionId::Parse(id_text, "session"));
    auto owner = std::make_shared<Owner>();
    auto answer = std::make_shared<std::promise<StatusOr<std::shared_ptr<ServerSession>>>>();
    auto future = answer->get_future();
    // A resident session is attached at once; an offloaded one is read back first.
    ctx_.registry.Attach(
        id, owner,
        [answer](StatusOr<std::shared_ptr<ServerSession>> s) { answer->set_value(std::move(s)); },
        caller.admin ? std::nullopt : std::optional<std::string>(caller.tenant));
    if (future.wait_for(ctx_.options.persistence.resume_wait + kAnswerSlack) !=
        std::future_status::ready) {
      return UnavailableError("session " + id.ToString() + " could not be read back in time");
    }
    StatusOr<std::shared_ptr<ServerSession>> s = future.get();
    if (!s.ok()) return s.status();
    return std::unique_ptr<Session>(
        new AdapterSession(ctx_, caller, *std::move(s), std::move(owner), cache_));
  }

  Status Serving() const override {
    if (ctx_.draining) return UnavailableError("streamd is shutting down");
    return ctx_.engine.BackendHealth();
  }

  std::string ModelName() const override { return ctx_.model_info.name(); }

 private:
  ServiceContext& ctx_;
  MetadataCache cache_;
};

}  // namespace

std::unique_ptr<HttpSessions> MakeServerSessions(server::ServiceContext& ctx) {
  return std::make_unique<ServerSessions>(ctx);
}

}  // namespace streamd::http
