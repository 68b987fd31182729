// A Llama-family model on the CPU: loads a GGUF file, binds its weights in place and runs
// batched forward passes (prefill and decode are the same code; decode is n_tokens == 1).
//
// Data path per layer, for all tokens of the batch at once:
//   x -> RMSNorm -> [Wq|Wk|Wv] (one activation quantization, one parallel product)
//     -> the family's biases and q/k norms (model_family.h) -> RoPE
//     -> K,V written into each session's paged cache (f16) -> attention per (token, head)
//     over that session's sinks and window -> Wo -> x += .
//   x -> RMSNorm -> [Wgate|Wup] -> silu(gate) * up -> Wdown -> x += .
// Every product reads each weight block once per step for the whole batch. A build plan may
// run large decode steps token-parallel instead (llama_token_parallel.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backends/cpu/cpu_tuning.h"
#include "engine/backends/cpu/llama_weights.h"
#include "engine/cache/session_cache.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/llama_config.h"
#include "engine/model/model_backend.h"
#include "engine/model/rope.h"
#include "engine/util/status.h"
#include "engine/util/thread_pool.h"

namespace streamd {

// The CPU backend (ModelBackend); also the reference the CUDA backend is tested against.
class LlamaModel : public ModelBackend {
 public:
  // AMX-packed weight copies made earlier (a build plan's, engine/build_plan) to use instead of
  // packing at load; ignored where the AMX level does not run. The bytes need only outlive Load.
  struct Prepacked {
    const uint8_t* amx_bytes = nullptr;
    uint64_t amx_size = 0;
    // The layer matrices the plan's 8-bit copies will serve alone: not converted at load
    // (BindLlamaWeights); ApplyTuning must then be given the plan's copies.
    ServedByPlanCopies served_by_vnni8;
    // Without a plan: the layer matrices whose 8-bit copy ApplyTuning will pack from the file's
    // own rows and that it serves alone (ApplyKQuantDefaults): not converted at load either.
    ServedByPlanCopies packed_from_file;
  };
  static StatusOr<std::unique_ptr<LlamaModel>> Load(const std::string& path,
                                                    const Prepacked* prepacked = nullptr);
  // Takes ownership of an already opened file (tests build synthetic models in memory).
  static StatusOr<std::unique_ptr<LlamaModel>> FromFile(std::unique_ptr<gguf::GgufFile> file,
                                                        const Prepacked* prepacked = nullptr);
  // Parses GGUF bytes held in memory; the model keeps them.
  static StatusOr<std::unique_ptr<LlamaModel>> FromBytes(std::vector<uint8_t> bytes);

  const LlamaConfig& config() const override { return config_; }
  std::string_view backend_name() const override { return "cpu"; }
  std::string device_description() const override;
  // What a decode step reads: the plan's 8-bit copies where it runs them (DecodeReadBytes).
  uint64_t weight_bytes() const override { return DecodeReadBytes(weights_); }
  // f16 K/V, or int8 with the scales SetInt8KvCache gave (a plan's int8 KV cache).
  KvShape CacheShape() const override;
  // The local layers of a model with a native sliding window (Gemma 3), while the cache is f16.
  LayerSplit LocalLayerSplit() const override;
  // From now on CacheShape says int8 with these scales (they must fit the model); null goes
  // back to f16. Execute runs pools of either kind, whatever this says.
  Status SetInt8KvCache(std::shared_ptr<const KvInt8Scales> scales);
  // A host-memory pool (BlockPool::Create).
  StatusOr<std::unique_ptr<BlockPool>> CreatePool(const KvShape& shape, int32_t block_size,
                                                  int64_t budget_bytes) override;
  StatusOr<int64_t> PoolBudgetFromFraction(double fraction) const override {
    return BlockPool::BudgetFromFraction(fraction);
  }
  const gguf::GgufFile& file() const { return *file_; }
  const LlamaWeights& weights() const { return weights_; }

  // Worker threads used by Forward (default: hardware concurrency).
  void set_threads(int32_t n) override;
  void RunOnHostThreads(int64_t n, const std::function<void(int64_t)>& fn) override;
  int32_t threads() const { return threads_; }

  // Kernel choices (a build plan's, or candidates while one is tuned). Validated first
  // (ValidateCpuTuning); every ShapeIsa must name a product shape of this model. threads 0
  // keeps the current thread count. The matrices it runs at 8 bits get their rows-in-lanes
  // copies: `vnni8_copies` (a plan's, Vnni8CopiesBlob's layout; checked to be the size this
  // tuning needs) or packed here. Not thread-safe with Execute.
  // `copied`: told of each range of vnni8_copies once it is copied (UsePrepackedVnni8Copies);
  // `packed`: of each matrix once its copy is packed here (AddVnni8PackedCopies).
  Status ApplyTuning(const CpuTuning& tuning, std::span<const uint8_t> vnni8_copies = {},
                     const SourceCopied& copied = nullptr, const MatrixPacked& packed = nullptr);
  const CpuTuning& tuning() const { return tuning_; }
  // Once a plan's tuning is applied for good (serving): frees the converted rows that no product
  // reads any more (ReleaseConvertedRowsServedByVnni8Copies). Returns the bytes freed.
  uint64_t ReleaseUnreadConvertedRows() {
    return ReleaseConvertedRowsServedByVnni8Copies(weights_);
  }
  // The matrices products run over (output head, then each layer's projections): the shapes a
  // tuner times.
  std::vector<const WeightMatrix*> ProductMatrices() const;
  // One product y[t * w.rows + r] = W[r] . x[t] over n tokens (x: [n, w.cols] f32) through the
  // same activation quantization, row split and per-shape level as Execute: what the tuner
  // times one shape with. w must be one of ProductMatrices(). Not thread-safe with Execute.
  void RunProduct(const WeightMatrix& w, const float* x, int64_t n, float* y);

