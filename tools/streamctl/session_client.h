// SessionClient: a blocking client of one streamd Session stream, for streamctl and the
// end-to-end tests. One thread drives it (Open, Append, Generate, Truncate, Fork, Close);
// Cancel() may be called from any other thread while Generate runs (Ctrl-C).
//
// Error messages on the stream come back as Status (code and message as sent); the end of the
// stream comes back as the gRPC status it ended with.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "engine/util/status.h"
#include "streamd/v1/streamd.grpc.pb.h"

namespace streamd::streamctl {

// grpc::Status -> Status, the client-side inverse of the server's mapping.
Status FromGrpc(const grpc::Status& status);

class SessionClient {
 public:
  // `session_id`: the session this stream will Resume, sent as its session-affinity key
  // (channel.h) so that a proxy routes the stream to the replica that holds it; empty to Open.
  explicit SessionClient(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& session_id = "");
  ~SessionClient();

  StatusOr<v1::Opened> Open(const v1::Open& open);
  // `session_id`: 32 hex digits, as Opened.session_id (the server checks it).
  StatusOr<v1::Opened> Resume(const std::string& session_id);
  // Waits for the append's CacheState.
  StatusOr<v1::CacheState> Append(const v1::Append& append);
  // Streams `on_delta` for each TokenDelta until the GenerationDone, which is returned.
  StatusOr<v1::GenerationDone> Generate(const v1::Generate& generate,
                                        const std::function<void(const v1::TokenDelta&)>& on_delta);
  // Truncate: waits for its CacheState (the context after the truncation).
  StatusOr<v1::CacheState> Truncate(const v1::Truncate& truncate);
  // Fork: waits for the Forked that names the new (detached) session.
  StatusOr<v1::Forked> Fork(const v1::Fork& fork);
  // Thread-safe: asks the server to cancel the running generation.
  void Cancel();
  // Closes the session and ends the stream; returns the stream's final status.
  Status Close();
  // Ends the stream without closing the session (it stays resumable); the final status.
  Status Detach();

  grpc::ClientContext& context() { return context_; }

 private:
  bool Write(const v1::ClientMessage& m);
  // The next message; the stream's final status when it has ended.
  StatusOr<v1::ServerMessage> Read();
  Status Finish();

  std::unique_ptr<v1::Streamd::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> stream_;
  std::mutex write_mu_;
  bool writes_done_ = false;
  bool finished_ = false;
  grpc::Status final_;
};

}  // namespace streamd::streamctl
