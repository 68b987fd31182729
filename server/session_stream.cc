#include "server/session_stream.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "server/api_convert.h"
#include "server/generation_metrics.h"
#include "server/grpc_status.h"

namespace streamd::server {
namespace {

metrics::RequestKind RequestKindOf(v1::ClientMessage::KindCase kind) {
  switch (kind) {
    case v1::ClientMessage::kOpen:
      return metrics::RequestKind::kOpen;
    case v1::ClientMessage::kResume:
      return metrics::RequestKind::kResume;
    case v1::ClientMessage::kAppend:
      return metrics::RequestKind::kAppend;
    case v1::ClientMessage::kGenerate:
      return metrics::RequestKind::kGenerate;
    case v1::ClientMessage::kCancel:
      return metrics::RequestKind::kCancel;
    case v1::ClientMessage::kTruncate:
      return metrics::RequestKind::kTruncate;
    case v1::ClientMessage::kFork:
      return metrics::RequestKind::kFork;
    case v1::ClientMessage::kClose:
    case v1::ClientMessage::KIND_NOT_SET:
      break;
  }
  return metrics::RequestKind::kClose;
}

v1::ServerMessage ErrorMessage(const Status& status, std::string_view request_id) {
  v1::ServerMessage m;
  *m.mutable_error() = ToProtoError(status, request_id);
  return m;
}

}  // namespace

SessionStream::SessionStream(ServiceContext& ctx, Transport* transport, api::Caller caller)
    : ctx_(ctx),
      caller_(std::move(caller)),
      outbox_(transport, ctx.options.limits.max_queued_tokens),
      transport_(transport) {}

std::shared_ptr<api::Session> SessionStream::session() const {
  std::lock_guard<std::mutex> lock(mu_);
  return session_;
}

SessionStream::Next SessionStream::OnMessage(const v1::ClientMessage& m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (released_) return Next::kStop;
  }
  Next next = Next::kRead;
  if (ctx_.metrics != nullptr && m.kind_case() != v1::ClientMessage::KIND_NOT_SET) {
    ctx_.metrics->RecordRequest(RequestKindOf(m.kind_case()));
  }
  switch (m.kind_case()) {
    case v1::ClientMessage::kOpen:
      next = HandleOpen(m.open());
      break;
    case v1::ClientMessage::kResume:
      next = HandleResume(m.resume());
      break;
    case v1::ClientMessage::kAppend:
      next = HandleAppend(m.append());
      break;
    case v1::ClientMessage::kGenerate:
      HandleGenerate(m.generate());
      break;
    case v1::ClientMessage::kCancel:
      HandleCancel(m.cancel());
      break;
    case v1::ClientMessage::kTruncate:
      next = HandleTruncate(m.truncate());
      break;
    case v1::ClientMessage::kFork:
      next = HandleFork(m.fork());
      break;
    case v1::ClientMessage::kClose:
      HandleClose();
      return Next::kStop;
    case v1::ClientMessage::KIND_NOT_SET:
      SendError(InvalidArgumentError(
          "message.kind: the client message is empty (set open, resume, append, generate, "
          "cancel, close, truncate or fork)"));
      break;
  }
  if (next == Next::kLater) return next;
  return outbox_.closed() ? Next::kStop : Next::kRead;
}

void SessionStream::ReadNext() {
  if (outbox_.closed()) return;
  std::lock_guard<std::mutex> lock(transport_mu_);
  if (transport_ != nullptr) transport_->ReadNext();
}

void SessionStream::OnMalformedMessage(size_t bytes) {
  if (ctx_.metrics != nullptr) {
    ctx_.metrics->RecordError(static_cast<int>(StatusCode::kInvalidArgument));
  }
  End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                   "message: " + std::to_string(bytes) +
                       " bytes that do not parse as a streamd.v1.ClientMessage (a client bug, or "
                       "another protocol); the stream ends and its session, if any, is detached "
                       "and can be resumed"));
}

bool SessionStream::EndIfUnbound(Clock::time_point now) {
  const auto limit = ctx_.options.transport.open_timeout;
  if (limit.count() <= 0) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (session_ != nullptr || released_ || binding_ || now - unbound_since_ < limit) return false;
  }
  if (outbox_.closed()) return false;
  End(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                   "no session was opened or resumed on this stream within server.open_timeout (" +
                       std::to_string(limit.count()) + " ms); send Open or Resume first"));
  return true;
}

