// GrpcServer: the gRPC side of the daemon. Builds the server (streamd.v1.Streamd, the standard
// grpc.health.v1.Health service, server reflection), binds the listening address (port 0
// picks a free port) and runs the graceful shutdown.
//
// Shutdown (Shutdown()):
//   1. health reports NOT_SERVING for "" and "streamd.v1.Streamd";
//   2. drain: Open/Resume/Generate answer UNAVAILABLE; every stream ends (UNAVAILABLE "streamd
//      is shutting down") as soon as its running generation has finished; the port stays
//      open meanwhile so that health checks see NOT_SERVING rather than a refused connection;
//   3. after the grace period, running generations are cancelled (GenerationDone CANCELLED
//      with error UNAVAILABLE naming the grace period) and their streams end;
//   4. the server stops accepting calls and cancels whatever is left.
#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "engine/serving/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "server/server_options.h"
#include "server/service_context.h"
#include "server/streamd_service.h"

namespace streamd::server {

class GrpcServer {
 public:
  // `engine` and `chat` must outlive the server.
  // `metrics` (optional) must outlive the server too.
  static StatusOr<std::unique_ptr<GrpcServer>> Start(Engine& engine,
                                                     const tokenizer::ChatTemplate& chat,
                                                     const ServerOptions& options,
                                                     metrics::StreamdMetrics* metrics = nullptr);
  ~GrpcServer();  // Shutdown() if not done
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const { return port_; }
  // Graceful shutdown as described above; idempotent.
  void Shutdown();

 private:
  GrpcServer(Engine& engine, const tokenizer::ChatTemplate& chat, const ServerOptions& options);

  ServerOptions options_;
  SessionRegistry registry_;
  ChatFormatter chat_;
  TaskRunner tasks_;
  ServiceContext ctx_;
  StreamdService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

// Model facts for Opened and GetModelInfo.
v1::ModelInfo MakeModelInfo(const Engine& engine, const ChatFormatter& chat);

}  // namespace streamd::server
