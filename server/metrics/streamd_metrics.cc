#include "server/metrics/streamd_metrics.h"

#include <prometheus/text_serializer.h>

#include <string>
#include <vector>

#include "server/metrics/families.h"
#include "server/metrics/process_memory.h"

namespace streamd::metrics {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::Registry;

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

constexpr std::array<std::string_view, kNumRequestKinds> kRequestKindNames = {
    "open",           "resume",         "append",        "generate",    "cancel",
    "close",          "get_model_info", "list_sessions", "get_session", "close_session",
    "export_session", "import_session", "truncate",      "fork",
};
constexpr std::array<std::string_view, kNumFinished> kFinishedNames = {"stop", "length", "abort",
                                                                       "error"};

}  // namespace

std::string_view GrpcCodeName(int code) {
  if (code < 0 || code >= kNumGrpcCodes) return kGrpcCodeNames[kUnknownCode];
  return kGrpcCodeNames[static_cast<size_t>(code)];
}

std::string_view RequestKindName(RequestKind kind) {
  return kRequestKindNames[static_cast<size_t>(kind)];
}

std::string_view FinishedName(Finished f) { return kFinishedNames[static_cast<size_t>(f)]; }

StreamdMetrics::StreamdMetrics()
    : registry(std::make_shared<Registry>()),
      source(std::make_shared<ScrapeSource>(registry)),
      time_to_first_token(OneHistogram(*registry, "streamd_time_to_first_token_seconds",
                                       "Time from a Generate request's arrival to its first "
                                       "output token, in seconds (prefill of the pending input "
                                       "included).",
                                       kTimeToFirstTokenBuckets)),
      inter_token_latency(OneHistogram(*registry, "streamd_inter_token_latency_seconds",
                                       "Time between two consecutive output tokens of one "
                                       "generation, in seconds.",
                                       kInterTokenLatencyBuckets)),
      e2e_generation_latency(OneHistogram(*registry, "streamd_e2e_generation_latency_seconds",
                                          "Time from a Generate request's arrival to the end of "
                                          "its generation, in seconds.",
                                          kRequestLatencyBuckets)),
      queue_time(OneHistogram(*registry, "streamd_queue_time_seconds",
                              "Time a new session waited for admission (its KV block bound to "
                              "fit in the pool), in seconds.",
                              kRequestLatencyBuckets)),
      prefill_time(OneHistogram(*registry, "streamd_request_prefill_time_seconds",
                                "Time from a Generate request's arrival to its first token, in "
                                "seconds: the prefill of its pending input and its first step.",
                                kRequestLatencyBuckets)),
      decode_time(OneHistogram(*registry, "streamd_request_decode_time_seconds",
                               "Time from a generation's first token to its end, in seconds.",
                               kRequestLatencyBuckets)),
      request_prompt_tokens(OneHistogram(*registry, "streamd_request_prompt_tokens",
                                         "Input tokens prefilled for one generation (pending "
                                         "when its Generate arrived).",
                                         kRequestTokensBuckets)),
      request_generation_tokens(OneHistogram(*registry, "streamd_request_generation_tokens",
                                             "Output tokens of one generation.",
                                             kRequestTokensBuckets)),
      step_duration(OneHistogram(*registry, "streamd_step_duration_seconds",
                                 "Wall time of one engine step (plan, forward pass, sampling), "
                                 "in seconds.",
                                 kStepDurationBuckets)),
      step_tokens(OneHistogram(*registry, "streamd_step_tokens",
                               "Tokens in one engine step's forward pass (decode tokens plus "
                               "prefill chunk tokens).",
                               kStepTokensBuckets)),
      prompt_tokens(
          OneCounter(*registry, "streamd_prompt_tokens_total",
                     "Input tokens clients appended to session contexts (prompt tokens).")),
      generation_tokens(OneCounter(*registry, "streamd_generation_tokens_total",
                                   "Output tokens generated and delivered.")),
      evicted_tokens(OneCounter(*registry, "streamd_evicted_tokens_total",
                                "Tokens evicted from session KV cache windows (attention sinks "
                                "are never evicted).")),
      preemptions(OneCounter(*registry, "streamd_preemptions_total",
                             "Sessions preempted to free KV blocks: always 0, admission "
                             "reserves each session's worst case.")),
      sessions_opened(OneCounter(*registry, "streamd_sessions_opened_total", "Sessions admitted.")),
      sessions_closed(OneCounter(*registry, "streamd_sessions_closed_total",
                                 "Sessions closed, by the client or on an error.")),
      sessions_rejected(OneCounter(*registry, "streamd_sessions_rejected_total",
                                   "Session opens refused (admission timeout, invalid options, "
                                   "limits).")),
      errors(BuildCounter()
                 .Name("streamd_errors_total")
                 .Help("Errors returned to clients, by gRPC status code name.")
                 .Register(*registry)),
      requests(BuildCounter()
                   .Name("streamd_requests_total")
                   .Help("Client requests handled: RPCs and Session stream messages, by kind.")
                   .Register(*registry)),
      request_success(BuildCounter()
                          .Name("streamd_request_success_total")
                          .Help("Generations finished, by reason (stop, length, abort, error).")
                          .Register(*registry)),
      http_requests(BuildCounter()
                        .Name("streamd_http_requests_total")
                        .Help("Answers of the OpenAI-compatible HTTP API, by route and HTTP "
                              "status.")
                        .Register(*registry)),
      backend_failures(OneCounter(*registry, "streamd_backend_failures_total",
                                  "Backend faults after which it could no longer run a step "
                                  "(a sticky device error, a failed allocation).")),
      sessions(BuildGauge()
                   .Name("streamd_sessions")
                   .Help("Sessions by state: active (generating), idle (open, not generating), "
                         "queued (waiting for admission).")
                   .Register(*registry)),
      sessions_active(sessions.Add({{"state", "active"}})),
      sessions_idle(sessions.Add({{"state", "idle"}})),
      sessions_queued(sessions.Add({{"state", "queued"}})),
      sessions_attached(OneGauge(*registry, "streamd_sessions_attached",
                                 "Sessions with a client stream attached.")),
      kv_used_blocks(
          OneGauge(*registry, "streamd_kv_used_blocks", "KV cache blocks held by sessions.")),
      kv_free_blocks(
          OneGauge(*registry, "streamd_kv_free_blocks", "KV cache blocks free in the pool.")),
      kv_reserved_blocks(OneGauge(*registry, "streamd_kv_reserved_blocks",
                                  "KV cache blocks reserved by admitted sessions (each its "
                                  "worst case); an Open waits when its bound does not fit.")),
      kv_capacity_blocks(OneGauge(*registry, "streamd_kv_capacity_blocks",
                                  "KV cache blocks in the pool (used plus free).")),
      kv_used_bytes(OneGauge(*registry, "streamd_kv_used_bytes",
                             "Bytes of the KV cache blocks held by sessions.")),
      kv_capacity_bytes(OneGauge(*registry, "streamd_kv_capacity_bytes",
                                 "Bytes of the KV cache pool (allocated at start-up).")),
      kv_usage_ratio(OneGauge(*registry, "streamd_kv_usage_ratio",
                              "Fraction of KV cache blocks in use (0 to 1).")),
      backend_healthy(OneGauge(*registry, "streamd_backend_healthy",
                               "1 while the compute backend can run steps; 0 after a fault it "
                               "cannot recover from (gRPC health is then NOT_SERVING).")),
      ready(OneGauge(*registry, "streamd_ready",
                     "1 while the daemon takes new sessions: model loaded, backend healthy, KV "
                     "pool not exhausted, not draining.")),
      process_resident_memory(OneGauge(*registry, "streamd_process_resident_memory_bytes",
                                       "Resident memory of the daemon process in bytes "
                                       "(/proc/self/statm).")),
      build_info(BuildGauge()
                     .Name("streamd_build_info")
                     .Help("Always 1; the labels name the streamd version, the backend and the "
                           "model.")
                     .Register(*registry)) {
  for (int code = 1; code < kNumGrpcCodes; ++code) {
    error_by_code_[static_cast<size_t>(code)] =
        &errors.Add({{"code", std::string(GrpcCodeName(code))}});
  }
  for (int k = 0; k < kNumRequestKinds; ++k) {
    request_by_kind_[static_cast<size_t>(k)] =
        &requests.Add({{"kind", std::string(kRequestKindNames[static_cast<size_t>(k)])}});
  }
  for (int f = 0; f < kNumFinished; ++f) {
    finished_by_reason_[static_cast<size_t>(f)] = &request_success.Add(
        {{"finished_reason", std::string(kFinishedNames[static_cast<size_t>(f)])}});
  }
  // Each route's successes from 0, so that a rate over them exists before the first request.
  for (const char* route :
       {"/v1/models", "/v1/models/{model}", "/v1/chat/completions", "/v1/responses"}) {
    http_requests.Add({{"route", route}, {"status", "200"}});
  }
  AddScrapeHook([this] { process_resident_memory.Set(ResidentMemoryBytes()); });
}

