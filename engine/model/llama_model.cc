#include "engine/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd {
namespace {

using kernels::cpu::WeightType;

// Rows per work item of a parallel product, by default (CpuTuning::DefaultSplits; a build plan
// may choose others): about a matrix's rows / (2 threads), so every thread gets two items of
// it, in multiples of kRowQuantum, between 96 and 768 rows (the head's 49152 rows still make
// 64 items, so a thread the OS takes away holds up little). Long items are long prefetch
// streams: each kernel fetches the rows after the ones it computes, and a thread's next item
// used to start cold. Measured with `streamd bench --sessions 1,16 --decode-steps 30 --threads 2
// --window 192` (step ms, three alternations): fixed 96 rows 4.1-4.4 / 24.0-25.9, fixed 384
// 3.7-6.0 / 21.8-23.9, this with a cap of 768 3.56-3.8 / 20.7-21.5 (1536: the same; 4096: 1
// session 3.86-3.97); one thread unchanged. (Earlier, fixed sizes of 32, 48, 96 and 144 rows gave
// 210, 235, 279 and 289 tok/s for one session.)
// Batches of 6 or more tokens take one item per thread instead (rows / threads): each item then
// packs its tokens' activations once (the AMX level's PackTokens) and starts one cold row tile,
// and these batches are bound by arithmetic, not by the weight stream. Measured (`--sessions
// 1,4,8,16 --decode-steps 100..200 --window 192`, three or four alternations, step ms): 16
// sessions 14.8-14.9 -> 13.8-14.0, 8 sessions 8.9-9.2 -> 8.6-9.0, one and four unchanged; 16
// sessions at the AVX-512 level 22.5-23.9 -> 22.2-22.5. Two items per thread for these was the
// faster side before; four per thread made 16 sessions 15.4-16.0.

// One matrix product of a fused group: out[t * ldo + r] = W[r] . x[t].
struct Product {
  const WeightMatrix* w;
  float* out;
  int64_t ldo;
};

// Rows per work item for products of n tokens. E.g. by default at 2 threads and n < 6:
// SmolLM2's 576-row matrices 144 rows, 192-row ones 96, 1536-row ones 384.
int64_t RowChunk(const WeightMatrix& w, const RowSplit& split, int threads) {
  const int64_t items = static_cast<int64_t>(split.items_per_thread) * threads;
  const int64_t per = (w.rows + items - 1) / items;
  const int64_t rounded = (per + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
  return std::clamp(rounded, split.min_rows, split.max_rows);
}

// Quantizes x once per weight type and runs the products of `group` (which share the input
// x: [n, k]) as one pool of row chunks. produce(t) runs first for each token t, in the task
// that then quantizes its row: the elementwise step that makes x (residual add, norm, SwiGLU)
// needs no loop of its own (each ParallelFor is a fork and a join of the pool; these steps are
// ~1 us of work per token).
template <size_t N, class Produce>
void FusedMatMul(ThreadPool& pool, const CpuTuning& tuning, const Product (&group)[N],
                 const float* x, int64_t n, uint8_t* xq_base, size_t xq_stride,
                 Produce&& produce) {
  const int64_t k = group[0].w->cols;
  const int bucket = TokenBucket(n);
  // Distinct weight types, and 12- or 8-bit activations, get their own activation buffer; the
  // usual case is one.
  WeightType types[N];
  bool int8[N];
  int slot_of[N];
  int n_types = 0;
  for (size_t i = 0; i < N; ++i) {
    const bool eight = group[i].w->int8_by_bucket[bucket];
    int s = 0;
    while (s < n_types && (types[s] != group[i].w->type || int8[s] != eight)) ++s;
    if (s == n_types) {
      types[n_types] = group[i].w->type;
      int8[n_types++] = eight;
    }
    slot_of[i] = s;
  }
  pool.ParallelFor(n, [&](int64_t t, int) {
    produce(t);
    for (int s = 0; s < n_types; ++s) {
      if (int8[s]) {
        kernels::cpu::PrepareActivations8(x, k, k, t, t + 1, xq_base + s * xq_stride);
      } else {
        kernels::cpu::PrepareActivations(types[s], x, k, k, t, t + 1, xq_base + s * xq_stride);
      }
    }
  });
  int64_t rows[N], chunks[N], total = 0;  // per product: rows per work item, work items
  for (size_t i = 0; i < N; ++i) {
    rows[i] = RowChunk(*group[i].w, tuning.split[bucket], pool.threads());
    chunks[i] = (group[i].w->rows + rows[i] - 1) / rows[i];
    total += chunks[i];
  }
  pool.ParallelFor(total, [&](int64_t c, int) {
    size_t i = 0;
    int64_t first = c;
    while (first >= chunks[i]) first -= chunks[i++];
    const WeightMatrix& w = *group[i].w;
    const int64_t r0 = first * rows[i];
    const int64_t r1 = std::min(w.rows, r0 + rows[i]);
    const int8_t isa = w.isa_by_bucket[bucket];
    if (int8[slot_of[i]]) {
      kernels::cpu::MatMulRows8(w.type, w.data, w.row_bytes, w.cols,
                                xq_base + slot_of[i] * xq_stride, n, group[i].out, group[i].ldo,
                                r0, r1, w.vnni8_packed);
    } else if (isa < 0) {
      kernels::cpu::MatMulRows(w.type, w.data, w.row_bytes, w.cols,
                               xq_base + slot_of[i] * xq_stride, n, group[i].out, group[i].ldo,
                               r0, r1, w.amx_packed);
    } else {
      kernels::cpu::MatMulRowsAt(static_cast<kernels::cpu::Isa>(isa), w.type, w.data,
                                 w.row_bytes, w.cols, xq_base + slot_of[i] * xq_stride, n,
                                 group[i].out, group[i].ldo, r0, r1, w.amx_packed);
    }
  });
}

}  // namespace

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& path,
                                                       const Prepacked* prepacked) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return FromFile(std::move(file), prepacked);
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::FromFile(std::unique_ptr<gguf::GgufFile> file,
                                                           const Prepacked* prepacked) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  STREAMD_ASSIGN_OR_RETURN(model->config_, ReadLlamaConfig(*file));
  STREAMD_ASSIGN_OR_RETURN(model->weights_, BindLlamaWeights(*file, model->config_));
  if (kernels::cpu::IsaSupported(kernels::cpu::Isa::kAmx)) {
    if (prepacked != nullptr && prepacked->amx_size > 0) {
      STREAMD_RETURN_IF_ERROR(
          UsePrepackedAmxCopies(model->weights_, prepacked->amx_bytes, prepacked->amx_size));
    } else {
      AddAmxPackedCopies(model->weights_);
    }
  }
  model->rope_ = std::make_unique<RopeTable>(model->config_);
  model->file_ = std::move(file);
  model->set_threads(static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  return model;
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::FromBytes(std::vector<uint8_t> bytes) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file,
                           gguf::GgufFile::FromBuffer(bytes.data(), bytes.size()));
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, FromFile(std::move(file)));
  model->owned_bytes_ = std::move(bytes);  // a moved vector keeps its buffer: views stay valid
  return model;
}

