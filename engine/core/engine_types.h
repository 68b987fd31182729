// Value types of the engine API: what a caller (the gRPC server, the bench, tests) passes in
// and gets back. Errors are Status values whose codes use gRPC's numbering, so the server maps
// them in one function; messages name the field and the limit.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/cache/session_cache.h"
#include "engine/core/step_planner.h"
#include "engine/sampling/sampling_params.h"
#include "engine/util/session_id.h"
#include "engine/util/status.h"

namespace streamd {

// The prefill headroom when EngineConfig::prefill_headroom_blocks is -1: enough for a step of
// max_batch_tokens prefill tokens in full chunks (a chunk of n borrows at most ceil((n-1)/B)
// blocks), plus a few blocks of rounding; smaller or more numerous chunks get shortened
// (StepPlanner) rather than reserving for the worst case.
int32_t DefaultPrefillHeadroom(const PlannerConfig& planner, int32_t max_chunk, int32_t block_size);

// One engine step as its observer sees it (EngineConfig::step_observer).
struct StepReport {
  double seconds = 0;     // plan, forward pass, sampling and bookkeeping
  int64_t tokens = 0;     // tokens of the forward pass: decode tokens plus prefill chunks
  int32_t sequences = 0;  // sessions in it
  bool ok = true;         // false: the forward pass failed (its generations ended with kError)
};

struct EngineConfig {
  int32_t block_size = 16;
  // KV pool budget, allocated once: `pool_bytes`, or when pool_fraction > 0 that fraction of the
  // memory available where the backend keeps its pool (host MemAvailable, or free device
  // memory), resolved by Engine::Create. The one place the budget is computed.
  int64_t pool_bytes = 256LL << 20;
  double pool_fraction = 0.0;
  PlannerConfig planner;
  int32_t threads = 0;      // forward-pass threads; 0 = all cores
  int32_t max_chunk = 256;  // most tokens of one session per step
  // Blocks of the pool set aside for the prefill chunks of a step beyond their sessions'
  // bounds (SessionCache: "prefill headroom"); -1 = DefaultPrefillHeadroom.
  int32_t prefill_headroom_blocks = -1;
  // A model with local layers (a native sliding window: Gemma 3) keeps their K/V in a pool of
  // their own, holding only that window (session_cache.h, "Local layers"), where the backend
  // supports it (ModelBackend::LocalLayerSplit). false: every layer in one pool, as for other
  // models (the same results, bit for bit; more memory per session).
  bool local_layer_caches = true;
  // The session that shares the budget between that pool and the main one (both hold as many
  // such sessions): the shape of an Open that names none (the server's sessions.default_*).
  CacheMode default_mode = CacheMode::kSink;
  int32_t default_sinks = 4;
  int32_t default_window = 1020;
  int32_t max_sessions = 4096;           // open sessions, admitted or queued
  int32_t max_sinks = 64;                // per-session limits
  int32_t max_window = 8192;             // also bounded by the model context minus sinks
  int64_t max_pending_tokens = 1 << 20;  // appended but not yet prefilled, per session
  // Called on the scheduler thread after every step, outside the engine's lock (metrics). It
  // must be quick and must not call into the engine.
  std::function<void(const StepReport&)> step_observer;
};

struct SessionOptions {
  std::string tenant;  // who owns it: an opaque label to the engine
  CacheMode mode = CacheMode::kSink;
  int32_t sinks = 4;
  int32_t window = 1020;
  SamplingParams sampling;  // defaults for this session's generations
  // How long Open waits for KV blocks when the pool cannot hold this session's bound yet;
  // zero fails at once with RESOURCE_EXHAUSTED.
  std::chrono::milliseconds admission_timeout{0};
};

struct GenerateOptions {
  int32_t max_tokens = 256;
  std::vector<std::string> stop;
  std::optional<SamplingParams> sampling;  // overrides the session's defaults
  std::string request_id;                  // echoed in every event
  bool ignore_end_of_generation = false;   // benchmarks: run to max_tokens
};

enum class FinishReason { kLength, kStop, kEndOfGeneration, kCancelled, kError };
const char* FinishReasonName(FinishReason reason);

struct GenerationEvent {
  enum class Kind { kToken, kDone };
  Kind kind = Kind::kToken;
  SessionId session;
  std::string request_id;
  // kToken: one sampled token and the UTF-8 text it completes (may be empty while a
  // character or a possible stop string is incomplete).
  int32_t token = -1;
  std::string text;
  int64_t index = 0;  // 0-based position of the token in this generation
  // kDone:
  FinishReason reason = FinishReason::kLength;
  Status status;              // non-OK with kError
  std::string tail_text;      // text held back until the end (a partial character, ...)
  int64_t prompt_tokens = 0;  // input prefilled for this generation
  int64_t output_tokens = 0;
  double time_to_first_token_s = 0.0;
  double total_s = 0.0;
};

// Called on the scheduler thread, outside the engine's lock. It must not block (push into a
// bounded queue and return) and must not call back into the engine.
using EventSink = std::function<void(GenerationEvent&&)>;

struct SessionInfo {
  SessionId id;
  CacheSpec cache;
  int64_t tokens_seen = 0;    // every token appended or generated, prefilled or pending
  int64_t tokens_cached = 0;  // in the KV cache and visible
  int64_t tokens_evicted = 0;
  int64_t pending_tokens = 0;
  bool generating = false;
  int32_t blocks_held = 0;
  int32_t max_blocks = 0;  // its bound: what admission reserved
  uint64_t revision = 0;   // bumped by every change of its state (SessionState::revision)
  std::string tenant;
};

struct EngineStats {
  int32_t sessions = 0;
  int32_t generating = 0;
  int32_t blocks_total = 0;
  int32_t blocks_used = 0;
  int32_t blocks_reserved = 0;  // sum of admitted sessions' bounds
  int32_t blocks_headroom = 0;  // the pool's prefill headroom (reserved once)
  int64_t bytes_per_token = 0;
  // The local layers' pool (KvPools), when the model's local layers keep caches of their own:
  // the same counts there (its headroom is blocks_headroom too); all 0 without one. The main
  // pool's counts above then cover the other layers only.
  int32_t local_blocks_total = 0;
  int32_t local_blocks_used = 0;
  int32_t local_blocks_reserved = 0;
  int64_t local_bytes_per_token = 0;
  int64_t steps = 0;
  int64_t tokens_appended = 0;  // input accepted by Append (the clients' prompt tokens)
  int64_t tokens_in = 0;        // run through the caches: prefill and fed-back sampled tokens
  int64_t tokens_out = 0;       // generated
  int64_t tokens_evicted =
      0;  // dropped from windows by steps (restored sessions' past not counted)
};

}  // namespace streamd
