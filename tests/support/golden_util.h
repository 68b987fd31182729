// What the golden numerics tests share (model_golden_test, qwen_golden_test, gemma_golden_test,
// quant_variants_golden_test): reading llama.cpp's fixtures (tools/reference/, docs/REFERENCE.md),
// running a real model over their tokens, and scoring our logits against them: argmax agreement,
// perplexity, top-k logits, greedy continuations, and caches past eviction against the plain
// reference model; tokenizing as llama.cpp did, and the all-8-bit tuning a plan may choose. The
// bounds stay in each test; these only measure.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/util/status.h"

namespace streamd::testing {

// tests/fixtures/<name> (EXPECTs it exists).
nlohmann::json ReadGoldenFixture(const std::string& name);

// Encodes each case of a tokenize fixture (make_*_fixtures.py: a `text`, or the first `bytes` of
// `book`, with `parse_special`) with the vocabulary of the GGUF at `model_path`, EXPECTing
// llama.cpp's `ids`; returns how many cases ran.
int ExpectTokenizesAsFixture(const std::string& model_path, const nlohmann::json& fixture,
                             const std::string& book);

// The first index of the largest of `n` logits.
int32_t Argmax(const float* row, int64_t n);

// A real model and a block pool for its caches.
struct GoldenModel {
  // Loads `path` with a pool of `pool_bytes` (blocks of 16 positions).
  static StatusOr<std::unique_ptr<GoldenModel>> Load(const std::string& path, int64_t pool_bytes);
  // A cache of `spec` in the pool (EXPECTs it is made).
  std::unique_ptr<SessionCache> Cache(const CacheSpec& spec) const;

  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<BlockPool> pool;
};

// Runs `tokens` through `cache` in chunks of `chunk` tokens (every position's logits) and hands
// each chunk's logit rows to `rows(logits, first position, count)`.
Status RunChunked(LlamaModel& model, const std::vector<int32_t>& tokens, SessionCache& cache,
                  size_t chunk, const std::function<void(const float*, size_t, size_t)>& rows);
// The same, keeping all rows: [tokens.size(), vocab].
StatusOr<std::vector<float>> RunChunkedAll(LlamaModel& model, const std::vector<int32_t>& tokens,
                                           SessionCache& cache, size_t chunk);

// `base` with every product of `model` (one entry per weight shape and token bucket) at 8-bit
// activations on the active ISA: what a plan's eval gate measures before it takes 8 bits.
// `*q6k_shapes` (if given) counts the Q6_K shapes among them.
CpuTuning EightBitEverywhere(const LlamaModel& model, const CpuTuning& base,
                             int* q6k_shapes = nullptr);

// One dense pass's comparison with a reference's pass over the same tokens (a fixture object
// with argmax, argmax_gap, ppl and, when present, topk).
struct DenseComparison {
  double agreement = 0;        // argmax equal, all scored positions
  double clear_agreement = 0;  // argmax equal where the reference's top-2 gap >= clear_gap
  double ppl = 0, ref_ppl = 0, ppl_ratio = 0;
  double worst_topk = 0;  // largest |our logit - its| over its top-k rows
  int64_t topk_sets_equal = 0, topk_rows = 0;
};
// Prints `c` on one line, labelled `against`.
void PrintDenseComparison(const char* against, const DenseComparison& c);

// Scores a pass's logit rows as they come (row i predicts tokens[i + 1]; the last token's row is
// not scored), so that a long pass need not keep them all. `ref` and `tokens` must outlive it.
class DenseScorer {
 public:
  DenseScorer(const nlohmann::json& ref, const std::vector<int32_t>& tokens, int32_t vocab,
              double clear_gap);
  // Rows [first, first + count) of the pass.
  void Add(const float* rows, size_t first, size_t count);
  DenseComparison Result() const;

 private:
  const nlohmann::json& ref_;
  const std::vector<int32_t>& tokens_;
  const int32_t vocab_;
  const double clear_gap_;
  const std::vector<int32_t> ref_argmax_;
  const std::vector<double> gap_;
  int64_t agree_ = 0, clear_ = 0, clear_agree_ = 0;
  double nll_ = 0.0;
  DenseComparison topk_;  // its topk fields
};

// A dense pass over the fixture's `tokens` in `cache` (chunks of 256) with `tuning` applied to
// `model`, whose own tuning is put back afterwards, scored against the fixture (llama.cpp on the
// file: `llama`) and its `exact` object (the exact weights: `exact`), each comparison printed with
// `label` in front.
struct DensePair {
  DenseComparison llama, exact;
};
StatusOr<DensePair> DensePassUnder(LlamaModel& model, const CpuTuning& tuning, SessionCache& cache,
                                   const nlohmann::json& fx, const std::string& label);

// The reference's greedy continuation of one prompt (a fixture case).
struct GreedyCase {
  explicit GreedyCase(const nlohmann::json& c);
  std::string name;
  std::vector<int32_t> prompt, expected;
  std::vector<double> gap;  // the reference's top-2 logit gap at each step
};

// Free-running: our own argmax fed back, ASSERTed equal to the reference's at each step up to its
// first gap below `clear_gap`; `*same` = the steps compared. Call with ASSERT_NO_FATAL_FAILURE.
void FreeRunGreedy(LlamaModel& model, SessionCache& cache, const GreedyCase& c, double clear_gap,
                   const std::string& label, size_t* same);
// Teacher-forced: the reference's picks fed back, our argmax EXPECTed equal to its at every step
// whose gap is >= `clear_gap`; adds the steps compared to `*checked`. Call with
// ASSERT_NO_FATAL_FAILURE.
void TeacherForceGreedy(LlamaModel& model, SessionCache& cache, const GreedyCase& c,
                        double clear_gap, const std::string& label, int* checked);

// A cache of `spec` past eviction against the plain reference model (which rebuilds each token's
// cache as StreamingLLM defines it) over the same tokens.
struct StreamingComparison {
  CacheSpec effective;
  double ppl = 0, ref_ppl = 0;
  int64_t agree = 0, scored = 0;  // argmax equal at `agree` of `scored` positions
};
StatusOr<StreamingComparison> CompareWithPlainReference(const GoldenModel& golden,
                                                        const std::vector<int32_t>& tokens,
                                                        const CacheSpec& spec);

}  // namespace streamd::testing
