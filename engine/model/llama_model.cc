#include "engine/model/llama_model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "engine/model/cpu_ops.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd {
namespace {

using kernels::cpu::WeightType;

// Rows per work item of a parallel product: small enough to balance two to sixteen threads on
// a 576-row matrix, large enough that the tiled kernel reuses each activation block.
constexpr int64_t kRowChunk = 32;

// One matrix product of a fused group: out[t * ldo + r] = W[r] . x[t].
struct Product {
  const WeightMatrix* w;
  float* out;
  int64_t ldo;
};

int64_t Chunks(const WeightMatrix& w) { return (w.rows + kRowChunk - 1) / kRowChunk; }

// Must be called by every thread of a parallel region. Quantizes x once per weight type and
// runs the products of `group` (which share the input x: [n, k]) as one pool of row chunks.
template <size_t N>
void FusedMatMul(const Product (&group)[N], const float* x, int64_t n, uint8_t* xq_base,
                 size_t xq_stride) {
  const int64_t k = group[0].w->cols;
  // Distinct weight types get their own activation buffer; the usual case is one.
  WeightType types[N];
  int slot_of[N];
  int n_types = 0;
  for (size_t i = 0; i < N; ++i) {
    int s = 0;
    while (s < n_types && types[s] != group[i].w->type) ++s;
    if (s == n_types) types[n_types++] = group[i].w->type;
    slot_of[i] = s;
  }
#pragma omp for schedule(static) collapse(2)
  for (int s = 0; s < n_types; ++s) {
    for (int64_t t = 0; t < n; ++t) {
      kernels::cpu::PrepareActivations(types[s], x, k, k, t, t + 1, xq_base + s * xq_stride);
    }
  }
  int64_t total = 0;
  for (size_t i = 0; i < N; ++i) total += Chunks(*group[i].w);
#pragma omp for schedule(dynamic, 1)
  for (int64_t c = 0; c < total; ++c) {
    size_t i = 0;
    int64_t first = c;
    while (first >= Chunks(*group[i].w)) first -= Chunks(*group[i++].w);
    const WeightMatrix& w = *group[i].w;
    const int64_t r0 = first * kRowChunk;
    const int64_t r1 = std::min(w.rows, r0 + kRowChunk);
    kernels::cpu::MatMulRows(w.type, w.data, w.row_bytes, w.cols,
                             xq_base + slot_of[i] * xq_stride, n, group[i].out, group[i].ldo, r0,
                             r1);
  }
}

}  // namespace

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& path) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return FromFile(std::move(file));
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::FromFile(std::unique_ptr<gguf::GgufFile> file) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  STREAMD_ASSIGN_OR_RETURN(model->config_, ReadLlamaConfig(*file));
  STREAMD_ASSIGN_OR_RETURN(model->weights_, BindLlamaWeights(*file, model->config_));
  model->rope_ = std::make_unique<RopeTable>(model->config_);
  model->file_ = std::move(file);
  model->set_threads(static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  return model;
}

void LlamaModel::ReserveWorkspace(int64_t n, int32_t cache_capacity) {
  const LlamaConfig& c = config_;
  if (n > ws_.n_tokens) {
    ws_.n_tokens = n;
    ws_.x.resize(n * c.dim);
    ws_.xb.resize(n * std::max(c.dim, c.ffn_dim));
    ws_.q.resize(n * c.q_dim());
    ws_.k.resize(n * c.kv_dim());
    ws_.v.resize(n * c.kv_dim());
    ws_.attn.resize(n * c.q_dim());
    ws_.proj.resize(n * c.dim);
    ws_.gate.resize(n * c.ffn_dim);
    ws_.up.resize(n * c.ffn_dim);
    ws_.rope_cos.resize(n * rope_->half_dim());
    ws_.rope_sin.resize(n * rope_->half_dim());
  }
  size_t xq = 0;
  for (WeightType t : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ4_0,
                       WeightType::kQ4_1, WeightType::kQ8_0}) {
    xq = std::max(xq, kernels::cpu::ActivationBytes(t, n, std::max(c.dim, c.ffn_dim)));
  }
  xq = (xq + 63) / 64 * 64;
  if (ws_.xq.size() < 3 * xq) ws_.xq.resize(3 * xq);
  const size_t scores = static_cast<size_t>(threads_) * cache_capacity;
  if (ws_.scores.size() < scores) ws_.scores.resize(scores);
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, DenseKvCache& cache, LogitsMode mode,
                           float* logits) {
  const LlamaConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return InvalidArgumentError("forward: the batch has no tokens");
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(tokens[i]) + " at index " +
                                  std::to_string(i) + " is outside the vocabulary [0, " +
                                  std::to_string(c.vocab_size) + ")");
    }
  }
  const int32_t start = cache.length();
  if (n > cache.capacity() - start) {
    return OutOfRangeError("forward: " + std::to_string(n) + " tokens do not fit in the cache (" +
                           std::to_string(start) + " of " + std::to_string(cache.capacity()) +
                           " positions used)");
  }
  ReserveWorkspace(n, cache.capacity());

  Workspace& ws = ws_;
  const int32_t dim = c.dim, hd = c.head_dim, half = rope_->half_dim();
  const int32_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  const int32_t group = c.n_heads / c.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t xq_stride = ws.xq.size() / 3;
  const int64_t out_first = mode == LogitsMode::kAll ? 0 : n - 1;
  const int64_t n_out = n - out_first;

