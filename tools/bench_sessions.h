// `streamd bench --sessions N[,N...]`: closed-loop load on the Engine (continuous batching)
// inside one process. N sessions each append P random prompt tokens and generate G tokens
// greedily, all started together; the run reports aggregate decode throughput, time to first
// token, inter-token latency and scheduler steps (definitions: tools/bench/load_metrics.h).
// Several session counts share one engine and take turns within each repetition, so their
// ratios come from one run under the same noise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model_backend.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/status.h"

namespace streamd::tools {

// Where `streamd bench` gets its model: a GGUF file, or a synthetic random-weight model of a
// known shape (--synthetic smollm2 | llama3-8b; on cuda the weights are generated on the
// device), run on --backend auto | cpu | cuda.
struct BenchModelSource {
  std::string model_path;
  std::string synthetic;        // "" = the file
  std::string backend = "cpu";  // the bench measures the CPU unless asked otherwise
};
struct BenchModel {
  std::unique_ptr<ModelBackend> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // only when asked for
  std::string name;                                 // for the report
};
inline constexpr const char* kSyntheticShapes = "smollm2, llama3-8b";
StatusOr<BenchModel> LoadBenchModel(const BenchModelSource& source, bool with_tokenizer);

struct SessionsBenchOptions {
  BenchModelSource source;
  std::vector<int64_t> sessions = {1};  // session counts, measured in turn within each rep
  int64_t prompt_tokens = 128;
  int64_t gen_tokens = 64;         // >= 2: the decode phase needs a token after the first
  int64_t threads = 0;             // 0 = all cores
  int64_t sinks = 4;
  int64_t window = 0;              // 0 = prompt + gen tokens (nothing is evicted)
  int64_t max_batch_tokens = 512;  // the step planner's token budget per forward pass
  int64_t reps = 1;                // closed-loop runs after one warm-up; figures are medians
  bool json = false;
};

// The metric definitions, as printed by `streamd bench --help`.
extern const char* const kSessionsBenchDefinitions;

// Runs the benchmark, prints a table (and with json, one JSON object as the last line).
// Returns the process exit code.
int RunSessionsBench(const SessionsBenchOptions& options);

}  // namespace streamd::tools
