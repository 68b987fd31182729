// ReactorTransport: SessionStream's reads and writes through one gRPC bidi reactor.
//
// A reactor deletes itself in OnDone, which gRPC runs once the call is finished and nothing is
// outstanding, on whichever thread completes last. Two rules follow, both kept here:
//   - no read may start after Finish (it could outlive the reactor): a read starts only while
//     the call is not finished, both decided under one mutex;
//   - nothing of the reactor (this transport included) may be touched once its Finish has been
//     called, not even to unlock that mutex: Finish is called with no lock held, as the last
//     thing this transport does.
// Templated on the reactor (StartRead, StartWrite, Finish of grpc::ServerBidiReactor) so that
// the rules are tested without a server.
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/status.h>

#include <mutex>

#include "proto/streamd/v1/session_affinity.h"
#include "server/session_stream.h"

namespace streamd::server {

template <class Reactor>
class ReactorTransport final : public SessionStream::Transport {
 public:
  // `context` may be null (no initial metadata is added then); `in` is where reads land.
  ReactorTransport(Reactor* reactor, grpc::CallbackServerContext* context, grpc::ByteBuffer* in)
      : reactor_(reactor), context_(context), in_(in) {}

  void StartWrite(const v1::ServerMessage* message) override {
    // The initial metadata goes with the first write: when that is Opened, it carries the
    // session's affinity key, from which a proxy learns which replica holds the session.
    if (!first_write_done_) {
      first_write_done_ = true;
      if (context_ != nullptr && message->has_opened()) {
        context_->AddInitialMetadata(v1::kSessionAffinityHeader, message->opened().session_id());
      }
    }
    // One write in flight, so one buffer serves them all (the serializer wants it empty).
    out_.Clear();
    bool own = false;
    (void)grpc::SerializationTraits<v1::ServerMessage>::Serialize(*message, &out_, &own);
    reactor_->StartWrite(&out_);
  }

  void Finish(const grpc::Status& status) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    // From here on the reactor, and this transport inside it, may be gone at any moment (see
    // the file comment). Holding mu_ across this call and unlocking it afterwards wrote into
    // freed memory: the daemon's heap corruption under resume churn (issue 29).
    reactor_->Finish(status);
  }

  void ReadNext() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_) reactor_->StartRead(in_);
  }

 private:
  Reactor* reactor_;
  grpc::CallbackServerContext* context_;
  grpc::ByteBuffer* in_;
  bool first_write_done_ = false;  // writes are serialized by the outbox
  grpc::ByteBuffer out_;
  std::mutex mu_;
  bool finished_ = false;
};

}  // namespace streamd::server
