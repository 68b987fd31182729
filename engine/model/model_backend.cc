#include "engine/model/model_backend.h"

namespace streamd {

Status ModelBackend::Forward(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs,
                             float* logits) {
  STREAMD_ASSIGN_OR_RETURN(const StepPlan plan, PlanStep(tokens, seqs, config().vocab_size));
  if (Status s = Execute(plan, logits); !s.ok()) {
    AbortStep(seqs);
    return s;
  }
  CommitStep(seqs);
  return OkStatus();
}

Status ModelBackend::ForwardGreedy(std::span<const int32_t> tokens,
                                   std::span<const SequenceInput> seqs, int32_t* next_tokens) {
  STREAMD_ASSIGN_OR_RETURN(const StepPlan plan, PlanStep(tokens, seqs, config().vocab_size));
  if (Status s = ExecuteGreedy(plan, next_tokens); !s.ok()) {
    AbortStep(seqs);
    return s;
  }
  CommitStep(seqs);
  return OkStatus();
}

}  // namespace streamd