void LlamaModel::ReserveWorkspace(int64_t n, int64_t max_keys) {
  const LlamaConfig& c = config_;
  if (n > ws_.n_tokens) {
    const int64_t half = rope_->half_dim();
    ws_.n_tokens = n;
    ws_.x.resize(n * c.dim);
    ws_.xb.resize(n * std::max(c.dim, c.ffn_dim));
    ws_.q.resize(n * c.q_dim());
    ws_.q_sink.resize(n * c.q_dim());
    ws_.k.resize(n * c.kv_dim());
    ws_.v.resize(n * c.kv_dim());
    ws_.attn.resize(n * c.q_dim());
    ws_.proj.resize(n * c.dim);
    ws_.gate.resize(n * c.ffn_dim);
    ws_.up.resize(n * c.ffn_dim);
    for (auto* v : {&ws_.rope_cos, &ws_.rope_sin, &ws_.sink_cos, &ws_.sink_sin}) v->resize(n * half);
  }
  size_t xq = 0;
  for (WeightType t : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ4_0,
                       WeightType::kQ4_1, WeightType::kQ8_0}) {
    xq = std::max(xq, kernels::cpu::ActivationBytes(t, n, std::max(c.dim, c.ffn_dim)));
  }
  xq = (xq + 63) / 64 * 64;
  if (ws_.xq.size() < 3 * xq) ws_.xq.resize(3 * xq);
  // Each attention task scores one KV head's group of query heads at once.
  const size_t scores = static_cast<size_t>(threads_) * (c.n_heads / c.n_kv_heads) *
                        (max_keys + 2 * static_cast<size_t>(c.head_dim));
  if (ws_.scores.size() < scores) ws_.scores.resize(scores);
}

