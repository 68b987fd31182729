// StreamdService: the streamd.v1.Streamd gRPC service (callback API). Session streams get one
// SessionReactor each (registered raw: the reactor parses each message itself, see
// session_reactor.h); the unary calls go through the engine's session API (ctx.api). It keeps the
// set of live streams, so that shutdown can drain them and its watchdog can end streams that
// never open a session (server.open_timeout).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "server/service_context.h"
#include "server/session_stream.h"
#include "streamd/v1/streamd.grpc.pb.h"

namespace streamd::server {

// Who is on the other end of a call, for the per-client caps: "peer ADDRESS" (without the
// port) while there is no authentication.
std::string ClientOf(const grpc::CallbackServerContext& context);

// Every method typed, except Session: raw bytes (the order follows the .proto's).
using StreamdServiceBase = v1::Streamd::WithRawCallbackMethod_Session<
    v1::Streamd::WithCallbackMethod_GetModelInfo<v1::Streamd::WithCallbackMethod_ListSessions<
        v1::Streamd::WithCallbackMethod_GetSession<v1::Streamd::WithCallbackMethod_CloseSession<
            v1::Streamd::WithCallbackMethod_ExportSession<
                v1::Streamd::WithCallbackMethod_ImportSession<v1::Streamd::Service>>>>>>>;

class StreamdService final : public StreamdServiceBase {
 public:
  explicit StreamdService(ServiceContext& ctx);
  ~StreamdService() override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Session(
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
  // Who calls: UNAUTHENTICATED without a valid key (when there are keys).
  StatusOr<Caller> CallerOf(const grpc::CallbackServerContext& context) const;
  // Ends streams that stay without a session for server.open_timeout.
  void WatchdogLoop();

  ServiceContext& ctx_;
  mutable std::mutex mu_;
  std::condition_variable streams_cv_;
  std::map<SessionStream*, std::weak_ptr<SessionStream>> streams_;
  bool stopping_ = false;
  std::thread watchdog_;  // last: starts after the members it uses
};

}  // namespace streamd::server
