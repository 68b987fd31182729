// StreamdMetrics: every metric the daemon exposes, created in one Registry and held by
// reference for the hot path. docs/METRICS.md lists them with their vLLM counterparts.
//
// Who updates what (nothing here knows engine/ or gRPC; callers pass plain numbers):
//   - histograms and counters: recorded where the event happens (the stream handler, the
//     scheduler step), each a lock-free atomic update;
//   - session and KV gauges: pushed by their owner (SetSessions / SetKvBlocks), either after
//     each scheduler step or from a collect hook (registry.AddCollectHook) that copies one
//     consistent engine snapshot at every scrape;
//   - streamd_kv_usage_ratio and streamd_process_resident_memory_bytes: computed at scrape time.
//
// Sessions are one gauge family, streamd_sessions{state="active"|"idle"|"queued"}, so that
// sum(streamd_sessions) is every session the daemon knows of and the states never overlap.
//
// Histogram buckets are vLLM's for the metrics of the same meaning (vllm/v1/metrics/loggers.py),
// so dashboards and SLOs written for vLLM carry over; step duration has no vLLM counterpart and
// uses buckets of its own.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "server/metrics/registry.h"

namespace streamd::metrics {

// vllm:time_to_first_token_seconds.
inline constexpr std::array<double, 22> kTimeToFirstTokenBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
// vllm:inter_token_latency_seconds (and the deprecated vllm:time_per_output_token_seconds).
inline constexpr std::array<double, 19> kInterTokenLatencyBuckets = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
// vLLM's request_latency_buckets: vllm:e2e_request_latency_seconds and
// vllm:request_queue_time_seconds.
inline constexpr std::array<double, 21> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// vllm:iteration_tokens_total.
inline constexpr std::array<double, 13> kStepTokensBuckets = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
// streamd's own: a decode step takes ~1 ms on a GPU, tens of ms on a CPU; a long prefill
// chunk up to seconds.
inline constexpr std::array<double, 18> kStepDurationBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03,
    0.05,   0.075, 0.1,    0.25,  0.5,    1.0,  2.5,   5.0,  10.0};

// gRPC status codes, numbered as in grpc::StatusCode (and streamd::StatusCode).
inline constexpr int kNumGrpcCodes = 17;  // OK (0) .. UNAUTHENTICATED (16)
// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "UNKNOWN" for a number outside [0, 16].
std::string_view GrpcCodeName(int code);

struct StreamdMetrics {
  StreamdMetrics();
  StreamdMetrics(const StreamdMetrics&) = delete;
  StreamdMetrics& operator=(const StreamdMetrics&) = delete;

  // Counts one error returned to a client under its gRPC code name (label `code`). OK (0) is
  // not an error and is ignored; numbers outside [0, 16] count as UNKNOWN. Lock-free.
  void RecordError(int grpc_code);
  // Sets streamd_sessions{state=...}.
  void SetSessions(int64_t active, int64_t idle, int64_t queued);
  // Sets the block and byte gauges of the KV pool; `block_bytes`: one block, every layer's K
  // and V. Capacity is used + free.
  void SetKvBlocks(int64_t used, int64_t free_blocks, int64_t block_bytes);

  // Declared first: every reference below points into it. Serve it with MetricsHttpServer;
  // more families (and collect hooks) may be added to it.
  Registry registry;

  // ---- Histograms (seconds unless the name says otherwise) --------------------------------
  Histogram& time_to_first_token;     // Generate received -> first token sent
  Histogram& inter_token_latency;     // between consecutive tokens of one generation
  Histogram& e2e_generation_latency;  // Generate received -> generation finished
  Histogram& queue_time;              // Open received -> session admitted (blocks reserved)
  Histogram& step_duration;           // one scheduler step: plan, forward pass, sampling
  Histogram& step_tokens;             // tokens in one step's forward pass (decode + prefill)

  // ---- Counters ---------------------------------------------------------------------------
  Counter& prompt_tokens;      // input tokens prefilled into caches
  Counter& generation_tokens;  // tokens sampled and delivered
  Counter& evicted_tokens;     // tokens dropped from windows (sinks are never evicted)
  Counter& sessions_opened;
  Counter& sessions_closed;
  Counter& sessions_rejected;  // opens refused: admission timeout, bad options, limits
  CounterFamily& errors;       // label `code`; every non-OK code pre-created at 0

  // ---- Gauges -----------------------------------------------------------------------------
  GaugeFamily& sessions;   // label `state`
  Gauge& sessions_active;  // generating
  Gauge& sessions_idle;    // open, admitted, not generating
  Gauge& sessions_queued;  // waiting for admission
  Gauge& kv_used_blocks;
  Gauge& kv_free_blocks;
  Gauge& kv_capacity_blocks;
  Gauge& kv_used_bytes;
  Gauge& kv_capacity_bytes;
  Gauge& kv_usage_ratio;           // callback: used / capacity, 0 when capacity is 0
  Gauge& process_resident_memory;  // callback: /proc/self/statm

 private:
  std::array<Counter*, kNumGrpcCodes> error_by_code_{};  // [0] (OK) stays null
};

}  // namespace streamd::metrics
