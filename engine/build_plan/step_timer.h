// StepTimer: the time of one batched greedy step (StepRunner::RunGreedy, the engine's step
// driver: plan, execute with each row's argmax, commit) of a model over
// `sessions` sessions that each feed `tokens_per_session` tokens per step (1: a decode step; 64:
// a prefill chunk), on sink caches that are already full (S + W tokens, eviction under way) of
// the model's CacheShape when created (f16, or int8 with a plan's scales).
// The caches are fast-forwarded by reserving and committing tokens without running the model:
// their K/V are whatever the pool holds, and the step reads the same bytes either way. This is
// what the tuner (cpu_tuner.h) compares candidates on and what `streamd bench --decode-steps`
// reports.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "engine/model/model_backend.h"
#include "engine/util/status.h"

namespace streamd {

struct StepWorkload {
  int64_t sessions = 1;
  int64_t tokens_per_session = 1;
  int64_t sinks = 4;
  int64_t window = 1020;
  bool operator==(const StepWorkload&) const = default;
};

class StepTimer {
 public:
  // Errors: a workload out of range (fields named), or a pool that does not fit (the backend's
  // error: CreatePool's message).
  static StatusOr<std::unique_ptr<StepTimer>> Create(ModelBackend& model,
                                                     const StepWorkload& workload);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  // Runs `steps` greedy steps (each step's argmax ids are the next step's input) and returns
  // each step's wall time in milliseconds.
  StatusOr<std::vector<double>> Run(int64_t steps);

  const StepWorkload& workload() const { return workload_; }
  // Bytes a step must read at least: every weight once and every session's cached K/V once.
  double bytes_per_step() const;
  double kv_bytes_per_step() const;

 private:
  StepTimer(ModelBackend& model, const StepWorkload& workload);
  ModelBackend& model_;
  StepRunner step_;
  StepWorkload workload_;
  CacheSpec spec_;
  std::unique_ptr<BlockPool> pool_;
  std::vector<std::unique_ptr<SessionCache>> caches_;  // before pool_ goes: declared after it
  std::vector<SequenceInput> seqs_;
  std::vector<int32_t> tokens_, next_;
};

// The median of `values` (the upper middle one for an even count); 0 for none.
double Median(std::vector<double> values);

}  // namespace streamd
