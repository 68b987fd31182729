// SessionStream's rollback requests: Truncate (drop the unplayed tail of the last generation) and
// Fork (a copy-on-write copy of the session, detached). The engine does the rollback itself
// (api::Session::Truncate, Fork: the order, the chat state and the tenant's quota are the
// engine's); here is the wire.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/api_convert.h"
#include "server/grpc_status.h"
#include "server/session_stream.h"

namespace streamd::server {

SessionStream::Next SessionStream::HandleTruncate(const v1::Truncate& t) {
  std::shared_ptr<api::Session> s = session();
  if (s == nullptr) {
    SendError(FailedPreconditionError("truncate: open or resume a session first"));
    return Next::kRead;
  }
  if (Status valid = ValidateTruncate(t, ctx_.options.limits); !valid.ok()) {
    SendError(valid, t.request_id());
    return Next::kRead;
  }
  // A running generation of that request_id is cancelled first; its GenerationDone goes out
  // before the truncation's CacheState. The engine answers on its task thread.
  s->Truncate(
      t.request_id(), t.keep_tokens(),
      [self = shared_from_this(), request_id = t.request_id()](StatusOr<api::CacheState> state) {
        if (!state.ok()) {
          self->SendError(NamingRequest("truncate", state.status()), request_id);
        } else {
          v1::ServerMessage m;
          *m.mutable_cache_state() = ToProto(*state);
          self->outbox_.Push(std::move(m));
        }
        self->ReadNext();
      });
  return Next::kLater;
}

SessionStream::Next SessionStream::HandleFork(const v1::Fork& f) {
  std::shared_ptr<api::Session> s = session();
  if (s == nullptr) {
    SendError(FailedPreconditionError("fork: open or resume a session first"), f.request_id());
    return Next::kRead;
  }
  if (ctx_.draining()) {
    SendError(UnavailableError("fork: streamd is shutting down"), f.request_id());
    return Next::kRead;
  }
  if (Status valid = ValidateRequestId(f.request_id(), ctx_.options.limits, "fork.request_id");
      !valid.ok()) {
    SendError(valid, f.request_id());
    return Next::kRead;
  }
  // A fork is one more session of the tenant: the engine checks its quota on its one task
  // thread, so that forks of several streams of one tenant are checked one at a time.
  s->Fork([self = shared_from_this(),
           request_id = f.request_id()](StatusOr<api::Session::Forked> fork) {
    if (!fork.ok()) {
      self->SendError(NamingRequest("fork", fork.status()), request_id);
    } else {
      v1::ServerMessage m;
      v1::Forked* forked = m.mutable_forked();
      forked->set_request_id(request_id);
      forked->set_session_id(fork->id);
      *forked->mutable_cache() = ToProto(fork->cache);
      self->outbox_.Push(std::move(m));
      if (self->ctx_.metrics != nullptr) self->ctx_.metrics->sessions_opened.Increment();
    }
    self->ReadNext();
  });
  return Next::kLater;
}

}  // namespace streamd::server
