// SessionReactor: the gRPC callback-API reactor of one Session stream. It only moves messages:
// one read outstanding at a time (the next starts when the stream has handled a message, which
// may be later than the reaction that delivered it: an Open waiting for admission, a barge-in
// waiting for its generation to stop), writes through the stream's StreamOutbox (one in
// flight), and forwards cancellation and completion. The protocol lives in SessionStream.
// Deletes itself in OnDone.
//
// The method is registered raw (bytes in, bytes out) so that the reactor, not gRPC, parses each
// ClientMessage: gRPC reports a message that does not parse exactly like the client's
// half-close, which would end the stream with OK and no word about the bad message. Here it
// ends the stream with INVALID_ARGUMENT.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/server_callback.h>

#include <functional>
#include <memory>
#include <utility>

#include "server/reactor_transport.h"
#include "server/session_stream.h"

namespace streamd::server {

class SessionReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `on_done` runs in OnDone, before the reactor deletes itself.
  SessionReactor(grpc::CallbackServerContext* context, ServiceContext& ctx, api::Caller caller,
                 std::function<void(SessionStream*)> on_done)
      : transport_(this, context, &in_),
        stream_(std::make_shared<SessionStream>(ctx, &transport_, std::move(caller))),
        on_done_(std::move(on_done)) {}

  const std::shared_ptr<SessionStream>& stream() const { return stream_; }
  void Start() { transport_.ReadNext(); }

 private:
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call ended)
      stream_->OnHalfClose();
      return;
    }
    request_.Clear();
    const size_t bytes = in_.Length();
    const grpc::Status parsed =
        grpc::SerializationTraits<v1::ClientMessage>::Deserialize(&in_, &request_);
    if (!parsed.ok()) {
      stream_->OnMalformedMessage(bytes);
      return;
    }
    if (stream_->OnMessage(request_) == SessionStream::Next::kRead) transport_.ReadNext();
  }
  void OnWriteDone(bool ok) override { stream_->OnWriteDone(ok); }
  void OnCancel() override { stream_->OnCancel(); }
  void OnDone() override {
    stream_->OnDone();
    on_done_(stream_.get());
    delete this;
  }

  grpc::ByteBuffer in_;  // before transport_, which points at it
  ReactorTransport<SessionReactor> transport_;
  std::shared_ptr<SessionStream> stream_;
  std::function<void(SessionStream*)> on_done_;
  v1::ClientMessage request_;
};

}  // namespace streamd::server