  // Steps Execute has run token-parallel (CpuTuning::decode_by_tokens_from).
  int64_t steps_by_tokens() const { return steps_by_tokens_.load(std::memory_order_relaxed); }

  // Runs one step plan (ModelBackend's contract). Errors: a plan over a pool in device memory,
  // or sequences the plan does not describe consistently.
  Status Execute(const StepPlan& plan, float* logits) override;

 private:
  LlamaModel() = default;
  // The execution-side view of a plan: RoPE angles per token and the host block tables.
  void PrepareTokens(const StepPlan& plan);
  // The plan's pools against this model: OK, or what does not fit.
  Status CheckPools(const StepPlan& plan) const;
  // Where layer l's f16 K/V are: the local layers' pool when the plan keeps them apart.
  uint16_t* LayerKv(const StepPlan& plan, int32_t l) const;
  // Layer l's table for sequence s of the step.
  const kernels::SinkWindowTable& LayerTable(int32_t l, int32_t s) const {
    return (config_.IsLocalLayer(l) ? ws_.local_tables : ws_.tables)[s];
  }
  void ReserveWorkspace(int64_t n_tokens, int64_t max_keys);

  // What the per-token steps of one Execute read besides the workspace.
  struct StepView {
    const StepPlan* plan;
    const kernels::KvPoolLayout* layout;
    const KvInt8Scales* kv_scales;  // the pool's, or null for f16
    size_t xq_stride;               // bytes of each activation slot in ws_.xq
  };
  // A layer's elementwise steps for token t (llama_model.cc); each touches only token t's rows,
  // so both execution orders share them.
  void NormForAttention(const StepView& step, int32_t layer, int64_t t);
  void FamilyExtras(int32_t layer, int64_t t);
  void RopeAndWriteKv(const StepView& step, int32_t layer, int64_t t);
  void AttendKvHeads(const StepView& step, int32_t layer, int64_t t, int32_t g0, int32_t g1,
                     int thread);
  void NormForFfn(int32_t layer, int64_t t);
  void PostNorm(const float* weight, int64_t t);
  void GatedActivation(int64_t t);
  void NormForHead(const StepView& step, int64_t t);
  // Token-parallel decode (llama_token_parallel.cc): whether this step runs it, the step, and
  // one thread's share of tokens [t0, t1) up to the output head's norm.
  bool RunsByTokens(const StepPlan& plan) const;
  void ExecuteByTokens(const StepView& step, float* logits);
  void RunTokens(const StepView& step, int64_t t0, int64_t t1, int thread);

  std::vector<uint8_t> owned_bytes_;  // FromBytes: the file's storage (moved, never copied)
  std::unique_ptr<gguf::GgufFile> file_;
  LlamaConfig config_;
  LlamaWeights weights_;
  std::unique_ptr<RopeTable> rope_;
  // The local layers' table (ModelFamily::local_period), or null: every layer uses rope_.
  std::unique_ptr<RopeTable> local_rope_;
  LayerSplit layer_split_;  // the local layers and their places in the two pools, or empty
  int32_t threads_ = 1;
  CpuTuning tuning_;
  std::shared_ptr<const KvInt8Scales> kv_int8_scales_;  // SetInt8KvCache
  std::unique_ptr<ThreadPool> thread_pool_;             // threads_ threads (the caller included)
  std::vector<uint8_t> product_xq_;                     // RunProduct's quantized activations
  std::atomic<int64_t> steps_by_tokens_{0};

  // Scratch reused across calls; sized for the largest batch seen so far.
  struct Workspace {
    int64_t n_tokens = 0;
    std::vector<float> x, xb, q, q_sink, k, v, attn, proj, gate, up;
    std::vector<float> rope_cos, rope_sin, sink_cos, sink_sin;  // [n_tokens, head_dim / 2]
    // The same angles from local_rope_, when the model has local layers.
    std::vector<float> local_cos, local_sin, local_sink_cos, local_sink_sin;
    // Quantized activations: three slots (one per weight format a fused group uses), each
    // n_tokens * xq_token_bytes (the widest row's bytes per token in any format) or more.
    std::vector<uint8_t> xq;
    size_t xq_token_bytes = 0;
    // [threads][query heads per KV head * (max keys one query sees + 2 * head_dim)]: the
    // scores, and an int8 cache's scaled queries after them.
    std::vector<float> scores;
    // Per token of the step: whether its sink rotation differs from its window rotation
    // (only after eviction starts); per sequence its table over the plan's block ids.
    std::vector<uint8_t> has_sink_rope;
    std::vector<kernels::SinkWindowTable> tables;
    // The local layers' tables: their own caches' (StepPlan::local_pool), or the same tables
    // limited to their native window (SinkWindowTable::span).
    std::vector<kernels::SinkWindowTable> local_tables;
  } ws_;
};

}  // namespace streamd
