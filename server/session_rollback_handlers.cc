// SessionStream's rollback requests: Truncate (drop the unplayed tail of the last generation) and
// Fork (a copy-on-write copy of the session, detached). The engine does the rollback itself
// (engine/core/engine_rollback.cc) and the driver keeps its order and the chat state
// (engine/sessions/session_driver.h); here is the wire.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/api/streamd_engine.h"
#include "server/grpc_status.h"
#include "server/session_stream.h"

namespace streamd::server {

SessionStream::Next SessionStream::HandleTruncate(const v1::Truncate& t) {
  std::shared_ptr<SessionRecord> s = session();
  if (s == nullptr) {
    SendError(FailedPreconditionError("truncate: open or resume a session first"));
    return Next::kRead;
  }
  if (Status valid = ValidateTruncate(t, ctx_.options.limits); !valid.ok()) {
    SendError(valid, t.request_id());
    return Next::kRead;
  }
  // A running generation of that request_id is cancelled first; its GenerationDone goes out
  // before the truncation's CacheState. The driver answers on the task thread.
  ctx_.driver.Truncate(
      s, t.request_id(), t.keep_tokens(),
      [self = shared_from_this(), request_id = t.request_id()](StatusOr<SessionInfo> info) {
        if (!info.ok()) {
          self->SendError(NamingRequest("truncate", info.status()), request_id);
        } else {
          v1::ServerMessage m;
          *m.mutable_cache_state() = ToCacheState(*info);
          self->outbox_.Push(std::move(m));
        }
        self->ReadNext();
      });
  return Next::kLater;
}

SessionStream::Next SessionStream::HandleFork(const v1::Fork& f) {
  std::shared_ptr<SessionRecord> s = session();
  if (s == nullptr) {
    SendError(FailedPreconditionError("fork: open or resume a session first"), f.request_id());
    return Next::kRead;
  }
  if (ctx_.draining) {
    SendError(UnavailableError("fork: streamd is shutting down"), f.request_id());
    return Next::kRead;
  }
  if (Status valid = ValidateRequestId(f.request_id(), ctx_.options.limits, "fork.request_id");
      !valid.ok()) {
    SendError(valid, f.request_id());
    return Next::kRead;
  }
  // A fork is one more session of the tenant: its quota is checked on the driver's one task
  // thread, so that forks of several streams of one tenant are checked one at a time.
  auto self = shared_from_this();
  ctx_.driver.Fork(
      s,
      [self, s] {
        const Status quota = self->CheckSessionQuota(s->options, "fork");
        if (!quota.ok()) self->ctx_.auth->LogQuotaRefusal(quota);
        return quota;
      },
      [self, request_id = f.request_id()](StatusOr<std::shared_ptr<SessionRecord>> fork) {
        if (!fork.ok()) {
          self->SendError(NamingRequest("fork", fork.status()), request_id);
        } else {
          v1::ServerMessage m;
          v1::Forked* forked = m.mutable_forked();
          forked->set_request_id(request_id);
          forked->set_session_id((*fork)->id.ToString());
          if (auto info = self->ctx_.engine.Get((*fork)->id); info.ok()) {
            *forked->mutable_cache() = ToCacheState(*info);
          }
          self->outbox_.Push(std::move(m));
          if (self->ctx_.metrics != nullptr) self->ctx_.metrics->sessions_opened.Increment();
        }
        self->ReadNext();
      });
  return Next::kLater;
}

}  // namespace streamd::server
