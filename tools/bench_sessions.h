// `streamd bench --sessions N[,N...]`: closed-loop load on the Engine (continuous batching)
// inside one process. N sessions each append P random prompt tokens and generate G tokens
// greedily, all started together; the run reports aggregate decode throughput, time to first
// token, inter-token latency and scheduler steps (definitions: tools/bench/load_metrics.h).
// Several session counts share one engine and take turns within each repetition, so their
// ratios come from one run under the same noise.
// With --snapshot-every MS (a list alternates the intervals within each repetition, in reverse
// order on odd repetitions; 0 = no snapshots) the engine also holds as many resting sessions as
// the largest count, each left where a busy one ends its turn (P + G tokens), and while a run's
// closed loop goes, a SessionPersister (the daemon's writer thread) writes them: every MS / N
// one of them is changed (SetMetadata, as a turn changes a session) and touched, so each is
// captured, encoded and written (SnapshotStore, fsync) once per MS, evenly spread. The busy
// sessions themselves cannot be captured while they generate (Engine::Capture is refused then,
// and the daemon writes a session between its turns), so the resting ones stand in for them.
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
  std::string synthetic;            // "" = the file
  std::string backend = "cpu";      // the bench measures the CPU unless asked otherwise
  std::string plan_path;            // a build plan of the model (cpu backend), or "": the defaults
  int k_quant_activation_bits = 8;  // without a plan (LoadCpuModel)
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
  int64_t gen_tokens = 64;  // >= 2: the decode phase needs a token after the first
  int64_t threads = 0;      // 0 = all cores
  int64_t sinks = 4;
  int64_t window = 0;              // 0 = prompt + gen tokens (nothing is evicted)
  int64_t max_batch_tokens = 512;  // the step planner's token budget per forward pass
  int64_t reps = 1;                // closed-loop runs after one warm-up; figures are medians
  std::vector<int64_t> snapshot_every_ms = {0};  // snapshot intervals; 0 = no snapshots
  std::string snapshot_dir;        // "" = a fresh temporary directory (removed at the end)
  bool local_layer_caches = true;  // EngineConfig::local_layer_caches
  bool json = false;
};

// The metric definitions, as printed by `streamd bench --help`.
extern const char* const kSessionsBenchDefinitions;

// Runs the benchmark, prints a table (and with json, one JSON object as the last line).
// Returns the process exit code.
int RunSessionsBench(const SessionsBenchOptions& options);

}  // namespace streamd::tools
