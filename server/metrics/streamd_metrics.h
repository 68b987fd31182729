// StreamdMetrics: every metric the daemon exposes, as prometheus-cpp families in one registry,
// held by reference for the hot path. docs/METRICS.md lists them with their vLLM counterparts.
//
// Who updates what (nothing here knows engine/ or gRPC; callers pass plain numbers):
//   - histograms and counters: recorded where the event happens (the stream handler, the
//     scheduler step's observer); a counter update is one atomic add, a histogram's takes its
//     own short mutex (prometheus-cpp keeps count, buckets and sum consistent that way);
//   - gauges of state that lives elsewhere (sessions, KV pool, tenants, snapshots): copied in
//     by scrape hooks (AddScrapeHook), each from one consistent reading of its owner, so a
//     scrape never shows a half-updated set.
//
// Sessions resident in memory are one gauge family, streamd_sessions{state="active"|"idle"|
// "queued"}, so that sum(streamd_sessions) is every session the daemon holds or is admitting,
// and the states never overlap.
//
// Histogram buckets are vLLM's for the metrics of the same meaning (vllm/v1/metrics/loggers.py),
// so dashboards and SLOs written for vLLM carry over; step duration has no vLLM counterpart and
// uses buckets of its own.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/metrics/scrape_source.h"

namespace streamd::metrics {

// vllm:time_to_first_token_seconds.
inline constexpr std::array<double, 22> kTimeToFirstTokenBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
// vllm:inter_token_latency_seconds (and the deprecated vllm:time_per_output_token_seconds).
inline constexpr std::array<double, 19> kInterTokenLatencyBuckets = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
// vLLM's request_latency_buckets: vllm:e2e_request_latency_seconds, request_queue_time_seconds,
// request_prefill_time_seconds, request_decode_time_seconds.
inline constexpr std::array<double, 21> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// vllm:iteration_tokens_total.
inline constexpr std::array<double, 13> kStepTokensBuckets = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
// vLLM's build_1_2_5_buckets(max_model_len) for request_prompt_tokens and
// request_generation_tokens, up to 100k (a session's window bounds what one generation sees,
// not what it may be sent: a long transcript appended at once is one prefill).
inline constexpr std::array<double, 16> kRequestTokensBuckets = {
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
// streamd's own: a decode step takes ~1 ms on a GPU, tens of ms on a CPU; a long prefill
// chunk up to seconds.
inline constexpr std::array<double, 18> kStepDurationBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03,
    0.05,   0.075, 0.1,    0.25,  0.5,    1.0,  2.5,   5.0,  10.0};

// gRPC status codes, numbered as in grpc::StatusCode (and streamd::StatusCode).
inline constexpr int kNumGrpcCodes = 17;  // OK (0) .. UNAUTHENTICATED (16)
// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "UNKNOWN" for a number outside [0, 16].
std::string_view GrpcCodeName(int code);

// What a client asked for: one RPC, or one message on a Session stream (label `kind`).
enum class RequestKind {
  kOpen,
  kResume,
  kAppend,
  kGenerate,
  kCancel,
  kClose,  // Session stream messages
  kGetModelInfo,
  kListSessions,
  kGetSession,
  kCloseSession,
  kExportSession,
  kImportSession,
  kTruncate,
  kFork,  // Session stream messages
};
inline constexpr int kNumRequestKinds = 14;
std::string_view RequestKindName(RequestKind kind);  // "open", ..., "import_session"

// How a generation ended (label `finished_reason`, vLLM's values): stop = an end-of-generation
// token or a stop string, length = max_tokens (or a full dense cache), abort = cancelled
// (Cancel, barge-in, a slow client, disconnect, drain), error = the step failed.
enum class Finished { kStop, kLength, kAbort, kError };
inline constexpr int kNumFinished = 4;
std::string_view FinishedName(Finished f);

// One generation as the stream handler saw it end.
struct GenerationRecord {
  Finished finished = Finished::kStop;
  int64_t prompt_tokens = 0;  // input prefilled for it (pending when Generate arrived)
  int64_t output_tokens = 0;
  double time_to_first_token_s = 0;  // Generate received -> first token (0 if none)
  double total_s = 0;                // Generate received -> done
};

struct StreamdMetrics {
  StreamdMetrics();
  StreamdMetrics(const StreamdMetrics&) = delete;
  StreamdMetrics& operator=(const StreamdMetrics&) = delete;

