// HttpSessions (http_sessions.h) over the engine's session API (engine/api/session_api.h) and
// the daemon's Authenticator: the HTTP front door drives a session through the same api::Engine
// as a gRPC stream, so the conversation, the quotas and the snapshot bookkeeping are the
// engine's. What is added here is the transport's: who the key names, the request metrics, the
// HTTP layer's metadata key, and waiting (an HTTP worker thread may block; the engine answers
// Open and Resume through callbacks).
#include <chrono>
#include <future>
#include <utility>

#include "engine/api/session_api.h"
#include "server/authenticator.h"
#include "server/generation_metrics.h"
#include "server/http/http_sessions.h"

namespace streamd::http {
namespace {

// The key of the HTTP layer's metadata in the session's snapshot.
constexpr char kMetadataKey[] = "http.conversation";
// Beyond sessions.admission_timeout and resume_wait, the answer is late only if something is
// wrong; the request then fails instead of hanging.
constexpr std::chrono::seconds kAnswerSlack{30};

DoneReason DoneReasonOf(api::FinishReason r) {
  switch (r) {
    case api::FinishReason::kStop:
    case api::FinishReason::kEndOfGeneration:
      return DoneReason::kStop;
    case api::FinishReason::kLength:
      return DoneReason::kLength;
    case api::FinishReason::kCancelled:
      return DoneReason::kCancelled;
    case api::FinishReason::kError:
      break;
  }
  return DoneReason::kError;
}

api::Role RoleOf(TurnRole role) {
  switch (role) {
    case TurnRole::kSystem:
      return api::Role::kSystem;
    case TurnRole::kUser:
      return api::Role::kUser;
    case TurnRole::kAssistant:
      break;
  }
  return api::Role::kAssistant;
}

// The engine's answer to an Open or Resume, waited for on the HTTP worker thread.
class SessionAnswer {
 public:
  api::SessionDone Callback() {
    return [answer = answer_](StatusOr<std::unique_ptr<api::Session>> s) {
      answer->set_value(std::move(s));
    };
  }
  StatusOr<std::unique_ptr<api::Session>> Wait(std::chrono::milliseconds limit,
                                               const std::string& late) {
    auto future = answer_->get_future();
    if (future.wait_for(limit + kAnswerSlack) != std::future_status::ready) {
      return UnavailableError(late);
    }
    return future.get();
  }

 private:
  std::shared_ptr<std::promise<StatusOr<std::unique_ptr<api::Session>>>> answer_ =
      std::make_shared<std::promise<StatusOr<std::unique_ptr<api::Session>>>>();
};

class AdapterSession : public Session {
 public:
  AdapterSession(std::unique_ptr<api::Session> s, metrics::StreamdMetrics* metrics)
      : s_(std::move(s)), metrics_(metrics) {}

  // Detaches the session once its generation is over (cancelled first, if one still runs), as a
  // gRPC stream that ends does; nothing here waits for that.
  ~AdapterSession() override {
    if (!closed_) s_->Detach(CancelledError("the HTTP request ended"));
  }

  std::string id() const override { return s_->id(); }

  int64_t ContextTokens() const override {
    auto state = s_->State();
    return state.ok() ? state->tokens_seen : 0;
  }

  Status Append(TurnRole role, const std::string& text) override {
    if (metrics_ != nullptr) metrics_->RecordRequest(metrics::RequestKind::kAppend);
    api::AppendInput input;
    input.kind = api::AppendInput::Kind::kTurn;
    input.role = RoleOf(role);
    input.text = text;
    // No generation runs here (an Answer appends before it generates), so the engine answers at
    // once; the future only carries the answer across a barge-in's wait if one ever happened.
    auto answer = std::make_shared<std::promise<Status>>();
    auto future = answer->get_future();
    s_->Append(std::move(input), [answer](StatusOr<int64_t> appended, bool) {
      answer->set_value(appended.status());
    });
    return future.get();
  }