void LlamaModel::PrepareTokens(const StepPlan& plan) {
  const int32_t half = rope_->half_dim();
  ws_.has_sink_rope.clear();
  ws_.tables.clear();
  for (size_t s = 0; s < plan.seqs.size(); ++s) ws_.tables.push_back(plan.HostTable(s));
  for (int32_t t = 0; t < plan.n_tokens(); ++t) {
    rope_->Angles(plan.position[t], &ws_.rope_cos[t * half], &ws_.rope_sin[t * half]);
    ws_.has_sink_rope.push_back(plan.NeedsSinkRotation(t));
    if (ws_.has_sink_rope.back()) {
      rope_->Angles(plan.cache_position[t], &ws_.sink_cos[t * half], &ws_.sink_sin[t * half]);
    }
  }
}

void LlamaModel::set_threads(int32_t n) {
  threads_ = n > 0 ? n : 1;
  thread_pool_ = std::make_unique<ThreadPool>(threads_);
  tuning_.threads = threads_;
}

std::vector<const WeightMatrix*> LlamaModel::ProductMatrices() const {
  return streamd::ProductMatrices(weights_);
}

void LlamaModel::RunProduct(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  const size_t bytes = kernels::cpu::ActivationBytes(w.type, n, w.cols);
  if (product_xq_.size() < bytes) product_xq_.resize(bytes);
  const Product one[] = {{&w, y, w.rows}};
  FusedMatMul(*thread_pool_, tuning_, one, x, n, product_xq_.data(), bytes, [](int64_t) {});
}

Status LlamaModel::ApplyTuning(const CpuTuning& tuning, std::span<const uint8_t> vnni8_copies) {
  STREAMD_RETURN_IF_ERROR(ValidateCpuTuning(tuning));
  const std::vector<WeightMatrix*> matrices = streamd::ProductMatrices(weights_);
  // Checked in full before anything changes: a tuning is applied whole or not at all.
  for (size_t i = 0; i < tuning.isa.size(); ++i) {
    const ShapeIsa& s = tuning.isa[i];
    const bool found = std::any_of(matrices.begin(), matrices.end(), [&](const WeightMatrix* m) {
      return m->type == s.type && m->rows == s.rows && m->cols == s.cols;
    });
    if (!found) {
      return InvalidArgumentError("tuning.isa[" + std::to_string(i) + "]: this model has no " +
                                  std::to_string(s.rows) + "x" + std::to_string(s.cols) + " " +
                                  WeightTypeName(s.type) + " matrix");
    }
  }
  // The levels and 8-bit choices this tuning gives each matrix, set on scratch copies first, so
  // that the size its 8-bit copies need is Vnni8CopiesBytes's (what UsePrepackedVnni8Copies
  // checks) and nothing changes before it is checked.
  std::vector<WeightMatrix> tuned;
  tuned.reserve(matrices.size());
  for (const WeightMatrix* m : matrices) {
    tuned.push_back(*m);
    tuned.back().isa_by_bucket.fill(-1);
    tuned.back().int8_by_bucket.fill(false);
  }
  for (const ShapeIsa& s : tuning.isa) {
    for (WeightMatrix& m : tuned) {
      if (m.type == s.type && m.rows == s.rows && m.cols == s.cols) {
        m.isa_by_bucket[s.bucket] = static_cast<int8_t>(s.isa);
        m.int8_by_bucket[s.bucket] = s.activation_bits == 8;
      }
    }
  }
  if (!vnni8_copies.empty()) {
    std::vector<const WeightMatrix*> views;
    for (const WeightMatrix& m : tuned) views.push_back(&m);
    const uint64_t expected = Vnni8CopiesBytes(views);
    if (expected != vnni8_copies.size()) {
      return InvalidArgumentError("the 8-bit packed weights are " +
                                  std::to_string(vnni8_copies.size()) +
                                  " bytes; this tuning's are " + std::to_string(expected));
    }
  }
  for (size_t i = 0; i < matrices.size(); ++i) {
    matrices[i]->isa_by_bucket = tuned[i].isa_by_bucket;
    matrices[i]->int8_by_bucket = tuned[i].int8_by_bucket;
  }
  // A plan's copies if it has them (only an allocation can fail now: then they are packed, or
  // the GGUF rows serve), else packed here once.
  if (!vnni8_copies.empty()) {
    static_cast<void>(UsePrepackedVnni8Copies(weights_, vnni8_copies.data(), vnni8_copies.size()));
  }
  AddVnni8PackedCopies(weights_);
  tuning_ = tuning;
  if (tuning.threads > 0 && tuning.threads != threads_) set_threads(tuning.threads);
  tuning_.threads = threads_;
  return OkStatus();
}

