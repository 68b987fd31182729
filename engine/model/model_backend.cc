#include "engine/model/model_backend.h"

namespace streamd {

Status ValidateBatch(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs,
                     int32_t vocab_size) {
  if (tokens.empty() || seqs.empty()) return InvalidArgumentError("forward: the batch is empty");
  int64_t total = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].cache == nullptr || seqs[s].n_tokens < 1) {
      return InvalidArgumentError("forward: sequence " + std::to_string(s) +
                                  " has no cache or no tokens");
    }
    if (seqs[s].cache->pool() != seqs[0].cache->pool()) {
      return InvalidArgumentError("forward: sequences from different KV pools in one batch");
    }
    if (seqs[s].n_tokens > seqs[s].cache->spec().max_chunk) {
      return InvalidArgumentError("forward: sequence " + std::to_string(s) + " appends " +
                                  std::to_string(seqs[s].n_tokens) +
                                  " tokens, over its cache's chunk limit of " +
                                  std::to_string(seqs[s].cache->spec().max_chunk));
    }
    total += seqs[s].n_tokens;
  }
  if (total != static_cast<int64_t>(tokens.size())) {
    return InvalidArgumentError("forward: sequences hold " + std::to_string(total) +
                                " tokens, the batch " + std::to_string(tokens.size()));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(tokens[i]) + " at index " +
                                  std::to_string(i) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab_size) + ")");
    }
  }
  return OkStatus();
}

}  // namespace streamd