  Status Generate(const GenerateParams& p, GenerationCallbacks callbacks) override {
    api::GenerateRequest r;
    r.max_tokens = p.max_tokens;
    r.stop = p.stop;
    r.request_id = p.request_id;
    r.sampling.temperature = p.temperature;
    r.sampling.top_p = p.top_p;
    r.sampling.presence_penalty = p.presence_penalty;
    r.sampling.frequency_penalty = p.frequency_penalty;
    r.sampling.seed = p.seed;
    if (metrics_ != nullptr) metrics_->RecordRequest(metrics::RequestKind::kGenerate);
    metrics::StreamdMetrics* m = metrics_;
    auto shared = std::make_shared<GenerationCallbacks>(std::move(callbacks));
    api::GenerationObserver observer;
    // The scheduler thread: text and the end go to the HTTP layer's queue, nothing more.
    observer.on_token = [shared](api::TokenEvent&& e) {
      if (shared->on_text && !e.text.empty()) shared->on_text(e.text);
    };
    observer.on_end = [shared, m](api::GenerationEnd&& e) {
      if (m != nullptr) m->RecordGeneration(server::GenerationRecordOf(e));
      GenerationEnd end;
      end.reason = DoneReasonOf(e.reason);
      end.status = e.status;  // an error, or why the engine cancelled it
      end.tail_text = std::move(e.tail_text);
      end.output_tokens = e.usage.output_tokens;
      if (shared->on_done) shared->on_done(end);
    };
    return s_->Generate(std::move(r), std::move(observer));
  }

  void Cancel() override { (void)s_->Cancel(""); }

  Status Close() override {
    closed_ = true;
    return s_->Close(CancelledError("closed over HTTP"));
  }

  std::string Metadata() override { return s_->Metadata(kMetadataKey); }
  Status SetMetadata(const std::string& value) override {
    return s_->SetMetadata(kMetadataKey, value);
  }

 private:
  const std::unique_ptr<api::Session> s_;
  metrics::StreamdMetrics* const metrics_;
  bool closed_ = false;
};

class ServerSessions : public HttpSessions {
 public:
  explicit ServerSessions(const ServerSessionsDeps& deps) : d_(deps) {}

  StatusOr<HttpCaller> Authenticate(const std::string* authorization) const override {
    HttpCaller caller;
    if (d_.auth == nullptr) return caller;
    STREAMD_ASSIGN_OR_RETURN(server::Caller c, d_.auth->AuthenticateHeader(authorization));
    caller.tenant = c.tenant;
    caller.admin = c.admin;
    caller.authenticated = c.authenticated;
    return caller;
  }

  StatusOr<std::unique_ptr<Session>> Open(const HttpCaller& caller) override {
    if (d_.metrics != nullptr) d_.metrics->RecordRequest(metrics::RequestKind::kOpen);
    STREAMD_RETURN_IF_ERROR(Serving());
    SessionAnswer answer;
    // Held while this thread waits: an Open nobody waits for any more is dropped.
    const std::shared_ptr<void> wanted =
        d_.engine.Open(ApiCaller(caller), api::OpenOptions{}, answer.Callback());
    auto s = answer.Wait(d_.open_wait, "no answer from the admission queue");
    if (d_.metrics != nullptr) {
      (s.ok() ? d_.metrics->sessions_opened : d_.metrics->sessions_rejected).Increment();
    }
    if (!s.ok()) return s.status();
    return std::unique_ptr<Session>(new AdapterSession(std::move(s).value(), d_.metrics));
  }

  StatusOr<std::unique_ptr<Session>> Resume(const HttpCaller& caller,
                                            const std::string& id) override {
    if (d_.metrics != nullptr) d_.metrics->RecordRequest(metrics::RequestKind::kResume);
    STREAMD_RETURN_IF_ERROR(Serving());
    SessionAnswer answer;
    d_.engine.Resume(ApiCaller(caller), id, answer.Callback());
    auto s = answer.Wait(d_.resume_wait, "session " + id + " could not be read back in time");
    if (!s.ok()) return s.status();
    return std::unique_ptr<Session>(new AdapterSession(std::move(s).value(), d_.metrics));
  }

  Status Serving() const override { return d_.engine.Serving(); }

  std::string ModelName() const override { return d_.engine.model().name; }

 private:
  api::Caller ApiCaller(const HttpCaller& caller) const {
    return server::ToApiCaller(d_.auth, {caller.tenant, caller.admin, caller.authenticated},
                               caller.client);
  }

  const ServerSessionsDeps d_;
};

}  // namespace

std::unique_ptr<HttpSessions> MakeServerSessions(const ServerSessionsDeps& deps) {
  return std::make_unique<ServerSessions>(deps);
}

}  // namespace streamd::http