void LlamaModel::RunOnHostThreads(int64_t n, const std::function<void(int64_t)>& fn) {
  thread_pool_->ParallelFor(n, [&](int64_t i, int) { fn(i); });
}

std::string LlamaModel::device_description() const {
  std::string amx;
  if (weights_.amx_packed_bytes > 0) {
    amx = ", AMX-packed weights " +
          std::to_string((weights_.amx_packed_bytes + (1 << 19)) >> 20) + " MiB";
  }
  return std::string("cpu (") + kernels::cpu::IsaName(kernels::cpu::ActiveIsa()) + ", " +
         std::to_string(threads_) + " threads" + amx + ")";
}

KvShape LlamaModel::CacheShape() const {
  KvShape shape{config_.n_layers, config_.n_kv_heads, config_.head_dim};
  if (kv_int8_scales_ != nullptr) {
    shape.dtype = kernels::KvDtype::kInt8;
    shape.int8_scales = kv_int8_scales_;
  }
  return shape;
}

Status LlamaModel::SetInt8KvCache(std::shared_ptr<const KvInt8Scales> scales) {
  if (scales != nullptr &&
      (scales->n_layers() != config_.n_layers || scales->n_kv_heads() != config_.n_kv_heads ||
       scales->head_dim() != config_.head_dim)) {
    return InvalidArgumentError(
        "int8 KV scales for " + std::to_string(scales->n_layers()) + " layers x " +
        std::to_string(scales->n_kv_heads()) + " KV heads x " +
        std::to_string(scales->head_dim()) + " do not fit " + config_.name + " (" +
        std::to_string(config_.n_layers) + " x " + std::to_string(config_.n_kv_heads) + " x " +
        std::to_string(config_.head_dim) + ")");
  }
  kv_int8_scales_ = std::move(scales);
  return OkStatus();
}

StatusOr<std::unique_ptr<BlockPool>> LlamaModel::CreatePool(const KvShape& shape,
                                                            int32_t block_size,
                                                            int64_t budget_bytes) {
  return BlockPool::Create(shape, block_size, budget_bytes);
}

