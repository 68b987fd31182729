// SessionReactor: the gRPC callback-API reactor of one Session stream. It only moves messages:
// one read outstanding at a time (the next starts when a message has been handled), writes
// through the stream's StreamOutbox (one in flight), and forwards cancellation and completion.
// The protocol lives in SessionStream. Deletes itself in OnDone.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <functional>
#include <memory>
#include <utility>

#include "server/session_stream.h"

namespace streamd::server {

class SessionReactor final : public grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage> {
 public:
  // `on_done` runs in OnDone, before the reactor deletes itself.
  SessionReactor(ServiceContext& ctx, std::function<void(SessionStream*)> on_done)
      : writer_(this),
        stream_(std::make_shared<SessionStream>(ctx, &writer_)),
        on_done_(std::move(on_done)) {}

  const std::shared_ptr<SessionStream>& stream() const { return stream_; }
  void Start() { StartRead(&request_); }

 private:
  // Adapts the reactor's StartWrite/Finish to StreamOutbox::Writer.
  class Writer final : public StreamOutbox::Writer {
   public:
    explicit Writer(SessionReactor* reactor) : reactor_(reactor) {}
    void StartWrite(const v1::ServerMessage* message) override { reactor_->StartWrite(message); }
    void Finish(const grpc::Status& status) override { reactor_->Finish(status); }

   private:
    SessionReactor* reactor_;
  };

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call ended)
      stream_->OnHalfClose();
      return;
    }
    if (stream_->OnMessage(request_)) {
      request_.Clear();
      StartRead(&request_);
    }
  }
  void OnWriteDone(bool ok) override { stream_->OnWriteDone(ok); }
  void OnCancel() override { stream_->OnCancel(); }
  void OnDone() override {
    stream_->OnDone();
    on_done_(stream_.get());
    delete this;
  }

  Writer writer_;
  std::shared_ptr<SessionStream> stream_;
  std::function<void(SessionStream*)> on_done_;
  v1::ClientMessage request_;
};

}  // namespace streamd::server
