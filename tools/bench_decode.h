// `streamd bench --decode-steps K --sessions N[,N...]`: the time of one batched greedy decode
// step (StepRunner::RunGreedy: tokens in, next tokens out) of the model with N sessions
// whose caches hold exactly S + W tokens (full windows), without the prefill that would fill
// them: every cache is fast-forwarded by reserving and committing
// tokens (their K/V are whatever the pool holds; the step reads the same bytes either way).
// This isolates what the step costs the GPU or CPU: all weights once, plus every session's
// K/V once, and reports it against that byte count (and against a reference bandwidth, e.g.
// the device-to-device copy bandwidth gpu-check.sh measures).
#pragma once

#include <cstdint>
#include <vector>

#include "tools/bench_sessions.h"

namespace streamd::tools {

struct DecodeStepBenchOptions {
  BenchModelSource source;
  std::vector<int64_t> sessions = {1};
  int64_t sinks = 4;
  int64_t window = 1020;
  int64_t steps = 20;           // timed steps per session count, after 3 warm-up steps
  int64_t threads = 0;          // CPU backend: 0 = all cores
  double reference_gbps = 0.0;  // > 0: also print step time / ((weights + KV) / reference)
  bool json = false;
};

// Prints a table (and with json, one JSON object as the last line); returns the exit code.
// A session count whose pool does not fit is reported as a row with the reason, not an abort.
int RunDecodeStepBench(const DecodeStepBenchOptions& options);

}  // namespace streamd::tools