Status LlamaModel::Execute(const StepPlan& plan, float* logits) {
  if (plan.pool == nullptr || plan.n_tokens() == 0 || plan.seqs.empty()) {
    return InvalidArgumentError("execute: the step plan is empty");
  }
  if (!plan.pool->host_accessible()) {
    return InvalidArgumentError("execute: the CPU backend cannot use a KV pool in device memory");
  }
  const kernels::KvPoolLayout& pl = plan.pool->layout();
  if (pl.n_layers != config_.n_layers || pl.n_kv_heads != config_.n_kv_heads ||
      pl.head_dim != config_.head_dim) {
    return InvalidArgumentError("execute: the KV pool's shape does not match the model " +
                                config_.name);
  }
  const std::span<const int32_t> tokens = plan.tokens;
  const int64_t n = plan.n_tokens();
  ReserveWorkspace(n, plan.max_keys);
  PrepareTokens(plan);
  const int64_t max_keys = plan.max_keys;

  const LlamaConfig& c = config_;
  BlockPool& pool = *plan.pool;
  const kernels::KvPoolLayout& layout = pool.layout();
  Workspace& ws = ws_;
  const int32_t dim = c.dim, hd = c.head_dim, half = rope_->half_dim();
  const int32_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  const int32_t group = c.n_heads / c.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t xq_stride = ws.xq.size() / 3;
  const int64_t n_out = plan.n_out;

  ThreadPool& tp = *thread_pool_;
  const auto no_step = [](int64_t) {};
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& w = weights_.layers[l];
    // An int8 pool: the same steps over int8 rows, with this layer's scales.
    const KvInt8Scales* kv_scales = pool.int8_scales();
    uint16_t* layer_kv = kv_scales == nullptr ? pool.layer_data(l) : nullptr;
    int8_t* layer_kv_i8 = kv_scales != nullptr ? pool.layer_data_i8(l) : nullptr;
    // --- attention block ---
    // The residual stream x: the token's embedding, or x plus the previous layer's FFN output.
    const auto residual_and_norm = [&](int64_t t) {
      if (l == 0) {
        const WeightMatrix& e = weights_.token_embedding;
        kernels::cpu::DequantizeRow(e.type, e.data + tokens[t] * e.row_bytes, dim, &ws.x[t * dim]);
      }
      kernels::cpu::AddRmsNormRow(&ws.x[t * dim], l == 0 ? nullptr : &ws.proj[t * dim],
                                  w.attn_norm, c.rms_eps, dim, &ws.xb[t * dim]);
    };
    const Product qkv[] = {{&w.wq, ws.q.data(), q_dim},
                           {&w.wk, ws.k.data(), kv_dim},
                           {&w.wv, ws.v.data(), kv_dim}};
    FusedMatMul(tp, tuning_, qkv, ws.xb.data(), n, ws.xq.data(), xq_stride, residual_and_norm);
    // Keys are rotated by their text position and written once; queries are rotated by
    // their text position and, once eviction has begun, by their cache position for sinks.
    const auto rope_and_write = [&](int64_t t) {
      const float* cs = &ws.rope_cos[t * half];
      const float* sn = &ws.rope_sin[t * half];
      float* q = &ws.q[t * q_dim];
      if (ws.has_sink_rope[t]) {
        std::copy(q, q + q_dim, &ws.q_sink[t * q_dim]);
        kernels::cpu::RotatePairs(&ws.q_sink[t * q_dim], c.n_heads, hd, &ws.sink_cos[t * half],
                                  &ws.sink_sin[t * half]);
      }
      kernels::cpu::RotatePairs(q, c.n_heads, hd, cs, sn);
      kernels::cpu::RotatePairs(&ws.k[t * kv_dim], c.n_kv_heads, hd, cs, sn);
      if (kv_scales == nullptr) {
        kernels::cpu::WriteKv(layout, layer_kv, ws.tables[plan.seq_of[t]], plan.position[t],
                              &ws.k[t * kv_dim], &ws.v[t * kv_dim]);
      } else {
        kernels::cpu::WriteKvI8(layout, layer_kv_i8, kv_scales->inverses(l, 0),
                                kv_scales->inverses(l, 1), ws.tables[plan.seq_of[t]],
                                plan.position[t], &ws.k[t * kv_dim], &ws.v[t * kv_dim]);
      }
    };
    // One task per (token, KV head): the group's query heads g * group .. (g + 1) * group - 1
    // are contiguous in q ([n_heads, hd]) and read each K/V row once between them.
    const int32_t heads_per_task =
        n >= int64_t{tuning_.attention_batch_factor} * tp.threads() ? c.n_kv_heads : 1;
    const int32_t tasks_per_token = c.n_kv_heads / heads_per_task;
    // A token attends to its own sequence's keys only. In a decode step (one token per
    // sequence) with one task per token, the task writes the only new key its attention reads:
    // rotation and the K/V write need no loop (and join) of their own.
    const bool rope_in_task = tasks_per_token == 1 && plan.decode;
    if (!rope_in_task) tp.ParallelFor(n, [&](int64_t t, int) { rope_and_write(t); });
    tp.ParallelFor(n * tasks_per_token, [&](int64_t task, int thread) {
      const int64_t t = task / tasks_per_token;
      const int32_t g0 = static_cast<int32_t>(task % tasks_per_token) * heads_per_task;
      if (rope_in_task) rope_and_write(t);
      for (int32_t g = g0; g < g0 + heads_per_task; ++g) {
        const int64_t first = t * q_dim + static_cast<int64_t>(g) * group * hd;
        const float* q = &ws.q[first];
        const float* q_sink = ws.has_sink_rope[t] ? &ws.q_sink[first] : q;
        float* scores = &ws.scores[static_cast<size_t>(thread) * group * (max_keys + 2 * hd)];
        if (kv_scales == nullptr) {
          kernels::cpu::PagedAttentionGroup(layout, layer_kv, ws.tables[plan.seq_of[t]],
                                            plan.position[t], g, group, q, q_sink, scale, scores,
                                            &ws.attn[first], tuning_.attention_prefetch_runs);
        } else {
          kernels::cpu::PagedAttentionGroupI8(layout, layer_kv_i8, kv_scales->scales(l, 0),
                                              kv_scales->scales(l, 1), ws.tables[plan.seq_of[t]],
                                              plan.position[t], g, group, q, q_sink, scale,
                                              scores, &ws.attn[first],
                                              tuning_.attention_prefetch_runs);
        }
      }
    });
    const Product wo[] = {{&w.wo, ws.proj.data(), dim}};
    FusedMatMul(tp, tuning_, wo, ws.attn.data(), n, ws.xq.data(), xq_stride, no_step);
    // --- feed-forward block ---
    const Product gate_up[] = {{&w.w_gate, ws.gate.data(), ffn}, {&w.w_up, ws.up.data(), ffn}};
    FusedMatMul(tp, tuning_, gate_up, ws.xb.data(), n, ws.xq.data(), xq_stride, [&](int64_t t) {
      kernels::cpu::AddRmsNormRow(&ws.x[t * dim], &ws.proj[t * dim], w.ffn_norm, c.rms_eps, dim,
                                  &ws.xb[t * dim]);
    });
    const Product down[] = {{&w.w_down, ws.proj.data(), dim}};
    FusedMatMul(tp, tuning_, down, ws.gate.data(), n, ws.xq.data(), xq_stride, [&](int64_t t) {
      kernels::cpu::SiluMul(&ws.gate[t * ffn], &ws.up[t * ffn], ffn);
    });
    // The FFN output is added to x by the next layer's first step (or just below).
  }

  // --- output head, only for the tokens whose logits were asked for ---
  // (The residual stream of a token without logits is not needed any more.)
  tp.ParallelFor(n, [&](int64_t t, int) {
    if (plan.out_row[t] >= 0) {
      kernels::cpu::AddRmsNormRow(&ws.x[t * dim], &ws.proj[t * dim], weights_.output_norm,
                                  c.rms_eps, dim, &ws.xb[plan.out_row[t] * dim]);
    }
  });
  const Product head[] = {{&weights_.output, logits, c.vocab_size}};
  FusedMatMul(tp, tuning_, head, ws.xb.data(), n_out, ws.xq.data(), xq_stride, no_step);
  return OkStatus();
}

}  // namespace streamd
