#include "server/health_monitor.h"

#include <spdlog/spdlog.h>

namespace streamd::server {
namespace {

constexpr const char* kServiceName = "streamd.v1.Streamd";

}  // namespace

HealthMonitor::HealthMonitor(grpc::HealthCheckServiceInterface& health, const api::Engine& engine,
                             metrics::StreamdMetrics* metrics, std::chrono::milliseconds interval)
    : health_(health), engine_(engine), metrics_(metrics), interval_(interval) {
  Check();
  thread_ = std::thread([this] { Loop(); });
}

HealthMonitor::~HealthMonitor() { Stop(); }

void HealthMonitor::Check() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return;
  const Status backend = engine_.BackendHealth();
  if (!backend.ok() && !backend_broken_) {
    backend_broken_ = true;
    spdlog::critical(
        "backend unhealthy: {}; gRPC health is NOT_SERVING: restart the process "
        "(sessions with snapshots resume after it)",
        backend.message());
    if (metrics_ != nullptr) metrics_->backend_failures.Increment();
  }
  const bool live = backend.ok();
  const bool ready = live && engine_.Ready();
  health_.SetServingStatus("", live);
  health_.SetServingStatus(kServiceName, live);
  health_.SetServingStatus(kLivenessService, live);
  health_.SetServingStatus(kReadinessService, ready);
  if (metrics_ != nullptr) {
    metrics_->backend_healthy.Set(live ? 1 : 0);
    metrics_->ready.Set(ready ? 1 : 0);
  }
}

void HealthMonitor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      stopped_ = true;
      health_.SetServingStatus(false);  // every service
      if (metrics_ != nullptr) metrics_->ready.Set(0);
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HealthMonitor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    cv_.wait_for(lock, interval_, [&] { return stopped_; });
    if (stopped_) return;
    lock.unlock();
    Check();
    lock.lock();
  }
}

}  // namespace streamd::server
