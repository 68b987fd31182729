// A Llama model's weights in device memory, f16, in one allocation, laid out for cuBLAS:
// each matrix row-major [out_features, in_features] (GGUF's row order), with the projections
// that share an input fused: [Wq; Wk; Wv] and [Wgate; Wup], so a step runs one GEMM for each.
// Norm weights stay f32. A tied output head shares the embedding table.
//
// Two sources: a loaded GGUF model (Q4_0/Q4_1/Q8_0/F16/BF16/F32 rows dequantized on the host
// with the CPU backend's DequantizeRow, converted to f16, uploaded in slabs), or random
// weights made on the device (benchmarks of shapes whose file is not at hand: an 8B model's
// 16 GB of f16 would take minutes to generate and copy from the host).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "engine/backends/cpu/llama_weights.h"
#include "engine/backends/cuda/device_buffer.h"
#include "engine/model/llama_config.h"
#include "engine/util/status.h"

namespace streamd::cuda {

struct CudaLayerWeights {
  const float* attn_norm = nullptr;     // [dim]
  const uint16_t* wqkv = nullptr;       // [q_dim + 2 * kv_dim, dim]
  const uint16_t* wo = nullptr;         // [dim, q_dim]
  const float* ffn_norm = nullptr;      // [dim]
  const uint16_t* w_gate_up = nullptr;  // [2 * ffn_dim, dim]
  const uint16_t* w_down = nullptr;     // [dim, ffn_dim]
};

struct CudaWeights {
  DeviceBuffer arena;
  const uint16_t* embedding = nullptr;  // [vocab, dim]
  const uint16_t* output = nullptr;     // [vocab, dim]; == embedding when tied
  const float* output_norm = nullptr;   // [dim]
  std::vector<CudaLayerWeights> layers;
  uint64_t bytes = 0;  // of the arena
};

// Device bytes the weights of `config` take (what start-up checks against free memory).
uint64_t CudaWeightBytes(const LlamaConfig& config);

StatusOr<CudaWeights> UploadWeights(const LlamaConfig& config, const LlamaWeights& weights,
                                    cudaStream_t stream);
// Uniform(-a, a) with a = sqrt(3 / fan_in) (the embedding: a = 1), unit norms, tied head: the
// same distribution as engine/backends/cpu/synthetic_model.h, generated on the device.
StatusOr<CudaWeights> RandomWeights(const LlamaConfig& config, uint64_t seed, cudaStream_t stream);

}  // namespace streamd::cuda
