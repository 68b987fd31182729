// A generation's end as the request metrics count it, from the engine's session API: one
// definition for every transport (vLLM's finished_reason values: an end-of-generation token is
// a stop).
#pragma once

#include "engine/api/session_api.h"
#include "server/metrics/streamd_metrics.h"

namespace streamd::server {

inline metrics::Finished FinishedOf(api::FinishReason reason) {
  switch (reason) {
    case api::FinishReason::kStop:
    case api::FinishReason::kEndOfGeneration:
      return metrics::Finished::kStop;
    case api::FinishReason::kLength:
      return metrics::Finished::kLength;
    case api::FinishReason::kCancelled:
      return metrics::Finished::kAbort;
    case api::FinishReason::kError:
      break;
  }
  return metrics::Finished::kError;
}

inline metrics::GenerationRecord GenerationRecordOf(const api::GenerationEnd& end) {
  return {FinishedOf(end.reason), end.usage.input_tokens, end.usage.output_tokens,
          end.usage.time_to_first_token_s, end.usage.total_s};
}

}  // namespace streamd::server
