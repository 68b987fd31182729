// StepRunner: the one driver of a forward step. The engine's scheduler steps its sessions with
// it, and so does every caller that steps caches of its own (the eval and bench tools, the
// build's step timer, tests): a step is planned, executed and committed by this code and no
// other, and the backend only ever executes the plan (DESIGN.md, "Who owns what").
//
// A step has three phases (engine/cache/step_plan.h):
//   Plan     PlanStep: places each sequence's chunk in its cache and describes the step;
//   Execute  the backend runs the plan: logits rows, or (ExecuteGreedy) each row's argmax id;
//   Commit   the chunks join their contexts (or fewer tokens of them); Abort gives them back.
// The engine calls the phases one at a time: it plans and commits under its lock, executes
// without it and samples in between. Run and RunGreedy do all three for callers that have
// nothing to do between them, and abort the step when it fails.
//
// Greedy steps: a backend that picks ids where the logits are (greedy_ids_on_device: the GPU)
// runs ExecuteGreedy itself and keeps the rows for GreedyRow; for the others the runner
// executes the full rows into its own buffer and takes each row's argmax on the backend's host
// threads (the sampler's pick), so greedy rows are a runner's scratch, not backend state.
//
// Not thread-safe: one runner per stepping thread. Between Plan and Commit/Abort the planned
// caches must not change (step_plan.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/cache/session_cache.h"
#include "engine/cache/step_plan.h"
#include "engine/model/model_backend.h"
#include "engine/util/status.h"

namespace streamd {

class StepRunner {
 public:
  explicit StepRunner(ModelBackend& model) : model_(&model) {}
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;
  ~StepRunner();  // a step still planned is aborted

  // Plans a step: sequence k's tokens are the next seqs[k].n_tokens entries of `tokens`. On
  // error (PlanStep's: the batch or a token is invalid, a chunk does not fit) nothing is placed.
  // A step already planned must be committed or aborted first.
  Status Plan(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs);
  bool planned() const { return plan_.has_value(); }
  const StepPlan& plan() const { return *plan_; }

  // Runs the planned step: logits rows [plan().n_out, vocab] in plan order.
  Status Execute(float* logits);
  // Runs it and returns the first index of each row's largest logit: [plan().n_out] ids.
  Status ExecuteGreedy(int32_t* next_tokens);
  // Row `row` of the last successful ExecuteGreedy into out[vocab], until the next step runs:
  // for the rare row that needs more than its id.
  Status GreedyRow(int64_t row, float* out);

  // The step ran: sequence k keeps the first kept[k] tokens of its chunk (all when empty).
  void Commit(std::span<const int32_t> kept = {});
  // The step did not run, or failed: every chunk is given back.
  void Abort();

  // Plan, Execute (or ExecuteGreedy) and Commit; Abort when Execute fails.
  Status Run(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs, float* logits);
  Status RunGreedy(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs,
                   int32_t* next_tokens);
  // One sequence: `tokens` appended to `cache`, logits of its last token (kLast: [vocab]) or of
  // every token (kAll: [tokens.size(), vocab]).
  Status Run(std::span<const int32_t> tokens, SessionCache& cache, LogitsMode mode, float* logits);

  ModelBackend& model() const { return *model_; }

 private:
  ModelBackend* model_;
  std::vector<SequenceInput> seqs_;  // the planned step's sequences
  std::optional<StepPlan> plan_;
  std::vector<float> greedy_rows_;  // ExecuteGreedy's rows on a backend without device ids
  int64_t greedy_row_count_ = 0;    // rows of the last successful ExecuteGreedy
};

}  // namespace streamd
