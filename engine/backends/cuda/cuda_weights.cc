#include "engine/backends/cuda/cuda_weights.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vec_ops.h"
#include "kernels/cuda/kernels.h"

namespace streamd::cuda {
namespace {

constexpr uint64_t kAlign = 256;  // cuBLAS and vector loads like aligned bases

uint64_t Aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Offsets of every tensor in the arena, computed once for both sources.
struct ArenaPlan {
  uint64_t embedding = 0, output = 0, output_norm = 0, total = 0;
  struct Layer {
    uint64_t attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down;
  };
  std::vector<Layer> layers;
};

ArenaPlan Plan(const LlamaConfig& c) {
  ArenaPlan p;
  uint64_t at = 0;
  auto take = [&](uint64_t bytes) {
    const uint64_t off = at;
    at += Aligned(bytes);
    return off;
  };
  const uint64_t dim = c.dim, vocab = c.vocab_size, q = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim;
  p.embedding = take(vocab * dim * 2);
  p.output = c.tied_output ? p.embedding : take(vocab * dim * 2);
  p.output_norm = take(dim * 4);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    ArenaPlan::Layer L;
    L.attn_norm = take(dim * 4);
    L.wqkv = take((q + 2 * kv) * dim * 2);
    L.wo = take(dim * q * 2);
    L.ffn_norm = take(dim * 4);
    L.w_gate_up = take(2 * ffn * dim * 2);
    L.w_down = take(dim * ffn * 2);
    p.layers.push_back(L);
  }
  p.total = at;
  return p;
}

StatusOr<CudaWeights> Allocate(const LlamaConfig& c, const ArenaPlan& plan) {
  CudaWeights w;
  STREAMD_RETURN_IF_ERROR(w.arena.Allocate(plan.total, "model weights (" + c.name + ")"));
  auto* base = w.arena.get<uint8_t>();
  w.bytes = plan.total;
  w.embedding = reinterpret_cast<const uint16_t*>(base + plan.embedding);
  w.output = reinterpret_cast<const uint16_t*>(base + plan.output);
  w.output_norm = reinterpret_cast<const float*>(base + plan.output_norm);
  for (const ArenaPlan::Layer& L : plan.layers) {
    w.layers.push_back({reinterpret_cast<const float*>(base + L.attn_norm),
                        reinterpret_cast<const uint16_t*>(base + L.wqkv),
                        reinterpret_cast<const uint16_t*>(base + L.wo),
                        reinterpret_cast<const float*>(base + L.ffn_norm),
                        reinterpret_cast<const uint16_t*>(base + L.w_gate_up),
                        reinterpret_cast<const uint16_t*>(base + L.w_down)});
  }
  return w;
}

// Dequantizes a [n_rows, cols] table, row r by dequantize(r, out), to f16 and copies it to `dst`,
// in slabs of about 64 MiB of host memory.
template <class RowFn>
Status UploadRows(int64_t n_rows, int64_t cols, const RowFn& dequantize, uint8_t* dst,
                  std::vector<uint16_t>& staging) {
  const int64_t slab_rows = std::max<int64_t>(1, (64LL << 20) / (cols * 2));
  for (int64_t r0 = 0; r0 < n_rows; r0 += slab_rows) {
    const int64_t rows = std::min(slab_rows, n_rows - r0);
    staging.resize(static_cast<size_t>(rows * cols));
    // Rows are independent: one strided share per hardware thread (start-up only).
    const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, rows);
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = w; r < rows; r += workers) {
          dequantize(r0 + r, row.data());
          kernels::cpu::FloatToHalfRow(row.data(), &staging[static_cast<size_t>(r * cols)], cols);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    STREAMD_CUDA_CHECK(cudaMemcpy(dst + r0 * cols * 2, staging.data(),
                                  static_cast<size_t>(rows * cols * 2), cudaMemcpyHostToDevice));
  }
  return OkStatus();
}

Status UploadMatrix(const WeightMatrix& m, uint8_t* dst, std::vector<uint16_t>& staging) {
  const auto row = [&m](int64_t r, float* out) {
    kernels::cpu::DequantizeRow(m.type, m.data + r * m.row_bytes, m.cols, out);
  };
  return UploadRows(m.rows, m.cols, row, dst, staging);
}

// The embedding table in whatever type it stays in (EmbeddingTable: the file's own when untied).
Status UploadTable(const EmbeddingTable& t, uint8_t* dst, std::vector<uint16_t>& staging) {
  const auto row = [&t](int64_t r, float* out) { t.DequantizeRow(r, out); };
  return UploadRows(t.rows, t.cols, row, dst, staging);
}

Status UploadF32(const float* src, int64_t n, uint8_t* dst) {
  STREAMD_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
  return OkStatus();
}

}  // namespace