#pragma omp parallel num_threads(threads_)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n; ++t) {
      const WeightMatrix& e = weights_.token_embedding;
      kernels::cpu::DequantizeRow(e.type, e.data + tokens[t] * e.row_bytes, dim, &ws.x[t * dim]);
      rope_->Angles(start + t, &ws.rope_cos[t * half], &ws.rope_sin[t * half]);
    }

    for (int32_t l = 0; l < c.n_layers; ++l) {
      const LlamaLayerWeights& w = weights_.layers[l];
      // --- attention block ---
#pragma omp for schedule(static)
      for (int64_t t = 0; t < n; ++t) RmsNorm(&ws.x[t * dim], w.attn_norm, c.rms_eps, dim, &ws.xb[t * dim]);
      const Product qkv[] = {{&w.wq, ws.q.data(), q_dim},
                             {&w.wk, ws.k.data(), kv_dim},
                             {&w.wv, ws.v.data(), kv_dim}};
      FusedMatMul(qkv, ws.xb.data(), n, ws.xq.data(), xq_stride);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < n; ++t) {
        const float* cs = &ws.rope_cos[t * half];
        const float* sn = &ws.rope_sin[t * half];
        ApplyRope(&ws.q[t * q_dim], c.n_heads, hd, cs, sn);
        ApplyRope(&ws.k[t * kv_dim], c.n_kv_heads, hd, cs, sn);
        kernels::cpu::FloatToHalfRow(&ws.k[t * kv_dim], cache.key(l, start + t), kv_dim);
        kernels::cpu::FloatToHalfRow(&ws.v[t * kv_dim], cache.value(l, start + t), kv_dim);
      }
#pragma omp for schedule(dynamic, 1) collapse(2)
      for (int64_t t = 0; t < n; ++t) {
        for (int32_t h = 0; h < c.n_heads; ++h) {
          const int32_t ctx = start + static_cast<int32_t>(t) + 1;  // causal: keys 0..pos
          const int32_t kv_off = (h / group) * hd;
          const float* q = &ws.q[t * q_dim + h * hd];
          float* scores = &ws.scores[static_cast<size_t>(omp_get_thread_num()) * cache.capacity()];
          for (int32_t j = 0; j < ctx; ++j) {
            scores[j] = kernels::cpu::DotF32F16(q, cache.key(l, j) + kv_off, hd) * scale;
          }
          SoftmaxInPlace(scores, ctx);
          float* out = &ws.attn[t * q_dim + h * hd];
          std::fill(out, out + hd, 0.0f);
          for (int32_t j = 0; j < ctx; ++j) {
            kernels::cpu::AxpyF16(scores[j], cache.value(l, j) + kv_off, out, hd);
          }
        }
      }
      const Product wo[] = {{&w.wo, ws.proj.data(), dim}};
      FusedMatMul(wo, ws.attn.data(), n, ws.xq.data(), xq_stride);
      // --- feed-forward block ---
#pragma omp for schedule(static)
      for (int64_t t = 0; t < n; ++t) {
        AddInPlace(&ws.x[t * dim], &ws.proj[t * dim], dim);
        RmsNorm(&ws.x[t * dim], w.ffn_norm, c.rms_eps, dim, &ws.xb[t * dim]);
      }
      const Product gate_up[] = {{&w.w_gate, ws.gate.data(), ffn}, {&w.w_up, ws.up.data(), ffn}};
      FusedMatMul(gate_up, ws.xb.data(), n, ws.xq.data(), xq_stride);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < n; ++t) SiluMulInPlace(&ws.gate[t * ffn], &ws.up[t * ffn], ffn);
      const Product down[] = {{&w.w_down, ws.proj.data(), dim}};
      FusedMatMul(down, ws.gate.data(), n, ws.xq.data(), xq_stride);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < n; ++t) AddInPlace(&ws.x[t * dim], &ws.proj[t * dim], dim);
    }

    // --- output head, only for the tokens whose logits were asked for ---
#pragma omp for schedule(static)
    for (int64_t t = out_first; t < n; ++t) {
      RmsNorm(&ws.x[t * dim], weights_.output_norm, c.rms_eps, dim, &ws.xb[(t - out_first) * dim]);
    }
    const Product head[] = {{&weights_.output, logits, c.vocab_size}};
    FusedMatMul(head, ws.xb.data(), n_out, ws.xq.data(), xq_stride);
  }
  cache.set_length(start + static_cast<int32_t>(n));
  return OkStatus();
}

}  // namespace streamd
