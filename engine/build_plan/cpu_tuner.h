// The CPU tuner of `streamd build` (docs/BUILD.md): picks the CpuTuning knobs for one model on
// this machine by timing candidates, not by rules written for another CPU.
//
// Every comparison is a set of candidates timed in alternated rounds (round r runs each
// candidate once, in an order rotated per round, so drift in a shared machine's load lands on
// all of them) and decided on the medians. A candidate replaces the one in place only when it
// is at least `min_gain` faster: a tie keeps the default, so noise never makes a plan differ
// from no plan for nothing.
//
// Stages, each on the result of the previous one:
//   1. the instruction-set level per product shape and token bucket, timed on the product alone
//      (LlamaModel::RunProduct) — skipped when only numerics-exact choices are allowed, since
//      another level rounds differently (the build's eval gate judges these);
//   2. worker threads, on decode steps of 1 and 16 sessions (kept when others loaded the machine);
//   3. the attention grouping factor, on decode steps of 8 and 16 sessions and a prefill chunk;
//   4. the attention's prefetch distance (blocks of keys asked for ahead), on decode steps of 1
//      and 16 sessions, where the K/V mostly come from DRAM;
//   5. the row split of each token bucket, on a step whose products fall in that bucket;
//   6. from how many sessions a decode step runs token-parallel (CpuTuning::
//      decode_by_tokens_from), on decode steps of 4, 8 and 16 sessions — skipped, like stage 1,
//      when only numerics-exact choices are allowed: that order's 12-bit products round as
//      another batch would (token_parallel_test.cc), not bit for bit as the row split.
// Stages 2-5 leave logits bit for bit unchanged (llama_model_tuning_test.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backends/cpu/cpu_tuning.h"
#include "engine/backends/cpu/llama_model.h"
#include "engine/build_plan/build_plan.h"
#include "engine/util/status.h"

namespace streamd {

struct CpuTunerOptions {
  // The sink cache every timed session holds (full: eviction under way). The default is a
  // voice or agent turn's working set; a longer window makes attention a larger share.
  int64_t sinks = 4;
  int64_t window = 252;
  int32_t rounds = 5;                // alternated rounds per comparison, in [1, 101]
  int64_t steps_per_sample = 2;      // timed steps per candidate per round (after one untimed)
  double min_gain = 0.03;            // in [0, 1)
  bool numerics_exact_only = false;  // skip stage 1
  // Stage 2 keeps the thread count in place when other processes took more than this share of
  // the machine's CPU while it timed (machine_load.h): a busy machine favours fewer threads.
  double max_others_share = 0.2;
  // Threads tried in stage 2; empty: every core, every core but one, and half of them.
  std::vector<int32_t> thread_candidates;
  // Tuning past this point fails with DEADLINE_EXCEEDED (`streamd build --max-seconds`).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Called with one line per decision (for the build's log); optional.
  std::function<void(const std::string&)> progress;
};

struct CpuTuningResult {
  CpuTuning tuning;
  // Every candidate's median, in the order timed, then the defaults against the result.
  std::vector<PlanMeasurement> measurements;
};

// Tunes `model` (left with the result applied). Errors: options out of range (named), a
// workload whose pool does not fit in memory, or the deadline passed.
StatusOr<CpuTuningResult> TuneCpu(LlamaModel& model, const CpuTunerOptions& options);

// Stages 3, 4 and 6 (the attention's grouping and prefetch distance, token-parallel decode)
// again, from the tuning in place, on caches of the model's CacheShape: the build times them
// again once it has made the cache int8, whose attention reads other rows. Leaves the result
// applied.
StatusOr<CpuTuningResult> RetuneAttention(LlamaModel& model, const CpuTunerOptions& options);

// The default and the tuned knobs timed side by side on decode steps of 1 and 16 sessions
// (rounds alternated): "decode step, N sessions, default|tuned" in ms, and for each the
// throughput of 16 sessions over one. The defaults run on f16 caches, as without a plan; the
// tuned knobs on the model's CacheShape (the plan's cache). Leaves `tuned` applied.
StatusOr<std::vector<PlanMeasurement>> CompareWithDefaults(LlamaModel& model,
                                                           const CpuTuning& tuned,
                                                           const CpuTunerOptions& options);

}  // namespace streamd