void StreamdMetrics::RecordError(int grpc_code) {
  if (grpc_code == 0) return;
  if (grpc_code < 0 || grpc_code >= kNumGrpcCodes) grpc_code = kUnknownCode;
  error_by_code_[static_cast<size_t>(grpc_code)]->Increment();
}

void StreamdMetrics::RecordHttpRequest(std::string_view route, int status) {
  // Family::Add finds the series when it exists (under the family's lock): routes and statuses
  // are a small set, so this stays a handful of series.
  http_requests.Add({{"route", std::string(route)}, {"status", std::to_string(status)}})
      .Increment();
}

void StreamdMetrics::RecordGeneration(const GenerationRecord& g) {
  finished_by_reason_[static_cast<size_t>(g.finished)]->Increment();
  e2e_generation_latency.Observe(g.total_s);
  request_prompt_tokens.Observe(static_cast<double>(g.prompt_tokens));
  request_generation_tokens.Observe(static_cast<double>(g.output_tokens));
  if (g.output_tokens > 0) {
    time_to_first_token.Observe(g.time_to_first_token_s);
    prefill_time.Observe(g.time_to_first_token_s);
    decode_time.Observe(g.total_s - g.time_to_first_token_s);
  }
}

void StreamdMetrics::RecordStep(double seconds, int64_t tokens) {
  step_duration.Observe(seconds);
  step_tokens.Observe(static_cast<double>(tokens));
}

