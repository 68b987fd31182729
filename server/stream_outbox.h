// StreamOutbox: the write side of one Session stream. gRPC's callback API allows one write in
// flight per stream; everything produced meanwhile waits here.
//
// Producers: the engine's scheduler thread (tokens, through the generation's EventSink, which
// must never block), the reactor's callbacks and the service (control messages). Push never
// blocks and never calls into the engine.
//
// Bound. Tokens of one generation queued behind the write in flight are coalesced into one
// TokenDelta, and the undelivered tokens are counted: at max_queued_tokens PushToken refuses
// with kFull, and the caller applies the slow-client policy (cancel the generation; see
// session_stream.h). Control messages (Opened, GenerationDone, CacheState, Error) are a few per
// request; past kMaxQueuedMessages unwritten messages (a client that sends and never reads)
// the queue is dropped and the call ends with RESOURCE_EXHAUSTED.
//
// Lock order: the outbox mutex is a leaf; StartWrite/Finish are called without it held.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "streamd/v1/streamd.pb.h"

namespace streamd::server {

class StreamOutbox {
 public:
  // The reactor: starts the write of one message (one at a time), ends the call.
  class Writer {
   public:
    virtual ~Writer() = default;
    virtual void StartWrite(const v1::ServerMessage* message) = 0;
    virtual void Finish(const grpc::Status& status) = 0;
  };

  enum class PushResult { kQueued, kFull, kClosed };
  static constexpr size_t kMaxQueuedMessages = 1024;

  StreamOutbox(Writer* writer, int32_t max_queued_tokens)
      : writer_(writer), max_queued_tokens_(max_queued_tokens) {}

  // One generated token (and the text it completes).
  PushResult PushToken(const std::string& request_id, int32_t token, const std::string& text,
                       int64_t index);
  // A control message; false once the stream is finishing or gone.
  bool Push(v1::ServerMessage message);
  // Ends the call with `status` after everything queued has been written; later pushes are
  // dropped. The first status wins.
  void Finish(const grpc::Status& status);
  // Ends the call as soon as the write in flight (if any) completes, dropping the queue.
  void Abort(const grpc::Status& status);
  // The reactor's OnWriteDone. A failed write means the client is gone: the queue is dropped
  // and the call is finished with CANCELLED unless a status was already chosen.
  void OnWriteDone(bool ok);
  // The reactor's OnDone: the writer no longer exists.
  void Detach();

  int64_t queued_tokens() const;
  bool closed() const;  // finishing, finished or detached

 private:
  // Starts the next write or the finish if nothing is in flight. Unlocks `lock`.
  void Pump(std::unique_lock<std::mutex>& lock);

  Writer* writer_;
  const int32_t max_queued_tokens_;
  mutable std::mutex mu_;
  std::deque<v1::ServerMessage> queue_;
  v1::ServerMessage current_;  // the write in flight; stable until OnWriteDone
  bool writing_ = false;
  int64_t queued_tokens_ = 0;
  std::optional<grpc::Status> finish_;
  bool finished_ = false;  // Writer::Finish was called
  bool detached_ = false;
};

}  // namespace streamd::server