void SessionStream::SendError(const Status& status, std::string_view request_id) {
  if (ctx_.metrics != nullptr) ctx_.metrics->RecordError(static_cast<int>(status.code()));
  // A request_id that is not UTF-8 is not echoed: Error.request_id is a proto string, which
  // the client could not parse (the error itself says what is wrong with it).
  if (api::FindInvalidUtf8(request_id) != std::string_view::npos) request_id = {};
  outbox_.Push(ErrorMessage(status, request_id));
}

void SessionStream::SendCacheState(const api::Session& s) {
  auto state = s.State();
  if (!state.ok()) return;  // closed meanwhile
  v1::ServerMessage m;
  *m.mutable_cache_state() = ToProto(*state);
  outbox_.Push(std::move(m));
}

SessionStream::Next SessionStream::HandleAppend(const v1::Append& a) {
  std::shared_ptr<api::Session> s = session();
  if (s == nullptr) {
    SendError(FailedPreconditionError("append: open or resume a session first"));
    return Next::kRead;
  }
  if (Status valid = ValidateAppend(a, ctx_.options.limits, ctx_.model.vocab_size); !valid.ok()) {
    SendError(valid);
    return Next::kRead;
  }
  // Barge-in: an Append while a generation runs cancels it and goes on after its end (the
  // engine), so the context never changes under a generation. The engine charges the tokens.
  const bool deferred = s->Append(
      ToAppendInput(a), [self = shared_from_this(), s](StatusOr<int64_t> appended, bool later) {
        if (!appended.ok()) {
          self->SendError(NamingRequest("append", appended.status()));
        } else {
          self->SendCacheState(*s);
        }
        if (later) self->ReadNext();
      });
  return deferred ? Next::kLater : Next::kRead;
}

void SessionStream::HandleGenerate(const v1::Generate& g) {
  std::shared_ptr<api::Session> s = session();
  if (s == nullptr) {
    return SendError(FailedPreconditionError("generate: open or resume a session first"),
                     g.request_id());
  }
  if (ctx_.draining()) {
    return SendError(UnavailableError("generate: streamd is shutting down"), g.request_id());
  }
  auto request =
      ToGenerateRequest(g, s->settings().sampling, ctx_.options.limits, ctx_.model.vocab_size);
  if (!request.ok()) return SendError(request.status(), g.request_id());
  const std::string request_id = request->request_id;
  // One engine call: the quotas, the assistant header and the generation are the engine's.
  const Status started = s->Generate(*std::move(request), Observer(s));
  if (!started.ok()) SendError(NamingRequest("generate", started), request_id);
}

void SessionStream::HandleCancel(const v1::Cancel& c) {
  std::shared_ptr<api::Session> s = session();
  if (s == nullptr) {
    return SendError(FailedPreconditionError("cancel: open or resume a session first"));
  }
  const Status valid = ValidateRequestId(c.request_id(), ctx_.options.limits, "cancel.request_id");
  if (!valid.ok()) return SendError(valid, c.request_id());
  if (Status cancelled = s->Cancel(c.request_id()); !cancelled.ok()) {
    SendError(cancelled, c.request_id());
  }
}

void SessionStream::HandleClose() {
  std::shared_ptr<api::Session> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = std::move(session_);
    released_ = true;
    pending_open_.reset();
  }
  // A running generation's GenerationDone (CANCELLED) is queued before the stream ends.
  if (s != nullptr) (void)s->Close(CancelledError("closed by its stream"));
  outbox_.Finish(grpc::Status::OK);
}

