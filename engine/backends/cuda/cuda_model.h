// The CUDA backend: a Llama-family model whose forward pass runs on one NVIDIA GPU, with the
// KV block pool in device memory. Same contract as the CPU backend (ModelBackend).
//
// One step (all tokens of the batch at once; x is the f32 residual stream):
//   the engine's StepPlan (per token its session, text and cache positions, logits row; per
//     session its block table) -> one packed host-to-device copy
//   embed -> for each layer:
//     AddRmsNorm (adds the previous layer's output)  -> f16
//     GEMM [Wq;Wk;Wv] (cuBLAS, f16 in, f32 accumulate and out)
//     RoPE (q by text position, q_sink by cache position) and the K/V append: k by text
//       position and v, f16, into the paged blocks (one kernel)
//     attention: DecodeAttention (every session appends one token) or PrefillAttention
//     GEMM Wo -> AddRmsNorm -> GEMM [Wgate;Wup] -> SwiGLU -> GEMM Wdown
//   AddRmsNorm into the rows whose logits are wanted -> GEMM output head -> logits to the host
// Pure decode steps are captured once per (tokens, attention splits) as a CUDA graph and
// replayed: the step data lives at fixed device addresses, refreshed by one copy per step.
//
// Errors: every CUDA and cuBLAS call is checked; a failed step returns its Status (nothing is
// committed to any cache) and the engine reports it to the sessions of that step. After a
// sticky device error (illegal address, ...) every later step fails with the first error.
// Not thread-safe: the engine's scheduler thread owns it. The one exception is its pool's block
// copies (BlockPool::ReadBlocks / WriteBlocks, for session capture and restore), which run on
// the pool's own stream from any thread, also while a step runs or a graph is being captured.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cuda/cuda_device.h"
#include "engine/backends/cuda/cuda_weights.h"
#include "engine/backends/cuda/device_buffer.h"
#include "engine/model/model_backend.h"
#include "kernels/cuda/kernels.h"

namespace streamd::cuda {

struct CudaModelOptions {
  int device = 0;
  bool use_graphs = true;  // capture pure-decode steps as CUDA graphs
};

class CudaModel final : public ModelBackend {
 public:
  // Uploads a loaded model's weights (dequantized to f16). Fails with a message naming the
  // device and the numbers when there is no usable GPU or the weights do not fit.
  static StatusOr<std::unique_ptr<CudaModel>> FromCpuModel(const LlamaModel& model,
                                                           const CudaModelOptions& options = {});
  // Random weights of `config`'s shape generated on the device (config.tied_output must hold).
  static StatusOr<std::unique_ptr<CudaModel>> Random(const LlamaConfig& config, uint64_t seed,
                                                     const CudaModelOptions& options = {});
  ~CudaModel() override;
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const LlamaConfig& config() const override { return config_; }
  std::string_view backend_name() const override { return "cuda"; }
  std::string device_description() const override;
  uint64_t weight_bytes() const override { return weights_.bytes; }
  void set_threads(int32_t) override {}
  // A pool in device memory; RESOURCE_EXHAUSTED naming the device and its free memory when the
  // budget does not fit (a margin of 5% of free memory is left for workspaces).
  StatusOr<std::unique_ptr<BlockPool>> CreatePool(const KvShape& shape, int32_t block_size,
                                                  int64_t budget_bytes) override;
  StatusOr<int64_t> PoolBudgetFromFraction(double fraction) const override;
  Status Execute(const StepPlan& plan, float* logits) override;
  // Argmax on the device (kernels::cuda::ArgmaxRows); only the ids cross PCIe.
  Status ExecuteGreedy(const StepPlan& plan, int32_t* next_tokens) override;
  Status Health() const override { return broken_; }
  bool greedy_ids_on_device() const override { return true; }
  // A row of the last ExecuteGreedy's logits, still on the device until the next step.
  Status CopyGreedyStepLogits(int64_t row, float* out) override;

  const CudaDeviceInfo& device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  int64_t graphs_captured() const { return graphs_captured_; }

 private:
  CudaModel() = default;
  Status Init(const LlamaConfig& config, const CudaModelOptions& options);
  // Execute and ExecuteGreedy: exactly one of logits and next_tokens is set.
  Status Run(const StepPlan& plan, float* logits, int32_t* next_tokens);
  Status ValidatePlan(const StepPlan& plan) const;
  // Sizes the device workspace and the step buffers; growing drops the captured graphs.
  Status Reserve(int32_t n_tokens, int32_t n_seqs, int64_t n_ids, int32_t n_splits);
  // Enqueues the whole step on stream_ (no synchronisation, capturable).
  Status Enqueue(int32_t n, int32_t n_out, bool decode, int32_t n_tiles, int32_t n_splits,
                 int32_t keys_per_split, BlockPool& pool);
  void DropGraphs();
  Status Gemm(const uint16_t* w, int64_t rows, int64_t k, const uint16_t* x, int64_t n, float* y);
  Status Fail(Status s);  // records a sticky error

  LlamaConfig config_;
  CudaModelOptions options_;
  CudaDeviceInfo device_;
  CudaWeights weights_;
  DeviceBuffer inv_freq_;  // [head_dim / 2] double
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer cublas_workspace_;
  Status broken_;  // the first sticky error, if any

  // Device workspace, sized for cap_tokens_.
  int32_t cap_tokens_ = 0, cap_seqs_ = 0, cap_splits_ = 0;
  int64_t cap_ids_ = 0;
  DeviceBuffer x_, xb_, qkv_, q_sink_, attn_, proj_, gate_up_, h_, logits_, ids_, attn_ws_;
  // Step data: one host staging block (pinned) copied to one device block; fixed offsets.
  struct StepLayout {
    size_t tokens, seq_of, positions, cache_positions, out_rows, tables, tiles, ids, total;
  } step_layout_{};
  uint8_t* step_host_ = nullptr;  // cudaMallocHost
  DeviceBuffer step_dev_;

  // Captured decode steps by (pool base, pool blocks, block size, tokens, logits rows, splits,
  // keys per split): everything a graph bakes in (a later pool may reuse a freed pool's
  // address).
  using GraphKey = std::tuple<const void*, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t>;
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  int64_t graphs_captured_ = 0;
  int64_t greedy_rows_ = 0;  // logits rows the last successful ExecuteGreedy left in logits_
};

}  // namespace streamd::cuda
