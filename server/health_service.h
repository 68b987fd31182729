// HealthService: the standard grpc.health.v1.Health service (Kubernetes probes, load
// balancers, `streamctl health`), served by streamd itself instead of gRPC's built-in one so
// that it can be closed to callers without an API key (auth.health_requires_key, KeyGate):
// gRPC C++ 1.51 has no way to refuse a call in front of the built-in service (a server
// interceptor cannot end a call; an AuthMetadataProcessor needs TLS and sees every service).
//
// It answers as the built-in service does (grpc/health/v1/health.proto):
//   Check  the status of a service name, NOT_FOUND for a name never set;
//   Watch  the status now (SERVICE_UNKNOWN for a name never set) and again on every change;
//          only the latest status is sent when several changes pass during one write.
// "" is SERVING from construction until HealthMonitor takes over (what the built-in service
// reports once the server starts). Shutdown() turns every name NOT_SERVING for good; later
// updates are ignored. Writes and Finish are started without the mutex held (a leaf lock).
#pragma once

#include <grpcpp/health_check_service_interface.h>

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/key_gate.h"

namespace streamd::server {

class HealthService final : public grpc::health::v1::Health::CallbackService,
                            public grpc::HealthCheckServiceInterface {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  explicit HealthService(KeyGate gate = {});
  ~HealthService() override;  // the server has stopped: no call is left
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // grpc::HealthCheckServiceInterface: what HealthMonitor drives.
  void SetServingStatus(const std::string& service_name, bool serving) override;
  void SetServingStatus(bool serving) override;  // every name set so far
  void Shutdown() override;

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

  // Open Watch streams (tests: a stream that ends is gone from here).
  size_t watchers() const;

 private:
  class Watcher;
  // Sets `name` to `status` and wakes its watchers. Unlocks `lock`.
  void Set(std::unique_lock<std::mutex>& lock, const std::string& name, ServingStatus status);
  ServingStatus StatusOf(const std::string& name) const;  // SERVICE_UNKNOWN if never set; mu_
  void Remove(Watcher* watcher);

  const KeyGate gate_;
  mutable std::mutex mu_;
  std::map<std::string, ServingStatus> statuses_;  // guarded by mu_
  std::set<Watcher*> watchers_;                    // guarded by mu_
  bool shut_down_ = false;                         // guarded by mu_
};

}  // namespace streamd::server
