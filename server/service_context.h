// What every part of the gRPC service shares: the engine's session API, the blocking-work
// thread, the options and the model's facts, who calls (the authenticator) and the metrics.
// Owned by GrpcServer; outlives every stream. No engine internals: a stream drives its session
// through api::Session only.
#pragma once

#include <atomic>
#include <cstdint>

#include "engine/api/session_api.h"
#include "engine/util/task_runner.h"
#include "server/authenticator.h"
#include "server/metrics/streamd_metrics.h"
#include "server/proto_convert.h"
#include "server/server_options.h"
#include "streamd/v1/streamd.pb.h"

namespace streamd::server {

struct ServiceContext {
  // Blocking snapshot work of RPCs (export, import): captures, encodes and file I/O, off the
  // reactions and off the engine's threads.
  TaskRunner& io;
  const ServerOptions& options;
  // The engine's session API (set before the first call arrives).
  api::Engine* api = nullptr;
  ModelLimits model;
  v1::ModelInfo model_info;
  // Shutdown began: no new sessions or generations. The engine's session API holds the one flag
  // (api::Engine::Drain sets it, and the API refuses them too); the handlers ask it here, to
  // answer before they call the engine.
  bool draining() const { return api != nullptr && api->draining(); }
  metrics::StreamdMetrics* metrics = nullptr;  // optional: request-path metrics
  // Who calls (API keys); null: no authentication, every caller the anonymous admin.
  const Authenticator* auth = nullptr;
  // ExportSession and ImportSession calls in flight (at most options.limits.max_transfers).
  std::atomic<int32_t> transfers{0};
};

}  // namespace streamd::server
