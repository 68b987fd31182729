#include "tools/streamctl/session_client.h"

#include "tools/streamctl/channel.h"

namespace streamd::streamctl {
namespace {

Status FromError(const v1::Error& e) {
  return Status(static_cast<StatusCode>(e.code()), e.message());
}

}  // namespace

Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
}

SessionClient::SessionClient(const std::shared_ptr<grpc::Channel>& channel,
                             const std::string& session_id)
    : stub_(v1::Streamd::NewStub(channel)) {
  SetSessionAffinity(&context_, session_id);
  stream_ = stub_->Session(&context_);
}

SessionClient::~SessionClient() {
  if (!finished_) {
    context_.TryCancel();
    (void)Finish();
  }
}

bool SessionClient::Write(const v1::ClientMessage& m) {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (writes_done_) return false;
  return stream_->Write(m);
}

StatusOr<v1::ServerMessage> SessionClient::Read() {
  v1::ServerMessage m;
  if (stream_->Read(&m)) return m;
  const Status end = Finish();
  return end.ok() ? UnavailableError("the server ended the stream") : end;
}

Status SessionClient::Finish() {
  if (!finished_) {
    finished_ = true;
    final_ = stream_->Finish();
  }
  return FromGrpc(final_);
}

StatusOr<v1::Opened> SessionClient::Open(const v1::Open& open) {
  v1::ClientMessage m;
  *m.mutable_open() = open;
  if (!Write(m)) return Finish();
  STREAMD_ASSIGN_OR_RETURN(v1::ServerMessage reply, Read());
  if (reply.has_error()) return FromError(reply.error());
  if (!reply.has_opened()) return InternalError("expected Opened, got another message");
  return reply.opened();
}

StatusOr<v1::Opened> SessionClient::Resume(const std::string& session_id) {
  v1::ClientMessage m;
  m.mutable_resume()->set_session_id(session_id);
  if (!Write(m)) return Finish();
  STREAMD_ASSIGN_OR_RETURN(v1::ServerMessage reply, Read());
  if (reply.has_error()) return FromError(reply.error());
  if (!reply.has_opened()) return InternalError("expected Opened, got another message");
  return reply.opened();
}

StatusOr<v1::CacheState> SessionClient::Append(const v1::Append& append) {
  v1::ClientMessage m;
  *m.mutable_append() = append;
  if (!Write(m)) return Finish();
  while (true) {  // a barge-in first delivers the cancelled generation's end
    STREAMD_ASSIGN_OR_RETURN(v1::ServerMessage reply, Read());
    if (reply.has_error()) return FromError(reply.error());
    if (reply.has_cache_state()) return reply.cache_state();
  }
}

StatusOr<v1::GenerationDone> SessionClient::Generate(
    const v1::Generate& generate, const std::function<void(const v1::TokenDelta&)>& on_delta) {
  v1::ClientMessage m;
  *m.mutable_generate() = generate;
  if (!Write(m)) return Finish();
  while (true) {
    STREAMD_ASSIGN_OR_RETURN(v1::ServerMessage reply, Read());
    if (reply.has_error()) return FromError(reply.error());
    if (reply.has_token_delta()) on_delta(reply.token_delta());
    if (reply.has_generation_done()) {
      // The CacheState that follows is consumed too, so the stream is at rest.
      v1::GenerationDone done = reply.generation_done();
      (void)Read();  // a stream that ends here (shutdown) still delivered the generation
      return done;
    }
  }
}

StatusOr<v1::CacheState> SessionClient::Truncate(const v1::Truncate& truncate) {
  v1::ClientMessage m;
  *m.mutable_truncate() = truncate;
  if (!Write(m)) return Finish();
  while (true) {  // a generation it cancels first delivers its end (and that end's CacheState)
    STREAMD_ASSIGN_OR_RETURN(v1::ServerMessage reply, Read());
    if (reply.has_error()) return FromError(reply.error());
    if (reply.has_generation_done()) {
      (void)Read();  // the generation's own CacheState, not the truncation's
      continue;
    }
    if (reply.has_cache_state()) return reply.cache_state();
  }
}

StatusOr<v1::Forked> SessionClient::Fork(const v1::Fork& fork) {
  v1::ClientMessage m;
  *m.mutable_fork() = fork;
  if (!Write(m)) return Finish();
  STREAMD_ASSIGN_OR_RETURN(v1::ServerMessage reply, Read());
  if (reply.has_error()) return FromError(reply.error());
  if (!reply.has_forked()) return InternalError("expected Forked, got another message");
  return reply.forked();
}

void SessionClient::Cancel() {
  v1::ClientMessage m;
  m.mutable_cancel();
  (void)Write(m);
}

Status SessionClient::Close() {
  v1::ClientMessage m;
  m.mutable_close();
  (void)Write(m);
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!writes_done_) stream_->WritesDone();
    writes_done_ = true;
  }
  v1::ServerMessage ignored;
  while (stream_->Read(&ignored)) {
  }
  return Finish();
}

Status SessionClient::Detach() {
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    if (!writes_done_) stream_->WritesDone();
    writes_done_ = true;
  }
  v1::ServerMessage ignored;
  while (stream_->Read(&ignored)) {
  }
  return Finish();
}

}  // namespace streamd::streamctl
