// SessionStream's binding to a session: Open (a new session, through the admission queue when
// the pool is full), Resume (an existing one, loaded from disk first when it is offloaded), and
// the Opened answer that binds it. Neither waits in a reaction: the answer comes from the queue's
// or the loader's thread, and the stream reads its next message then.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "server/grpc_status.h"
#include "server/session_stream.h"

namespace streamd::server {

void SessionStream::Bind(const std::shared_ptr<SessionRecord>& s, bool resumed) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!released_) session_ = s;
  }
  if (session() != s) {  // the stream ended while the session was being attached
    if (resumed) {
      ctx_.registry.Detach(s);
    } else {
      // A new session whose id was never sent: nobody could ever resume it.
      (void)ctx_.registry.Close(s->id, CancelledError("its stream ended before it was opened"));
    }
    return;
  }
  const ServerOptions& o = ctx_.options;
  const EngineConfig& e = ctx_.engine.config();
  v1::ServerMessage m;
  v1::Opened* opened = m.mutable_opened();
  opened->set_session_id(s->id.ToString());
  opened->set_resumed(resumed);
  *opened->mutable_settings() = ToSettings(s->spec, s->options.sampling, s->max_blocks);
  v1::Limits* limits = opened->mutable_limits();
  limits->set_max_sinks(e.max_sinks);
  limits->set_max_window(MaxWindow(e, ctx_.model, s->spec.sinks));
  limits->set_max_tokens(o.limits.max_tokens);
  limits->set_default_max_tokens(o.limits.default_max_tokens);
  limits->set_max_append_bytes(o.limits.max_append_bytes);
  limits->set_max_append_tokens(o.limits.max_append_tokens);
  limits->set_max_message_bytes(o.limits.max_message_bytes);
  limits->set_max_stop_strings(static_cast<int32_t>(kMaxStopStrings));
  limits->set_max_stop_bytes(static_cast<int32_t>(kMaxStopBytes));
  limits->set_max_queued_tokens(o.limits.max_queued_tokens);
  limits->set_idle_timeout_s(
      std::chrono::duration_cast<std::chrono::seconds>(o.limits.idle_timeout).count());
  limits->set_persistent(ctx_.registry.persister() != nullptr);
  limits->set_snapshot_interval_ms(o.persistence.snapshot_interval.count());
  limits->set_offload_after_s(
      std::chrono::duration_cast<std::chrono::seconds>(o.persistence.offload_after).count());
  limits->set_max_snapshot_bytes(o.limits.max_snapshot_bytes);
  *opened->mutable_model() = ctx_.model_info;
  if (auto info = ctx_.engine.Get(s->id); info.ok()) {
    *opened->mutable_cache() = ToCacheState(*info);
  }
  outbox_.Push(std::move(m));
}

void SessionStream::Bound(StatusOr<std::shared_ptr<SessionRecord>> s, bool resumed) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    binding_ = false;
    unbound_since_ = Clock::now();  // a failed attempt: server.open_timeout starts again
  }
  if (s.ok()) {
    Bind(*s, resumed);
  } else {
    SendError(NamingRequest(resumed ? "resume" : "open", s.status()));
  }
  ReadNext();
}

SessionStream::Next SessionStream::HandleOpen(const v1::Open& open) {
  if (auto s = session()) {
    SendError(FailedPreconditionError("open: this stream already drives session " +
                                      s->id.ToString() +
                                      "; a stream drives one session (open another stream)"));
    return Next::kRead;
  }
  if (ctx_.draining) {
    SendError(UnavailableError("open: streamd is shutting down and accepts no new sessions"));
    return Next::kRead;
  }
  auto options =
      ToSessionOptions(open, ctx_.options.session_defaults, ctx_.engine.config(), ctx_.model);
  if (options.ok()) {
    options->tenant = caller_.tenant;  // it owns the session, and its snapshot says so
    if (Status quota = CheckSessionQuota(*options); !quota.ok()) {
      ctx_.auth->LogQuotaRefusal(quota);
      options = quota;
    }
  }
  if (!options.ok()) {
    if (ctx_.metrics != nullptr) ctx_.metrics->sessions_rejected.Increment();
    SendError(options.status());
    return Next::kRead;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    binding_ = true;
  }
  // Admission may wait for blocks (sessions.admission_timeout): the queue answers on its own
  // thread, and this stream reads its next message after that.
  const Clock::time_point start = Clock::now();
  ctx_.admission.Submit(
      *std::move(options), weak_from_this(), client_,
      // Weak: a stream that ends while waiting must not be kept alive by the queue, which drops
      // the Opens of streams that are gone.
      [weak = weak_from_this(), registry = &ctx_.registry,
       start](StatusOr<std::shared_ptr<SessionRecord>> s) {
        std::shared_ptr<SessionStream> self = weak.lock();
        if (self == nullptr) {
          // Nobody was told its id: nobody could ever resume it.
          if (s.ok()) (void)registry->Close((*s)->id, CancelledError("its stream ended"));
          return;
        }
        if (metrics::StreamdMetrics* m = self->ctx_.metrics; m != nullptr) {
          (s.ok() ? m->sessions_opened : m->sessions_rejected).Increment();
          if (s.ok()) {
            m->queue_time.Observe(std::chrono::duration<double>(Clock::now() - start).count());
          }
        }
        self->Bound(std::move(s), /*resumed=*/false);
      });
  return Next::kLater;
}

SessionStream::Next SessionStream::HandleResume(const v1::Resume& resume) {
  if (auto s = session()) {
    SendError(FailedPreconditionError("resume: this stream already drives session " +
                                      s->id.ToString() +
                                      "; a stream drives one session (open another stream)"));
    return Next::kRead;
  }
  if (ctx_.draining) {
    SendError(UnavailableError("resume: streamd is shutting down"));
    return Next::kRead;
  }
  auto id = SessionId::Parse(resume.session_id(), "resume.session_id");
  if (!id.ok()) {
    SendError(id.status());
    return Next::kRead;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    binding_ = true;
  }
  // A resident session is attached at once; an offloaded one is read back from disk first on
  // the registry's loader thread, which then answers here: the reaction does not wait.
  ctx_.registry.Attach(
      *id, weak_from_this(),
      [self = shared_from_this()](StatusOr<std::shared_ptr<SessionRecord>> s) {
        if (!s.ok()) {
          const Status& st = s.status();
          // "resume.session_id: session 7f3a... does not exist (...)"
          const bool named = st.message().rfind("resume.", 0) == 0;
          if (!named) s = Status(st.code(), "resume.session_id: " + st.message());
        }
        self->Bound(std::move(s), /*resumed=*/true);
      },
      caller_.admin ? std::nullopt : std::optional<std::string>(caller_.tenant));
  return Next::kLater;
}

}  // namespace streamd::server
