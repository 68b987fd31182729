// StreamdService: the streamd.v1.Streamd gRPC service (callback API). Session streams get one
// SessionReactor each; the unary calls read the registry and the engine directly. It also keeps
// the set of live streams so that shutdown can drain them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "server/service_context.h"
#include "server/session_stream.h"
#include "streamd/v1/streamd.grpc.pb.h"

namespace streamd::server {

class StreamdService final : public v1::Streamd::CallbackService {
 public:
  explicit StreamdService(ServiceContext& ctx) : ctx_(ctx) {}

  grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest* request,
                                         v1::CloseSessionResponse* response) override;
  grpc::ServerWriteReactor<v1::SnapshotChunk>* ExportSession(
      grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) override;
  grpc::ServerReadReactor<v1::SnapshotChunk>* ImportSession(
      grpc::CallbackServerContext* context, v1::ImportSessionResponse* response) override;

  // Shutdown, in order: Drain() (no new sessions or generations; each stream ends after its
  // running generation), WaitForStreams(deadline), CancelGenerations(why), WaitForStreams.
  void Drain();
  void CancelGenerations(const Status& why);
  // True when every stream has ended before `deadline`.
  bool WaitForStreams(std::chrono::steady_clock::time_point deadline);
  size_t live_streams() const;

 private:
  std::vector<std::shared_ptr<SessionStream>> Streams() const;

  ServiceContext& ctx_;
  mutable std::mutex mu_;
  std::condition_variable streams_cv_;
  std::map<SessionStream*, std::weak_ptr<SessionStream>> streams_;
};

}  // namespace streamd::server