void StreamdMetrics::SetSessions(int64_t active, int64_t idle, int64_t queued) {
  sessions_active.Set(static_cast<double>(active));
  sessions_idle.Set(static_cast<double>(idle));
  sessions_queued.Set(static_cast<double>(queued));
}

void StreamdMetrics::SetKvBlocks(int64_t used, int64_t free_blocks, int64_t block_bytes,
                                 int64_t local_used_bytes, int64_t local_capacity_bytes) {
  const double capacity = static_cast<double>(used + free_blocks);
  const double bytes = static_cast<double>(block_bytes);
  kv_used_blocks.Set(static_cast<double>(used));
  kv_free_blocks.Set(static_cast<double>(free_blocks));
  kv_capacity_blocks.Set(capacity);
  kv_used_bytes.Set(static_cast<double>(used) * bytes + static_cast<double>(local_used_bytes));
  kv_capacity_bytes.Set(capacity * bytes + static_cast<double>(local_capacity_bytes));
  kv_usage_ratio.Set(capacity > 0 ? static_cast<double>(used) / capacity : 0.0);
}

void StreamdMetrics::SetBuildInfo(const std::string& version, const std::string& backend,
                                  const std::string& model) {
  build_info.Add({{"version", version}, {"backend", backend}, {"model", model}}).Set(1);
}

std::string StreamdMetrics::Text() const {
  return prometheus::TextSerializer().Serialize(source->Collect());
}

}  // namespace streamd::metrics
