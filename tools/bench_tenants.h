// `streamd bench --tenants`: does one tenant's flood starve another tenant's single session?
// In-process on one Engine (continuous batching, the CPU backend by default). Tenant A opens
// N sessions (--flood N) that each append P tokens and then generate without end; once every
// one of them is decoding, tenant B's one session appends P tokens and generates G. The run
// reports B's inter-token latency (gaps between its consecutive token events) and the tokens/s
// of the whole engine while B generates. Each repetition measures, in turn (reversed on odd
// repetitions, so a drift of the machine's load hits all alike):
//   alone       B with no A session
//   full        B beside max_batch_sessions - 1 of A's sessions: the step is full, not
//               over-subscribed (what B's latency costs when the batch is as large as it gets)
//   flood       B beside N of A's sessions, tenants on (PlannerConfig::fair_tenants)
//   flood, off  the same on a second engine with fair_tenants off (the policy before tenants)
//   flood, shared  with --shared-step-tokens N only: the flood on a third engine whose steps
//               run at most N tokens while both tenants have work
//               (PlannerConfig::shared_step_tokens)
// Ratios are paired: the median over repetitions of (that run's figure) / (alone's, or full's,
// figure in the same repetition). On a CPU a full step of S sessions costs several times a
// one-session step, so x alone mixes the batch's cost into the figure; x full (flood over
// full) is what the flood itself costs B, i.e. what fairness decides.
#pragma once

#include <cstdint>

#include "tools/bench_sessions.h"

namespace streamd::tools {

struct TenantsBenchOptions {
  BenchModelSource source;
  int64_t flood = 100;         // tenant A's sessions
  int64_t prompt_tokens = 32;  // each session's append before it generates
  int64_t gen_tokens = 64;     // B's generation (>= 3: two gaps at least)
  int64_t threads = 0;         // 0 = all cores
  int64_t sinks = 4;
  int64_t window = 252;
  int64_t max_batch_tokens = 512;
  int64_t max_batch_sessions = 16;  // < flood + 1, so the flood over-subscribes every step
  int64_t shared_step_tokens = 0;   // > 0: the "flood, shared" run with this cap
  int64_t reps = 5;
  bool json = false;
};

// The definitions, as printed by `streamd bench --help`.
extern const char* const kTenantsBenchDefinitions;

// Runs the benchmark, prints a table (and with json, one JSON object as the last line).
// Returns the process exit code.
int RunTenantsBench(const TenantsBenchOptions& options);

}  // namespace streamd::tools