  // Counts one error returned to a client under its gRPC code name (label `code`). OK (0) is
  // not an error and is ignored; numbers outside [0, 16] count as UNKNOWN.
  void RecordError(int grpc_code);
  void RecordRequest(RequestKind kind) { request_by_kind_[static_cast<size_t>(kind)]->Increment(); }
  // Counts one answer of the HTTP front door: its route ("/v1/chat/completions", ..., "other":
  // the server names a bounded set) and its HTTP status.
  void RecordHttpRequest(std::string_view route, int status);
  // TTFT (when a token came), e2e latency, prefill and decode time, token counts, outcome.
  void RecordGeneration(const GenerationRecord& g);
  // One engine step: its wall time and the tokens of its forward pass.
  void RecordStep(double seconds, int64_t tokens);
  // Sets streamd_sessions{state=...}.
  void SetSessions(int64_t active, int64_t idle, int64_t queued);
  // Sets the block, byte and usage gauges of the KV pool; `block_bytes`: one block, every
  // layer's K and V. Capacity is used + free. A model whose local layers keep caches of their
  // own has a second pool for them: its bytes count in the byte gauges; the block gauges and
  // the usage ratio are the main pool's.
  void SetKvBlocks(int64_t used, int64_t free_blocks, int64_t block_bytes,
                   int64_t local_used_bytes = 0, int64_t local_capacity_bytes = 0);
  void SetKvReservedBlocks(int64_t reserved) {
    kv_reserved_blocks.Set(static_cast<double>(reserved));
  }
  // streamd_build_info{version, backend, model} = 1 (set once, at start-up).
  void SetBuildInfo(const std::string& version, const std::string& backend,
                    const std::string& model);

  // `hook` runs at the start of every scrape (ScrapeSource::AddHook).
  void AddScrapeHook(std::function<void()> hook) { source->AddHook(std::move(hook)); }
  // The whole set in the text exposition format, hooks run first (tests, `streamd bench`).
  std::string Text() const;

  // Declared first: every reference below points into it. More families may be added to it.
  const std::shared_ptr<prometheus::Registry> registry;
  // What the /metrics endpoint serves: the registry, with the scrape hooks run first.
  const std::shared_ptr<ScrapeSource> source;

  // ---- Histograms (seconds unless the name says otherwise) --------------------------------
  prometheus::Histogram& time_to_first_token;        // Generate received -> first token sent
  prometheus::Histogram& inter_token_latency;        // between consecutive tokens of one generation
  prometheus::Histogram& e2e_generation_latency;     // Generate received -> generation finished
  prometheus::Histogram& queue_time;                 // Open received -> session admitted
  prometheus::Histogram& prefill_time;               // Generate received -> first token
  prometheus::Histogram& decode_time;                // first token -> generation finished
  prometheus::Histogram& request_prompt_tokens;      // input prefilled for one generation
  prometheus::Histogram& request_generation_tokens;  // output of one generation
  prometheus::Histogram& step_duration;              // one engine step: plan, forward, sampling
  prometheus::Histogram& step_tokens;                // tokens in one step's forward pass

  // ---- Counters ---------------------------------------------------------------------------
  prometheus::Counter& prompt_tokens;      // input tokens appended by clients
  prometheus::Counter& generation_tokens;  // tokens sampled and delivered
  prometheus::Counter& evicted_tokens;     // tokens dropped from windows (sinks never are)
  prometheus::Counter& preemptions;        // always 0: admission reserves the worst case
  prometheus::Counter& sessions_opened;
  prometheus::Counter& sessions_closed;
  prometheus::Counter& sessions_rejected;  // opens refused: admission timeout, options, limits
  prometheus::Family<prometheus::Counter>& errors;           // label `code`; non-OK codes from 0
  prometheus::Family<prometheus::Counter>& requests;         // label `kind`; every kind from 0
  prometheus::Family<prometheus::Counter>& request_success;  // label `finished_reason`
  prometheus::Family<prometheus::Counter>& http_requests;    // labels `route`, `status`
  prometheus::Counter& backend_failures;                     // backend faults that made it unusable

  // ---- Gauges -----------------------------------------------------------------------------
  prometheus::Family<prometheus::Gauge>& sessions;  // label `state`
  prometheus::Gauge& sessions_active;               // generating
  prometheus::Gauge& sessions_idle;                 // open, admitted, not generating
  prometheus::Gauge& sessions_queued;               // waiting for admission
  prometheus::Gauge& sessions_attached;             // with a client stream attached
  prometheus::Gauge& kv_used_blocks;
  prometheus::Gauge& kv_free_blocks;
  prometheus::Gauge& kv_reserved_blocks;  // admitted sessions' bounds (what admission counts)
  prometheus::Gauge& kv_capacity_blocks;
  prometheus::Gauge& kv_used_bytes;
  prometheus::Gauge& kv_capacity_bytes;
  prometheus::Gauge& kv_usage_ratio;           // used / capacity, 0 when capacity is 0
  prometheus::Gauge& backend_healthy;          // 1 while the backend can run steps
  prometheus::Gauge& ready;                    // 1 while the daemon takes new sessions
  prometheus::Gauge& process_resident_memory;  // read from /proc/self/statm at each scrape
  prometheus::Family<prometheus::Gauge>& build_info;

 private:
  std::array<prometheus::Counter*, kNumGrpcCodes> error_by_code_{};  // [0] (OK) stays null
  std::array<prometheus::Counter*, kNumRequestKinds> request_by_kind_{};
  std::array<prometheus::Counter*, kNumFinished> finished_by_reason_{};
};

}  // namespace streamd::metrics
