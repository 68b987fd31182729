#include "server/metrics/streamd_metrics.h"

#include <string>
#include <vector>

#include "server/metrics/process_memory.h"

namespace streamd::metrics {
namespace {

constexpr std::array<std::string_view, kNumGrpcCodes> kGrpcCodeNames = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};
constexpr int kUnknownCode = 2;

template <size_t N>
std::vector<double> Bounds(const std::array<double, N>& buckets) {
  return std::vector<double>(buckets.begin(), buckets.end());
}

}  // namespace

std::string_view GrpcCodeName(int code) {
  if (code < 0 || code >= kNumGrpcCodes) return kGrpcCodeNames[kUnknownCode];
  return kGrpcCodeNames[static_cast<size_t>(code)];
}

StreamdMetrics::StreamdMetrics()
    : time_to_first_token(
          registry
              .AddHistogram("streamd_time_to_first_token_seconds",
                            "Time from a Generate request's arrival to its first output token, "
                            "in seconds (prefill of the pending input included).",
                            Bounds(kTimeToFirstTokenBuckets))
              .Get()),
      inter_token_latency(
          registry
              .AddHistogram("streamd_inter_token_latency_seconds",
                            "Time between two consecutive output tokens of one generation, in "
                            "seconds.",
                            Bounds(kInterTokenLatencyBuckets))
              .Get()),
      e2e_generation_latency(
          registry
              .AddHistogram("streamd_e2e_generation_latency_seconds",
                            "Time from a Generate request's arrival to the end of its "
                            "generation, in seconds.",
                            Bounds(kRequestLatencyBuckets))
              .Get()),
      queue_time(registry
                     .AddHistogram("streamd_queue_time_seconds",
                                   "Time a new session waited for admission (its KV block "
                                   "bound to fit in the pool), in seconds.",
                                   Bounds(kRequestLatencyBuckets))
                     .Get()),
      step_duration(registry
                        .AddHistogram("streamd_step_duration_seconds",
                                      "Wall time of one engine step (plan, forward pass, "
                                      "sampling), in seconds.",
                                      Bounds(kStepDurationBuckets))
                        .Get()),
      step_tokens(registry
                      .AddHistogram("streamd_step_tokens",
                                    "Tokens in one engine step's forward pass (decode tokens "
                                    "plus prefill chunk tokens).",
                                    Bounds(kStepTokensBuckets))
                      .Get()),
      prompt_tokens(registry
                        .AddCounter("streamd_prompt_tokens_total",
                                    "Input tokens prefilled into session KV caches.")
                        .Get()),
      generation_tokens(registry
                            .AddCounter("streamd_generation_tokens_total",
                                        "Output tokens generated and delivered.")
                            .Get()),
      evicted_tokens(registry
                         .AddCounter("streamd_evicted_tokens_total",
                                     "Tokens evicted from session KV cache windows (attention "
                                     "sinks are never evicted).")
                         .Get()),
      sessions_opened(
          registry.AddCounter("streamd_sessions_opened_total", "Sessions admitted.").Get()),
      sessions_closed(registry
                          .AddCounter("streamd_sessions_closed_total",
                                      "Sessions closed, by the client or on an error.")
                          .Get()),
      sessions_rejected(registry
                            .AddCounter("streamd_sessions_rejected_total",
                                        "Session opens refused (admission timeout, invalid "
                                        "options, limits).")
                            .Get()),
      errors(registry.AddCounter("streamd_errors_total",
                                 "Errors returned to clients, by gRPC status code name.",
                                 {"code"})),
      sessions(registry.AddGauge("streamd_sessions",
                                 "Sessions by state: active (generating), idle (open, not "
                                 "generating), queued (waiting for admission).",
                                 {"state"})),
      sessions_active(sessions.WithLabels({"active"})),
      sessions_idle(sessions.WithLabels({"idle"})),
      sessions_queued(sessions.WithLabels({"queued"})),
      kv_used_blocks(
          registry.AddGauge("streamd_kv_used_blocks", "KV cache blocks held by sessions.").Get()),
      kv_free_blocks(
          registry.AddGauge("streamd_kv_free_blocks", "KV cache blocks free in the pool.").Get()),
      kv_capacity_blocks(registry
                             .AddGauge("streamd_kv_capacity_blocks",
                                       "KV cache blocks in the pool (used plus free).")
                             .Get()),
      kv_used_bytes(
          registry
              .AddGauge("streamd_kv_used_bytes", "Bytes of the KV cache blocks held by sessions.")
              .Get()),
      kv_capacity_bytes(registry
                            .AddGauge("streamd_kv_capacity_bytes",
                                      "Bytes of the KV cache pool (allocated at start-up).")
                            .Get()),
      kv_usage_ratio(registry.AddCallbackGauge(
          "streamd_kv_usage_ratio", "Fraction of KV cache blocks in use (0 to 1).",
          [this] {
            const double capacity = kv_capacity_blocks.Value();
            return capacity > 0 ? kv_used_blocks.Value() / capacity : 0.0;
          })),
      process_resident_memory(registry.AddCallbackGauge(
          "streamd_process_resident_memory_bytes",
          "Resident memory of the daemon process in bytes (/proc/self/statm).",
          [] { return ResidentMemoryBytes(); })) {
  for (int code = 1; code < kNumGrpcCodes; ++code) {
    error_by_code_[static_cast<size_t>(code)] =
        &errors.WithLabels({std::string(GrpcCodeName(code))});
  }
}

void StreamdMetrics::RecordError(int grpc_code) {
  if (grpc_code == 0) return;
  if (grpc_code < 0 || grpc_code >= kNumGrpcCodes) grpc_code = kUnknownCode;
  error_by_code_[static_cast<size_t>(grpc_code)]->Inc();
}

void StreamdMetrics::SetSessions(int64_t active, int64_t idle, int64_t queued) {
  sessions_active.Set(static_cast<double>(active));
  sessions_idle.Set(static_cast<double>(idle));
  sessions_queued.Set(static_cast<double>(queued));
}

void StreamdMetrics::SetKvBlocks(int64_t used, int64_t free_blocks, int64_t block_bytes) {
  const double capacity = static_cast<double>(used + free_blocks);
  const double bytes = static_cast<double>(block_bytes);
  kv_used_blocks.Set(static_cast<double>(used));
  kv_free_blocks.Set(static_cast<double>(free_blocks));
  kv_capacity_blocks.Set(capacity);
  kv_used_bytes.Set(static_cast<double>(used) * bytes);
  kv_capacity_bytes.Set(capacity * bytes);
}

}  // namespace streamd::metrics
