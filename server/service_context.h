// What every part of the gRPC service shares: the engine, the session registry, the chat
// formatter, the task thread, the options and the model's facts. Owned by GrpcServer; outlives
// every stream.
#pragma once

#include <atomic>

#include "engine/api/streamd_engine.h"
#include "engine/sessions/admission_queue.h"
#include "engine/sessions/chat_formatter.h"
#include "engine/sessions/session_driver.h"
#include "engine/sessions/session_registry.h"
#include "engine/sessions/token_budget.h"
#include "engine/util/task_runner.h"
#include "server/authenticator.h"
#include "server/metrics/streamd_metrics.h"
#include "server/proto_convert.h"
#include "server/server_options.h"
#include "streamd/v1/streamd.pb.h"

namespace streamd::server {

struct ServiceContext {
  Engine& engine;
  SessionRegistry& registry;
  SessionDriver& driver;      // what an attached session says and hears
  AdmissionQueue& admission;  // Opens waiting for KV blocks
  const ChatFormatter& chat;
  TaskRunner& tasks;
  // Blocking snapshot work of RPCs (export, import): captures, encodes and file I/O, off the
  // reactions and off `tasks`.
  TaskRunner& io;
  const ServerOptions& options;
  ModelLimits model;
  v1::ModelInfo model_info;
  std::atomic<bool> draining{false};           // shutdown began: no new sessions or generations
  metrics::StreamdMetrics* metrics = nullptr;  // optional: request-path metrics
  // Who calls (API keys); null: no authentication, every caller the anonymous admin.
  const Authenticator* auth = nullptr;
  TokenBudget* budget = nullptr;  // tenants' tokens_per_second; with auth
  // What snapshots are stamped with and checked against; null when the engine gave none.
  const SnapshotContext* snapshots = nullptr;
  // ExportSession and ImportSession calls in flight (at most options.limits.max_transfers).
  std::atomic<int32_t> transfers{0};
};

}  // namespace streamd::server