uint64_t CudaWeightBytes(const LlamaConfig& config) { return Plan(config).total; }

StatusOr<CudaWeights> UploadWeights(const LlamaConfig& c, const LlamaWeights& src,
                                    cudaStream_t stream) {
  (void)stream;  // plain synchronous copies: start-up only
  const ArenaPlan plan = Plan(c);
  STREAMD_ASSIGN_OR_RETURN(CudaWeights w, Allocate(c, plan));
  uint8_t* base = w.arena.get<uint8_t>();
  std::vector<uint16_t> staging;
  STREAMD_RETURN_IF_ERROR(UploadTable(src.token_embedding, base + plan.embedding, staging));
  if (!c.tied_output)
    STREAMD_RETURN_IF_ERROR(UploadMatrix(src.output, base + plan.output, staging));
  STREAMD_RETURN_IF_ERROR(UploadF32(src.output_norm, c.dim, base + plan.output_norm));
  const uint64_t row = static_cast<uint64_t>(c.dim) * 2;
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& s = src.layers[l];
    const ArenaPlan::Layer& L = plan.layers[l];
    STREAMD_RETURN_IF_ERROR(UploadF32(s.attn_norm, c.dim, base + L.attn_norm));
    STREAMD_RETURN_IF_ERROR(UploadMatrix(s.wq, base + L.wqkv, staging));
    STREAMD_RETURN_IF_ERROR(UploadMatrix(s.wk, base + L.wqkv + c.q_dim() * row, staging));
    STREAMD_RETURN_IF_ERROR(
        UploadMatrix(s.wv, base + L.wqkv + (c.q_dim() + c.kv_dim()) * row, staging));
    STREAMD_RETURN_IF_ERROR(UploadMatrix(s.wo, base + L.wo, staging));
    STREAMD_RETURN_IF_ERROR(UploadF32(s.ffn_norm, c.dim, base + L.ffn_norm));
    STREAMD_RETURN_IF_ERROR(UploadMatrix(s.w_gate, base + L.w_gate_up, staging));
    STREAMD_RETURN_IF_ERROR(UploadMatrix(s.w_up, base + L.w_gate_up + c.ffn_dim * row, staging));
    STREAMD_RETURN_IF_ERROR(UploadMatrix(s.w_down, base + L.w_down, staging));
  }
  // A pageable cudaMemcpy may return before its DMA lands; the model's non-blocking stream
  // does not wait for the legacy stream, so wait here once.
  STREAMD_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

StatusOr<CudaWeights> RandomWeights(const LlamaConfig& c, uint64_t seed, cudaStream_t stream) {
  if (!c.tied_output) return InvalidArgumentError("random CUDA weights are always tied");
  const ArenaPlan plan = Plan(c);
  STREAMD_ASSIGN_OR_RETURN(CudaWeights w, Allocate(c, plan));
  uint8_t* base = w.arena.get<uint8_t>();
  uint64_t tensor = 0;  // each tensor draws from its own stream of the hash
  auto matrix = [&](uint64_t off, int64_t rows, int64_t cols, float bound) -> Status {
    STREAMD_CUDA_CHECK(kernels::cuda::FillUniformF16(reinterpret_cast<uint16_t*>(base + off),
                                                     rows * cols, bound, seed * 4096 + tensor++,
                                                     stream));
    return OkStatus();
  };
  auto ones = [&](uint64_t off, int64_t n) -> Status {
    STREAMD_CUDA_CHECK(
        kernels::cuda::FillF32(reinterpret_cast<float*>(base + off), n, 1.0f, stream));
    return OkStatus();
  };
  const auto a = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  STREAMD_RETURN_IF_ERROR(matrix(plan.embedding, c.vocab_size, c.dim, 1.0f));
  STREAMD_RETURN_IF_ERROR(ones(plan.output_norm, c.dim));
  for (const ArenaPlan::Layer& L : plan.layers) {
    STREAMD_RETURN_IF_ERROR(ones(L.attn_norm, c.dim));
    STREAMD_RETURN_IF_ERROR(matrix(L.wqkv, c.q_dim() + 2 * c.kv_dim(), c.dim, a(c.dim)));
    STREAMD_RETURN_IF_ERROR(matrix(L.wo, c.dim, c.q_dim(), a(c.dim)));
    STREAMD_RETURN_IF_ERROR(ones(L.ffn_norm, c.dim));
    STREAMD_RETURN_IF_ERROR(matrix(L.w_gate_up, 2LL * c.ffn_dim, c.dim, a(c.dim)));
    STREAMD_RETURN_IF_ERROR(matrix(L.w_down, c.dim, c.ffn_dim, a(c.ffn_dim)));
  }
  STREAMD_CUDA_CHECK(cudaStreamSynchronize(stream));
  return w;
}

}  // namespace streamd::cuda
