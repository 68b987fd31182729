#include "engine/core/step_runner.h"

#include <algorithm>
#include <string>

#include "kernels/cpu/vec_ops.h"

namespace streamd {

StepRunner::~StepRunner() {
  if (planned()) Abort();
}

Status StepRunner::Plan(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs) {
  if (planned()) {
    return FailedPreconditionError("step: the planned step was neither committed nor aborted");
  }
  STREAMD_ASSIGN_OR_RETURN(StepPlan plan, PlanStep(tokens, seqs, model_->config().vocab_size));
  plan_ = std::move(plan);
  seqs_.assign(seqs.begin(), seqs.end());
  return OkStatus();
}

Status StepRunner::Execute(float* logits) {
  if (!planned()) return FailedPreconditionError("step: Execute before Plan");
  greedy_row_count_ = 0;  // the rows of an earlier greedy step are gone (as on a device)
  return model_->Execute(*plan_, logits);
}

Status StepRunner::ExecuteGreedy(int32_t* next_tokens) {
  if (!planned()) return FailedPreconditionError("step: ExecuteGreedy before Plan");
  greedy_row_count_ = 0;
  const int64_t rows = plan_->n_out;
  if (model_->greedy_ids_on_device()) {
    STREAMD_RETURN_IF_ERROR(model_->ExecuteGreedy(*plan_, next_tokens));
    greedy_row_count_ = rows;
    return OkStatus();
  }
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  greedy_rows_.resize(static_cast<size_t>(rows) * vocab);
  STREAMD_RETURN_IF_ERROR(model_->Execute(*plan_, greedy_rows_.data()));
  // The engine's greedy pick (the sampler's), one row per host thread at a time.
  model_->RunOnHostThreads(rows, [&](int64_t r) {
    next_tokens[r] = static_cast<int32_t>(kernels::cpu::ArgmaxF32(
        &greedy_rows_[static_cast<size_t>(r) * vocab], static_cast<int64_t>(vocab)));
  });
  greedy_row_count_ = rows;
  return OkStatus();
}

Status StepRunner::GreedyRow(int64_t row, float* out) {
  if (row < 0 || row >= greedy_row_count_) {
    return InvalidArgumentError("logits row " + std::to_string(row) +
                                " is not in the last greedy step");
  }
  if (model_->greedy_ids_on_device()) return model_->CopyGreedyStepLogits(row, out);
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  std::copy_n(&greedy_rows_[static_cast<size_t>(row) * vocab], vocab, out);
  return OkStatus();
}

void StepRunner::Commit(std::span<const int32_t> kept) {
  if (!planned()) return;
  CommitStep(seqs_, kept);
  plan_.reset();
  seqs_.clear();
}

void StepRunner::Abort() {
  if (!planned()) return;
  AbortStep(seqs_);
  plan_.reset();
  seqs_.clear();
}

Status StepRunner::Run(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs,
                       float* logits) {
  STREAMD_RETURN_IF_ERROR(Plan(tokens, seqs));
  if (Status s = Execute(logits); !s.ok()) {
    Abort();
    return s;
  }
  Commit();
  return OkStatus();
}

Status StepRunner::RunGreedy(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs,
                             int32_t* next_tokens) {
  STREAMD_RETURN_IF_ERROR(Plan(tokens, seqs));
  if (Status s = ExecuteGreedy(next_tokens); !s.ok()) {
    Abort();
    return s;
  }
  Commit();
  return OkStatus();
}

Status StepRunner::Run(std::span<const int32_t> tokens, SessionCache& cache, LogitsMode mode,
                       float* logits) {
  const SequenceInput seq{&cache, static_cast<int32_t>(tokens.size()), mode};
  return Run(tokens, std::span<const SequenceInput>(&seq, 1), logits);
}

}  // namespace streamd
