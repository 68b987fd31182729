// HealthMonitor: keeps grpc.health.v1 and the health gauges true to what the daemon can do.
//
// Two questions, answered apart so that an orchestrator restarts only what is broken:
//   liveness  = the backend can run steps (api::Engine::BackendHealth) and the server is not
//               stopping. Services "" (what a bare health check asks), "streamd.v1.Streamd"
//               and "liveness". NOT_SERVING here means: restart the process.
//   readiness = alive, and a default session would be admitted now (the KV pool is not
//               exhausted and no Open is waiting for blocks). Service "readiness".
//               NOT_SERVING here means: send new sessions elsewhere for now.
// The answer is re-read every `interval` on the monitor's thread, and at once by Check(). The
// moment the backend breaks is logged (critical, once) and counted in
// streamd_backend_failures_total; streamd_backend_healthy and streamd_ready follow the answers.
#pragma once

#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/api/session_api.h"
#include "server/metrics/streamd_metrics.h"

namespace streamd::server {

inline constexpr const char* kLivenessService = "liveness";
inline constexpr const char* kReadinessService = "readiness";

class HealthMonitor {
 public:
  // Everything must outlive the monitor; `metrics` may be null.
  HealthMonitor(grpc::HealthCheckServiceInterface& health, const api::Engine& engine,
                metrics::StreamdMetrics* metrics, std::chrono::milliseconds interval);
  ~HealthMonitor();  // Stop()
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  // Reads the answers now and publishes them.
  void Check();
  // Everything NOT_SERVING for good (the server drains and stops); the thread ends.
  void Stop();

 private:
  void Loop();

  grpc::HealthCheckServiceInterface& health_;
  const api::Engine& engine_;
  metrics::StreamdMetrics* const metrics_;
  const std::chrono::milliseconds interval_;

  std::mutex mu_;  // serializes Check and Stop
  std::condition_variable cv_;
  bool stopped_ = false;
  bool backend_broken_ = false;  // logged and counted once
  std::thread thread_;
};

}  // namespace streamd::server
