// SessionStream's rollback requests: Truncate (drop the unplayed tail of the last generation),
// Fork (a copy-on-write copy of the session, detached), and the bookkeeping that lets the next
// Append replace an open partial one (Append.partial). The engine does the rollback itself
// (engine/serving/engine_rollback.cc); here are the protocol's order and the chat state.
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
  auto copy = std::make_shared<v1::Truncate>(t);
  // A running generation of that request_id is cancelled first; its GenerationDone goes out
  // before the truncation's CacheState.
  bool running_other = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    running_other = s->generating && s->request_id != t.request_id();
  }
  if (running_other || !DeferUntilStopped(s, OkStatus(), [self = shared_from_this(), s, copy] {
        self->TruncateNow(s, *copy);
        self->ReadNext();
      })) {
    ctx_.tasks.Post([self = shared_from_this(), s, copy] {
      self->TruncateNow(s, *copy);
      self->ReadNext();
    });
  }
  return Next::kLater;
}

void SessionStream::TruncateNow(const std::shared_ptr<SessionRecord>& s, const v1::Truncate& t) {
  auto before = ctx_.engine.Get(s->id);
  auto info = ctx_.engine.Truncate(s->id, t.request_id(), t.keep_tokens());
  if (!info.ok()) return SendError(NamingRequest("truncate", info.status()), t.request_id());
  {
    std::lock_guard<std::mutex> lock(s->mu);
    // A dropped tail holds the turn's end-of-generation token, if any (always the last): the
    // assistant's turn is open again.
    if (s->chat == ChatState::kAssistantClosed && before.ok() &&
        info->tokens_seen < before->tokens_seen) {
      s->chat = ChatState::kAssistantOpen;
    }
  }
  v1::ServerMessage m;
  *m.mutable_cache_state() = ToCacheState(*info);
  outbox_.Push(std::move(m));
  SaveSessionState(*s);
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
  ctx_.tasks.Post([self = shared_from_this(), s, request_id = f.request_id()] {
    // A fork is one more session of the tenant. Checked here, on the one task thread, so that
    // forks of several streams of one tenant are checked one at a time and cannot all pass.
    const Status quota = self->CheckSessionQuota(s->options, "fork");
    if (!quota.ok()) self->ctx_.auth->LogQuotaRefusal(quota);
    const StatusOr<std::shared_ptr<SessionRecord>> fork =
        quota.ok() ? self->ctx_.registry.Fork(s) : StatusOr<std::shared_ptr<SessionRecord>>(quota);
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

SessionStream::AppendBase SessionStream::AppendBaseOf(SessionRecord& s) const {
  std::lock_guard<std::mutex> lock(s.mu);
  AppendBase base;
  base.replaces_partial = s.partial_open;
  base.chat = base.replaces_partial ? s.chat_before_partial : s.chat;
  base.first_input = base.replaces_partial ? !s.has_input_before_partial : !s.has_input;
  return base;
}

bool SessionStream::RepeatsOpenPartial(SessionRecord& s, const v1::Append& a) const {
  ChatState chat;
  bool first_input;
  std::vector<int32_t> partial_tokens;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.partial_open) return false;
    chat = s.chat_before_partial;
    first_input = !s.has_input_before_partial;
    partial_tokens = s.partial_tokens;
  }
  auto tokens = TokensOf(a, first_input, &chat);
  return tokens.ok() && *tokens == partial_tokens;
}

void SessionStream::RecordAppend(SessionRecord& s, bool partial, const AppendBase& base,
                                 std::vector<int32_t> tokens, ChatState chat) {
  std::lock_guard<std::mutex> lock(s.mu);
  if (partial) {
    // A partial replacing a partial keeps the state from before the first: every replacement
    // is encoded as if no partial had been sent.
    if (!base.replaces_partial) {
      s.chat_before_partial = base.chat;
      s.has_input_before_partial = !base.first_input;
    }
    s.partial_tokens = std::move(tokens);
  }
  s.partial_open = partial;
  s.chat = chat;
  s.has_input = true;
}

}  // namespace streamd::server
