// A streaming call refused before it starts (no key, not an admin): the reactor finishes at
// once with the refusal and sends nothing else. Shared by every service that gates calls.
#pragma once

#include "engine/util/status.h"
#include "server/grpc_status.h"
#include "server/metrics/streamd_metrics.h"

namespace streamd::server {

template <typename Reactor>
class RefusedReactor final : public Reactor {
 public:
  explicit RefusedReactor(const Status& why) { this->Finish(ToGrpcStatus(why)); }
  void OnDone() override { delete this; }
};

// The refusal as a reactor, counted in streamd_errors_total when `metrics` is given.
template <typename Reactor>
Reactor* Refuse(const Status& why, metrics::StreamdMetrics* metrics) {
  if (metrics != nullptr) metrics->RecordError(static_cast<int>(why.code()));
  return new RefusedReactor<Reactor>(why);
}

}  // namespace streamd::server
