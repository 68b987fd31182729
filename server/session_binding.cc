// SessionStream's binding to a session: Open (a new session, through the admission queue when
// the pool is full), Resume (an existing one, loaded from disk first when it is offloaded), and
// the Opened answer that binds it. Neither waits in a reaction: the answer comes from the queue's
// or the loader's thread, and the stream reads its next message then.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "server/api_convert.h"
#include "server/grpc_status.h"
#include "server/session_stream.h"

namespace streamd::server {

void SessionStream::Bind(std::shared_ptr<api::Session> s, bool resumed) {
  bool bound = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_open_.reset();
    if (!released_) {
      session_ = s;
      bound = true;
    }
  }
  if (!bound) {  // the stream ended while the session was being attached
    if (resumed) {
      s->Detach(CancelledError("its stream ended while it was resumed"));
    } else {
      // A new session whose id was never sent: nobody could ever resume it.
      (void)s->Close(CancelledError("its stream ended before it was opened"));
    }
    return;
  }
  const ServerOptions& o = ctx_.options;
  const api::EngineLimits e = s->limits();
  v1::ServerMessage m;
  v1::Opened* opened = m.mutable_opened();
  opened->set_session_id(s->id());
  opened->set_resumed(resumed);
  *opened->mutable_settings() = ToProto(s->settings());
  v1::Limits* limits = opened->mutable_limits();
  limits->set_max_sinks(e.max_sinks);
  limits->set_max_window(e.max_window);
  limits->set_max_tokens(o.limits.max_tokens);
  limits->set_default_max_tokens(o.limits.default_max_tokens);
  limits->set_max_append_bytes(o.limits.max_append_bytes);
  limits->set_max_append_tokens(o.limits.max_append_tokens);
  limits->set_max_message_bytes(o.limits.max_message_bytes);
  limits->set_max_stop_strings(e.max_stop_strings);
  limits->set_max_stop_bytes(e.max_stop_bytes);
  limits->set_max_queued_tokens(o.limits.max_queued_tokens);
  limits->set_idle_timeout_s(
      std::chrono::duration_cast<std::chrono::seconds>(o.limits.idle_timeout).count());
  limits->set_persistent(e.persistent);
  limits->set_snapshot_interval_ms(o.persistence.snapshot_interval.count());
  limits->set_offload_after_s(
      std::chrono::duration_cast<std::chrono::seconds>(o.persistence.offload_after).count());
  limits->set_max_snapshot_bytes(o.limits.max_snapshot_bytes);
  *opened->mutable_model() = ctx_.model_info;
  if (auto state = s->State(); state.ok()) *opened->mutable_cache() = ToProto(*state);
  outbox_.Push(std::move(m));
}

void SessionStream::Bound(StatusOr<std::unique_ptr<api::Session>> s, bool resumed) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    binding_ = false;
    unbound_since_ = Clock::now();  // a failed attempt: server.open_timeout starts again
  }
  if (s.ok()) {
    Bind(std::shared_ptr<api::Session>(std::move(s).value()), resumed);
  } else {
    SendError(NamingRequest(resumed ? "resume" : "open", s.status()));
  }
  ReadNext();
}

SessionStream::Next SessionStream::HandleOpen(const v1::Open& open) {
  if (auto s = session()) {
    SendError(FailedPreconditionError("open: this stream already drives session " + s->id() +
                                      "; a stream drives one session (open another stream)"));
    return Next::kRead;
  }
  if (ctx_.draining()) {
    SendError(UnavailableError("open: streamd is shutting down and accepts no new sessions"));
    return Next::kRead;
  }
  auto options = ToOpenOptions(open);
  if (!options.ok()) {
    if (ctx_.metrics != nullptr) ctx_.metrics->sessions_rejected.Increment();
    SendError(options.status());
    return Next::kRead;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    binding_ = true;
  }
  // The engine checks the options and the tenant's quotas, then admission may wait for blocks
  // (sessions.admission_timeout): the answer comes from the engine's thread (or at once for a
  // refusal), and this stream reads its next message after that.
  const Clock::time_point start = Clock::now();
  std::shared_ptr<void> pending = ctx_.api->Open(
      caller_, *options,
      // Weak: a stream that ends while waiting lets go of its Open (pending_open_), which the
      // engine then drops without opening anything.
      [weak = weak_from_this(), start](StatusOr<std::unique_ptr<api::Session>> s) {
        std::shared_ptr<SessionStream> self = weak.lock();
        if (self == nullptr) {
          // Nobody was told its id: nobody could ever resume it.
          if (s.ok()) (void)(*s)->Close(CancelledError("its stream ended"));
          return;
        }
        if (metrics::StreamdMetrics* m = self->ctx_.metrics; m != nullptr) {
          (s.ok() ? m->sessions_opened : m->sessions_rejected).Increment();
          if (s.ok()) {
            m->queue_time.Observe(std::chrono::duration<double>(Clock::now() - start).count());
          }
        }
        self->Bound(std::move(s), /*resumed=*/false);
      },
      ClosedElsewhere());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (binding_ && !released_) pending_open_ = std::move(pending);
  }
  return Next::kLater;
}

SessionStream::Next SessionStream::HandleResume(const v1::Resume& resume) {
  if (auto s = session()) {
    SendError(FailedPreconditionError("resume: this stream already drives session " + s->id() +
                                      "; a stream drives one session (open another stream)"));
    return Next::kRead;
  }
  if (ctx_.draining()) {
    SendError(UnavailableError("resume: streamd is shutting down"));
    return Next::kRead;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    binding_ = true;
  }
  // A resident session is attached at once; an offloaded one is read back from disk first on
  // the engine's loader thread, which then answers here: the reaction does not wait.
  ctx_.api->Resume(
      caller_, resume.session_id(),
      [self = shared_from_this()](StatusOr<std::unique_ptr<api::Session>> s) {
        if (!s.ok()) {
          const Status& st = s.status();
          // "resume.session_id: session 7f3a... does not exist (...)"
          if (st.message().rfind("resume.", 0) != 0) {
            s = Status(st.code(), st.message().rfind("session_id", 0) == 0
                                      ? "resume." + st.message()
                                      : "resume.session_id: " + st.message());
          }
        }
        self->Bound(std::move(s), /*resumed=*/true);
      },
      ClosedElsewhere());
  return Next::kLater;
}

}  // namespace streamd::server