api::GenerationObserver SessionStream::Observer(const std::shared_ptr<api::Session>& s) {
  auto self = shared_from_this();
  api::GenerationObserver o;
  // The scheduler thread: one generation at a time per stream, its tokens in order.
  o.on_token = [self, weak = std::weak_ptr<api::Session>(s)](api::TokenEvent&& e) {
    ServiceContext& ctx = self->ctx_;
    if (ctx.metrics != nullptr) {
      const Clock::time_point now = Clock::now();
      if (e.index > 0) {
        ctx.metrics->inter_token_latency.Observe(
            std::chrono::duration<double>(now - self->last_token_).count());
      }
      self->last_token_ = now;
    }
    if (self->outbox_.PushToken(e.request_id, e.token, e.text, e.index) ==
        StreamOutbox::PushResult::kFull) {
      if (std::shared_ptr<api::Session> session = weak.lock()) {
        session->CancelFromObserver(ResourceExhaustedError(
            "client too slow: " + std::to_string(ctx.options.limits.max_queued_tokens) +
            " tokens were queued unread (limits.max_queued_tokens); the generation was "
            "cancelled"));
      }
    }
  };
  o.on_end = [self](api::GenerationEnd&& e) {
    v1::ServerMessage m;
    v1::GenerationDone* done = m.mutable_generation_done();
    done->set_request_id(e.request_id);
    done->set_reason(ToProto(e.reason));
    done->set_tail_text(e.tail_text);
    v1::Usage* usage = done->mutable_usage();
    usage->set_input_tokens(e.usage.input_tokens);
    usage->set_output_tokens(e.usage.output_tokens);
    usage->set_time_to_first_token_s(e.usage.time_to_first_token_s);
    usage->set_total_s(e.usage.total_s);
    if (self->ctx_.metrics != nullptr) self->ctx_.metrics->RecordGeneration(GenerationRecordOf(e));
    // A failure, or why the server cancelled it (a slow client, the stream's end).
    if (!e.status.ok()) *done->mutable_error() = ToProtoError(e.status, e.request_id);
    self->outbox_.Push(std::move(m));
  };
  // The task thread, once the session's state is saved (and the tokens charged).
  o.on_settled = [self, weak = std::weak_ptr<api::Session>(s)] {
    if (std::shared_ptr<api::Session> session = weak.lock()) self->SendCacheState(*session);
  };
  return o;
}

api::OnClosedElsewhere SessionStream::ClosedElsewhere() {
  return [weak = weak_from_this()](const Status& why) {
    if (std::shared_ptr<SessionStream> self = weak.lock()) self->OnSessionClosed(why);
  };
}

void SessionStream::EndWhenIdle(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (end_after_generation_) return;  // already ending after the generation
    if (session_ != nullptr && session_->WhenIdle([self = shared_from_this()] {
          std::optional<grpc::Status> end;
          {
            std::lock_guard<std::mutex> stream_lock(self->mu_);
            end = self->end_after_generation_;
          }
          if (end) self->End(*end);
        })) {
      end_after_generation_ = status;
      return;
    }
  }
  End(status);
}

void SessionStream::OnHalfClose() { EndWhenIdle(grpc::Status::OK); }

void SessionStream::Drain() {
  EndWhenIdle(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                           "streamd is shutting down; its sessions end with it"));
}

void SessionStream::CancelGeneration(const Status& why) {
  if (std::shared_ptr<api::Session> s = session()) s->StopGeneration(why);
}

void SessionStream::OnSessionClosed(const Status& why) {
  std::string id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (session_ == nullptr) return;
    id = session_->id();
    session_.reset();
    released_ = true;
  }
  outbox_.Finish(
      grpc::Status(grpc::StatusCode::ABORTED, "session " + id + " was closed: " + why.message()));
}

void SessionStream::Release(std::function<void()> then) {
  std::shared_ptr<api::Session> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    s = std::move(session_);
    pending_open_.reset();  // an Open still waiting for admission is dropped
  }
  if (s == nullptr) {
    if (then) then();
    return;
  }
  // A session is detached once its generation is over; the reaction does not wait for that.
  s->Detach(CancelledError("the stream ended"), std::move(then));
}

void SessionStream::End(const grpc::Status& status) {
  // The client hears that the stream is over only once its session's snapshot is written. Its
  // next Resume may reach another replica sharing the snapshot directory (through a proxy,
  // after this one drained or when the proxy's hash says so): that replica reads the file, and
  // must find the session as this stream left it, not an older snapshot.
  Release([self = shared_from_this(), status] { self->outbox_.Finish(status); });
}

void SessionStream::OnCancel() {
  Release();
  outbox_.Abort(grpc::Status(grpc::StatusCode::CANCELLED,
                             "the client cancelled the call or its deadline passed"));
}

void SessionStream::OnDone() {
  {
    std::lock_guard<std::mutex> lock(transport_mu_);
    transport_ = nullptr;
  }
  Release();
  outbox_.Detach();
}

}  // namespace streamd::server
