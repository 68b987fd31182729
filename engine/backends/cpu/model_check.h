// Everything about a model file that keeps streamd from loading it, named in one error.
//
// A load stops at its first problem (the GGUF reader at the tensor types, the config at the
// architecture, the tokenizer at its pre-tokenizer), so a user who fixes one meets the next:
// three tries for a file with three problems. When a load fails, the loaders call
// ExplainModelLoadFailure, which reads the file again, checks each part on its own and names
// every problem found, with the path once:
//
//   <path>: 3 problems: architecture "gpt-neox" is not supported (supported: llama, qwen2,
//   qwen3); tensor types streamd does not support: IQ2_XXS (24 tensors, first
//   'blk.0.attn_q.weight'), ...
//   (supported: F32, ...); tokenizer.ggml.pre 'bogus' is not supported (supported: ...)
//
// It runs only after a failure: a model that loads pays nothing.
#pragma once

#include <string>

#include "engine/util/status.h"

namespace streamd {

// Every problem of the model file at `path`: its architecture, its tensors' types (all of them,
// with counts), its hyper-parameters and tensor shapes (when the architecture is supported), and
// its tokenizer, in one message naming the path once; OK when none is found. A file that is not a
// readable GGUF at all is one problem (the reader's error).
Status CheckModelFile(const std::string& path);

// The error a tool reports for a load of `path` that failed with `failure`: CheckModelFile's
// when it finds anything, else `failure` naming the path once (prefixed when it does not).
Status ExplainModelLoadFailure(const std::string& path, const Status& failure);

}  // namespace streamd
