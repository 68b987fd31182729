// ModelBackend: what the engine needs from a model, whatever runs it. The CPU backend
// (LlamaModel) and the CUDA backend (engine/backends/cuda/CudaModel) implement it; the Engine, the
// bench and the server see only this interface (engine/backends/backend.h picks one).
//
// Contract of Execute, shared by every backend: run one StepPlan (engine/cache/step_plan.h),
// made by PlanStep over caches in a pool this backend's CreatePool made. Each token's K and V go
// to the slot its sequence's table names; each query attends the span the table gives for its
// position. Logits rows (host memory, f32) are written in plan order: [plan.n_out, vocab]. The
// backend plans nothing, touches no cache bookkeeping and drives no step: the StepRunner
// (engine/core/step_runner.h), the one step driver of the engine and the tools, plans the
// step, calls Execute, and commits the step when it succeeds or aborts it when it fails. On
// error the status says why (bad input, or a device fault).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/cache/step_plan.h"
#include "engine/model/llama_config.h"
#include "engine/util/status.h"

namespace streamd {

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  virtual const LlamaConfig& config() const = 0;
  // "cpu" or "cuda", for logs and bench output.
  virtual std::string_view backend_name() const = 0;
  // A one-line description of where the model runs (CPU ISA, or GPU name and memory).
  virtual std::string device_description() const = 0;
  // Bytes of weights one decode step reads (as stored by this backend).
  virtual uint64_t weight_bytes() const = 0;
  // CPU worker threads; backends that do not use them ignore it.
  virtual void set_threads(int32_t n) = 0;
  // Runs fn(i) for i in [0, n) on the backend's CPU threads, if it has any (the CPU backend's
  // forward-pass pool, idle between steps), else in turn on the caller. For per-sequence work
  // between steps, such as sampling: fn must be safe to run concurrently for distinct i.
  virtual void RunOnHostThreads(int64_t n, const std::function<void(int64_t)>& fn) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }

  // What the engine's KV pool holds for this model: f16 K/V of its shape by default; the CPU
  // backend under a plan with an int8 KV cache says int8 and its scales (kv_scales.h).
  virtual KvShape CacheShape() const {
    const LlamaConfig& c = config();
    return {c.n_layers, c.n_kv_heads, c.head_dim};
  }
  // Which layers may keep their K/V in a pool of their own (session_cache.h, "Local layers"):
  // the local layers of a model with a native sliding window, where the backend reads such
  // plans (StepPlan::local_pool). Empty (the default): every layer shares the one pool.
  virtual LayerSplit LocalLayerSplit() const { return {}; }
  // The KV pool this backend's Execute reads and writes: host memory for the CPU, device
  // memory for CUDA. Errors name the budget and the memory available.
  virtual StatusOr<std::unique_ptr<BlockPool>> CreatePool(const KvShape& shape, int32_t block_size,
                                                          int64_t budget_bytes) = 0;
  // A pool budget of `fraction` (0, 1] of the memory available now where the pool would live
  // (host MemAvailable for the CPU, free device memory for CUDA).
  virtual StatusOr<int64_t> PoolBudgetFromFraction(double fraction) const = 0;

  // Runs one plan (see the contract above).
  virtual Status Execute(const StepPlan& plan, float* logits) = 0;
  // OK while the backend can run plans; once it cannot (a sticky device error: every later
  // call would fail), why. Asked by the engine's scheduler thread after a failed Execute.
  virtual Status Health() const { return OkStatus(); }
  // Runs one plan like Execute but returns, for each logits row, the first index of its
  // largest logit ([plan.n_out] ids) instead of the row: a greedy decode step, for backends that
  // pick on the device and copy back ids instead of rows of vocab floats (64 sessions x 128256
  // logits are 33 MB per step). Only those (greedy_ids_on_device) implement it; for the others
  // the StepRunner executes the rows and picks on the host.
  virtual Status ExecuteGreedy(const StepPlan& /*plan*/, int32_t* /*next_tokens*/) {
    return UnimplementedError("the " + std::string(backend_name()) +
                              " backend picks no greedy ids itself");
  }
  // True when ExecuteGreedy costs less than Execute: the ids are picked where the logits are
  // (the GPU) and [rows] ints cross to the host instead of rows of vocab floats. The engine
  // then runs steps whose sampled sessions are all greedy through ExecuteGreedy.
  virtual bool greedy_ids_on_device() const { return false; }
  // Logits row `row` of the last successful ExecuteGreedy, into out[vocab_size]; valid until
  // the next Execute or ExecuteGreedy. For the rare row that needs more than its id (a
  // generation cancelled, or replaced by one that samples, while its step ran).
  virtual Status CopyGreedyStepLogits(int64_t /*row*/, float* /*out*/) {
    return UnimplementedError("the " + std::string(backend_name()) +
                              " backend keeps no greedy step's rows");
  }
};

}  // namespace streamd
