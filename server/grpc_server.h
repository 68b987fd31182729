// GrpcServer: the gRPC side of the daemon. Builds the server (streamd.v1.Streamd, the standard
// grpc.health.v1.Health service and server reflection, both served by streamd so that they can
// require a key: health_service.h, reflection_service.h), binds the listening address (port 0
// picks a free port) and runs the graceful shutdown.
//
// Shutdown (Shutdown()):
//   1. health reports NOT_SERVING for "" and "streamd.v1.Streamd";
//   2. drain: Open/Resume/Generate answer UNAVAILABLE; every stream ends (UNAVAILABLE "streamd
//      is shutting down") as soon as its running generation has finished; the port stays
//      open meanwhile so that health checks see NOT_SERVING rather than a refused connection;
//   3. after the grace period, running generations are cancelled (GenerationDone CANCELLED
//      with error UNAVAILABLE naming the grace period) and their streams end;
//   4. every resident session that changed since its last snapshot is written (with a snapshot
//      directory; at most persistence.flush_timeout);
//   5. the server stops accepting calls and cancels whatever is left.
// Start-up (api::EngineHost::Start) with a snapshot directory: every snapshot in it is
// registered as an offloaded session before the port opens, and (restore_on_start) read back
// into memory in the background while the daemon already serves.
#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "engine/api/engine_host.h"
#include "server/health_monitor.h"
#include "server/health_service.h"
#include "server/metrics/streamd_metrics.h"
#include "server/reflection_service.h"
#include "server/server_options.h"
#include "server/service_context.h"
#include "server/streamd_service.h"

namespace streamd::server {

class GrpcServer {
 public:
  // `host` (not started yet: Start starts it) must outlive the server; `metrics` (optional)
  // too.
  static StatusOr<std::unique_ptr<GrpcServer>> Start(api::EngineHost& host,
                                                     const ServerOptions& options,
                                                     metrics::StreamdMetrics* metrics = nullptr);
  ~GrpcServer();  // Shutdown() if not done
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const { return port_; }
  // What every transport shares (the HTTP front door drives sessions through it too).
  ServiceContext& context() { return ctx_; }
  // The engine's session API (the HTTP front door drives sessions through it).
  api::Engine& sessions() { return host_.sessions(); }
  const Authenticator* authenticator() const { return auth_.get(); }
  // Graceful shutdown as described above; idempotent.
  void Shutdown();

 private:
  GrpcServer(api::EngineHost& host, const ServerOptions& options);

  api::EngineHost& host_;
  ServerOptions options_;
  TaskRunner io_tasks_;
  std::unique_ptr<Authenticator> auth_;
  ServiceContext ctx_;
  StreamdService service_;
  // Registered with server_, so they outlive it.
  std::unique_ptr<HealthService> health_service_;
  std::unique_ptr<ReflectionService> reflection_;
  std::unique_ptr<grpc::Server> server_;
  // Last: it reads the host and the server's health service until it stops.
  std::unique_ptr<HealthMonitor> health_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace streamd::server
