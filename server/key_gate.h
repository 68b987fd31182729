// KeyGate: whether a call to a service other than streamd.v1.Streamd needs an API key. Health
// (auth.health_requires_key) and reflection (auth.reflection_requires_key) are open by default:
// probes and load balancers hold no key, and reflection only describes the public .proto. An
// operator may close either: then a call without a valid key is refused UNAUTHENTICATED before
// anything is answered, counted in streamd_auth_failures_total{reason} (by the Authenticator)
// and streamd_errors_total{code}, exactly as a refused streamd.v1 call.
#pragma once

#include <grpcpp/server_context.h>

#include "engine/util/status.h"
#include "server/authenticator.h"
#include "server/metrics/streamd_metrics.h"

namespace streamd::server {

class KeyGate {
 public:
  // Open: every call passes.
  KeyGate() = default;
  // Closed: a call passes with a key `auth` accepts. Both must outlive the gate; `metrics` may
  // be null.
  KeyGate(const Authenticator* auth, metrics::StreamdMetrics* metrics)
      : auth_(auth), metrics_(metrics) {}

  bool open() const { return auth_ == nullptr; }
  // OK, or UNAUTHENTICATED saying what is wrong with the key (never which keys exist).
  Status Admit(const grpc::ServerContextBase& context) const {
    if (auth_ == nullptr) return OkStatus();
    StatusOr<Caller> caller = auth_->Authenticate(context);
    if (caller.ok()) return OkStatus();
    if (metrics_ != nullptr) metrics_->RecordError(static_cast<int>(caller.status().code()));
    return caller.status();
  }

 private:
  const Authenticator* auth_ = nullptr;
  metrics::StreamdMetrics* metrics_ = nullptr;
};

}  // namespace streamd::server
