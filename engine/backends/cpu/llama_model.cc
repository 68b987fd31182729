#include "engine/backends/cpu/llama_model.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "engine/backends/cpu/fused_products.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd {

using kernels::cpu::WeightType;
using model_internal::FusedMatMul;
using model_internal::Product;

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& path,
                                                       const Prepacked* prepacked) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return FromFile(std::move(file), prepacked);
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::FromFile(std::unique_ptr<gguf::GgufFile> file,
                                                           const Prepacked* prepacked) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  STREAMD_ASSIGN_OR_RETURN(model->config_, ReadLlamaConfig(*file));
  STREAMD_ASSIGN_OR_RETURN(
      model->weights_,
      BindLlamaWeights(*file, model->config_,
                       prepacked != nullptr ? prepacked->served_by_vnni8 : nullptr,
                       prepacked != nullptr ? prepacked->packed_from_file : nullptr));
  if (kernels::cpu::IsaSupported(kernels::cpu::Isa::kAmx)) {
    if (prepacked != nullptr && prepacked->amx_size > 0) {
      STREAMD_RETURN_IF_ERROR(
          UsePrepackedAmxCopies(model->weights_, prepacked->amx_bytes, prepacked->amx_size));
    } else {
      AddAmxPackedCopies(model->weights_);
    }
  }
  model->rope_ = std::make_unique<RopeTable>(model->config_);
  if (model->config_.family.local_period > 0) {
    model->local_rope_ = std::make_unique<RopeTable>(model->config_, /*local=*/true);
    std::vector<uint8_t> local(static_cast<size_t>(model->config_.n_layers));
    for (int32_t l = 0; l < model->config_.n_layers; ++l) local[l] = model->config_.IsLocalLayer(l);
    model->layer_split_ = LayerSplit::Of(std::move(local));
  }
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
    ws_.xb.resize(n * std::max({c.dim, c.ffn_dim, c.q_dim()}));
    ws_.q.resize(n * c.q_dim());
    ws_.q_sink.resize(n * c.q_dim());
    ws_.k.resize(n * c.kv_dim());
    ws_.v.resize(n * c.kv_dim());
    ws_.attn.resize(n * c.q_dim());
    ws_.proj.resize(n * c.dim);
    ws_.gate.resize(n * c.ffn_dim);
    ws_.up.resize(n * c.ffn_dim);
    for (auto* v : {&ws_.rope_cos, &ws_.rope_sin, &ws_.sink_cos, &ws_.sink_sin})
      v->resize(n * half);
    if (local_rope_ != nullptr) {
      for (auto* v : {&ws_.local_cos, &ws_.local_sin, &ws_.local_sink_cos, &ws_.local_sink_sin})
        v->resize(n * half);
    }
  }
  // Each of the three activation slots holds n tokens of the widest row in any format.
  const int64_t widest = std::max({c.dim, c.ffn_dim, c.q_dim()});
  size_t per_token = kernels::cpu::ActivationBytes8(1, widest);
  for (WeightType t :
       {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ4_0, WeightType::kQ4_1,
        WeightType::kQ8_0, WeightType::kQ5_0, WeightType::kQ5_1}) {
    per_token = std::max(per_token, kernels::cpu::ActivationBytes(t, 1, widest));
  }
  ws_.xq_token_bytes = per_token;
  const size_t xq = (static_cast<size_t>(n) * per_token + 63) / 64 * 64;
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
  ws_.local_tables.clear();
  for (size_t s = 0; s < plan.seqs.size(); ++s) {
    ws_.tables.push_back(plan.HostTable(s));
    if (plan.local_pool != nullptr) {
      ws_.local_tables.push_back(plan.HostLocalTable(s));
    } else if (local_rope_ != nullptr) {
      ws_.local_tables.push_back(ws_.tables.back());
      ws_.local_tables.back().span = config_.sliding_window;
    }
  }
  for (int32_t t = 0; t < plan.n_tokens(); ++t) {
    rope_->Angles(plan.position[t], &ws_.rope_cos[t * half], &ws_.rope_sin[t * half]);
    ws_.has_sink_rope.push_back(plan.NeedsSinkRotation(t));
    if (ws_.has_sink_rope.back()) {
      rope_->Angles(plan.cache_position[t], &ws_.sink_cos[t * half], &ws_.sink_sin[t * half]);
    }
    if (local_rope_ != nullptr) {
      local_rope_->Angles(plan.position[t], &ws_.local_cos[t * half], &ws_.local_sin[t * half]);
      if (ws_.has_sink_rope.back()) {
        local_rope_->Angles(plan.cache_position[t], &ws_.local_sink_cos[t * half],
                            &ws_.local_sink_sin[t * half]);
      }
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

Status LlamaModel::ApplyTuning(const CpuTuning& tuning, std::span<const uint8_t> vnni8_copies,
                               const SourceCopied& copied, const MatrixPacked& packed) {
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
  // A matrix whose converted rows were released (ReleaseConvertedRows) has only its 8-bit copy.
  for (size_t i = 0; i < matrices.size(); ++i) {
    if (matrices[i]->data != nullptr) continue;
    WeightMatrix check = tuned[i];
    check.vnni8_packed = matrices[i]->vnni8_packed;
    // Not converted at load: the copies given here will serve it (Prepacked::served_by_vnni8),
    // or one packed below from the file's own rows (Prepacked::packed_from_file; any non-null
    // pointer stands for it in the check).
    if (check.vnni8_packed == nullptr && !vnni8_copies.empty()) {
      check.vnni8_packed = vnni8_copies.data();
    } else if (check.vnni8_packed == nullptr && vnni8_copies.empty()) {
      check.vnni8_packed = Int8RowsOf(check).data;
    }
    if (!ServedByVnni8CopyAlone(check)) {
      return FailedPreconditionError(
          "this tuning runs a " + std::to_string(check.rows) + "x" + std::to_string(check.cols) +
          " matrix from its converted rows, which were released after a plan's tuning ran every "
          "product of it on its 8-bit copy; load the model again to apply another tuning");
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
  // the GGUF rows serve; a matrix not converted at load has neither, so then it is an error),
  // else packed here once.
  if (!vnni8_copies.empty()) {
    const Status used =
        UsePrepackedVnni8Copies(weights_, vnni8_copies.data(), vnni8_copies.size(), copied);
    const bool rowless = std::any_of(matrices.begin(), matrices.end(),
                                     [](const WeightMatrix* m) { return m->data == nullptr; });
    if (!used.ok() && rowless) return used;
  }
  AddVnni8PackedCopies(weights_, packed);
  for (const WeightMatrix* m : matrices) {
    if (m->data == nullptr && m->vnni8_packed == nullptr) {  // AddVnni8PackedCopies's allocation
      return ResourceExhaustedError("no memory for the 8-bit copy of a " + std::to_string(m->rows) +
                                    "x" + std::to_string(m->cols) + " " + WeightTypeName(m->type) +
                                    " matrix (packed at load from the file's rows)");
    }
  }
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
    amx = ", AMX-packed weights " + std::to_string((weights_.amx_packed_bytes + (1 << 19)) >> 20) +
          " MiB";
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
        std::to_string(scales->n_kv_heads()) + " KV heads x " + std::to_string(scales->head_dim()) +
        " do not fit " + config_.name + " (" + std::to_string(config_.n_layers) + " x " +
        std::to_string(config_.n_kv_heads) + " x " + std::to_string(config_.head_dim) + ")");
  }
  kv_int8_scales_ = std::move(scales);
  return OkStatus();
}

StatusOr<std::unique_ptr<BlockPool>> LlamaModel::CreatePool(const KvShape& shape,
                                                            int32_t block_size,
                                                            int64_t budget_bytes) {
  return BlockPool::Create(shape, block_size, budget_bytes);
}

LayerSplit LlamaModel::LocalLayerSplit() const {
  return kv_int8_scales_ == nullptr ? layer_split_ : LayerSplit{};
}

Status LlamaModel::CheckPools(const StepPlan& plan) const {
  const bool split = plan.local_pool != nullptr;
  if (split && (layer_split_.empty() || !plan.local_pool->host_accessible() ||
                plan.local_pool->dtype() != kernels::KvDtype::kF16 ||
                plan.pool->dtype() != kernels::KvDtype::kF16)) {
    return InvalidArgumentError("execute: " + config_.name +
                                " cannot read its local layers from a pool of their own here");
  }
  const auto fits = [&](const BlockPool& pool, int32_t n_layers) {
    const kernels::KvPoolLayout& pl = pool.layout();
    return pl.n_layers == n_layers && pl.n_kv_heads == config_.n_kv_heads &&
           pl.head_dim == config_.head_dim && pl.block_size == plan.pool->block_size();
  };
  if (!fits(*plan.pool, split ? layer_split_.n_main : config_.n_layers) ||
      (split && !fits(*plan.local_pool, layer_split_.n_local))) {
    return InvalidArgumentError("execute: the KV pool's shape does not match the model " +
                                config_.name);
  }
  return OkStatus();
}

uint16_t* LlamaModel::LayerKv(const StepPlan& plan, int32_t l) const {
  if (plan.local_pool == nullptr) return plan.pool->layer_data(l);
  BlockPool* pool = layer_split_.local[l] ? plan.local_pool : plan.pool;
  return pool->layer_data(layer_split_.index[l]);
}

Status LlamaModel::Execute(const StepPlan& plan, float* logits) {
  if (plan.pool == nullptr || plan.n_tokens() == 0 || plan.seqs.empty()) {
    return InvalidArgumentError("execute: the step plan is empty");
  }
  if (!plan.pool->host_accessible()) {
    return InvalidArgumentError("execute: the CPU backend cannot use a KV pool in device memory");
  }
  STREAMD_RETURN_IF_ERROR(CheckPools(plan));
  const int64_t n = plan.n_tokens();
  ReserveWorkspace(n, plan.max_keys);
  PrepareTokens(plan);
  const StepView step{&plan, &plan.pool->layout(), plan.pool->int8_scales(), ws_.xq.size() / 3};
  if (RunsByTokens(plan)) {
    ExecuteByTokens(step, logits);
    return OkStatus();
  }

  const LlamaConfig& c = config_;
  Workspace& ws = ws_;
  const int32_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  const size_t xq_stride = step.xq_stride;
  ThreadPool& tp = *thread_pool_;
  const auto no_step = [](int64_t) {};
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& w = weights_.layers[l];
    // --- attention block ---
    const Product qkv[] = {
        {&w.wq, ws.q.data(), q_dim}, {&w.wk, ws.k.data(), kv_dim}, {&w.wv, ws.v.data(), kv_dim}};
    FusedMatMul(tp, tuning_, qkv, ws.xb.data(), n, ws.xq.data(), xq_stride,
                [&](int64_t t) { NormForAttention(step, l, t); });
    // One task per (token, KV head): the group's query heads g * group .. (g + 1) * group - 1
    // are contiguous in q ([n_heads, hd]) and read each K/V row once between them.
    const int32_t heads_per_task =
        n >= int64_t{tuning_.attention_batch_factor} * tp.threads() ? c.n_kv_heads : 1;
    const int32_t tasks_per_token = c.n_kv_heads / heads_per_task;
    // A token attends to its own sequence's keys only. In a decode step (one token per
    // sequence) with one task per token, the task writes the only new key its attention reads:
    // rotation and the K/V write need no loop (and join) of their own.
    const bool rope_in_task = tasks_per_token == 1 && plan.decode;
    if (!rope_in_task) tp.ParallelFor(n, [&](int64_t t, int) { RopeAndWriteKv(step, l, t); });
    tp.ParallelFor(n * tasks_per_token, [&](int64_t task, int thread) {
      const int64_t t = task / tasks_per_token;
      const int32_t g0 = static_cast<int32_t>(task % tasks_per_token) * heads_per_task;
      if (rope_in_task) RopeAndWriteKv(step, l, t);
      AttendKvHeads(step, l, t, g0, g0 + heads_per_task, thread);
    });
    const Product wo[] = {{&w.wo, ws.proj.data(), dim}};
    FusedMatMul(tp, tuning_, wo, ws.attn.data(), n, ws.xq.data(), xq_stride, no_step);
    // --- feed-forward block ---
    const Product gate_up[] = {{&w.w_gate, ws.gate.data(), ffn}, {&w.w_up, ws.up.data(), ffn}};
    FusedMatMul(tp, tuning_, gate_up, ws.xb.data(), n, ws.xq.data(), xq_stride,
                [&](int64_t t) { NormForFfn(l, t); });
    const Product down[] = {{&w.w_down, ws.proj.data(), dim}};
    FusedMatMul(tp, tuning_, down, ws.gate.data(), n, ws.xq.data(), xq_stride,
                [&](int64_t t) { GatedActivation(t); });
    // The FFN output is added to x by the next layer's first step (or just below).
  }

  // --- output head, only for the tokens whose logits were asked for ---
  // (The residual stream of a token without logits is not needed any more.)
  tp.ParallelFor(n, [&](int64_t t, int) { NormForHead(step, t); });
  const Product head[] = {{&weights_.output, logits, c.vocab_size}};
  FusedMatMul(tp, tuning_, head, ws.xb.data(), plan.n_out, ws.xq.data(), xq_stride, no_step);
  return OkStatus();
}

// The residual stream x of token t: its embedding, or x plus the previous layer's FFN output;
// then the attention's norm of it into xb.
void LlamaModel::NormForAttention(const StepView& step, int32_t l, int64_t t) {
  const int32_t dim = config_.dim;
  float* x = &ws_.x[t * dim];
  if (l == 0) {
    weights_.token_embedding.DequantizeRow(step.plan->tokens[t], x);
    if (config_.family.embedding_scaled) {
      const float scale = std::sqrt(static_cast<float>(dim));
      for (int32_t i = 0; i < dim; ++i) x[i] *= scale;
    }
  } else {
    PostNorm(weights_.layers[l - 1].post_ffn_norm, t);
  }
  kernels::cpu::AddRmsNormRow(x, l == 0 ? nullptr : &ws_.proj[t * dim],
                              weights_.layers[l].attn_norm, config_.rms_eps, dim, &ws_.xb[t * dim]);
}

// Gemma's sandwich norm: a block's output (in proj) normed before it joins the residual stream.
// Nothing for families without it (a null weight).
void LlamaModel::PostNorm(const float* weight, int64_t t) {
  if (weight == nullptr) return;
  const int32_t dim = config_.dim;
  float* proj = &ws_.proj[t * dim];
  kernels::cpu::AddRmsNormRow(proj, nullptr, weight, config_.rms_eps, dim, proj);
}

// The family's steps between the projections and RoPE (model_family.h): q/k/v biases, then the
// per-head RMSNorm of q and k. Token t's rows only, so both execution orders share it.
void LlamaModel::FamilyExtras(int32_t l, int64_t t) {
  const LlamaConfig& c = config_;
  const LlamaLayerWeights& w = weights_.layers[l];
  const int32_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
  float* q = &ws_.q[t * q_dim];
  float* k = &ws_.k[t * kv_dim];
  if (w.q_bias != nullptr) {
    float* v = &ws_.v[t * kv_dim];
    for (int32_t i = 0; i < q_dim; ++i) q[i] += w.q_bias[i];
    for (int32_t i = 0; i < kv_dim; ++i) k[i] += w.k_bias[i];
    for (int32_t i = 0; i < kv_dim; ++i) v[i] += w.v_bias[i];
  }
  if (w.q_norm != nullptr) {
    // In place: each output value depends only on its own input and the row's sum of squares.
    for (int32_t h = 0; h < c.n_heads; ++h) {
      kernels::cpu::AddRmsNormRow(q + h * hd, nullptr, w.q_norm, c.rms_eps, hd, q + h * hd);
    }
    for (int32_t h = 0; h < c.n_kv_heads; ++h) {
      kernels::cpu::AddRmsNormRow(k + h * hd, nullptr, w.k_norm, c.rms_eps, hd, k + h * hd);
    }
  }
}

// Keys are rotated by their text position and written once; queries are rotated by their text
// position and, once eviction has begun, by their cache position for sinks. The rotation is the
// same for either pair layout (RopeTable::Rotate), and so is this position handling.
void LlamaModel::RopeAndWriteKv(const StepView& step, int32_t l, int64_t t) {
  const LlamaConfig& c = config_;
  const int32_t half = rope_->half_dim(), q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const StepPlan& plan = *step.plan;
  FamilyExtras(l, t);
  const bool local = c.IsLocalLayer(l);
  const float* cs = local ? &ws_.local_cos[t * half] : &ws_.rope_cos[t * half];
  const float* sn = local ? &ws_.local_sin[t * half] : &ws_.rope_sin[t * half];
  float* q = &ws_.q[t * q_dim];
  if (ws_.has_sink_rope[t]) {
    std::copy(q, q + q_dim, &ws_.q_sink[t * q_dim]);
    rope_->Rotate(&ws_.q_sink[t * q_dim], c.n_heads, c.head_dim,
                  local ? &ws_.local_sink_cos[t * half] : &ws_.sink_cos[t * half],
                  local ? &ws_.local_sink_sin[t * half] : &ws_.sink_sin[t * half]);
  }
  rope_->Rotate(q, c.n_heads, c.head_dim, cs, sn);
  rope_->Rotate(&ws_.k[t * kv_dim], c.n_kv_heads, c.head_dim, cs, sn);
  if (step.kv_scales == nullptr) {
    kernels::cpu::WriteKv(*step.layout, LayerKv(plan, l), LayerTable(l, plan.seq_of[t]),
                          plan.position[t], &ws_.k[t * kv_dim], &ws_.v[t * kv_dim]);
  } else {
    // An int8 pool: the same steps over int8 rows, with this layer's scales.
    kernels::cpu::WriteKvI8(*step.layout, plan.pool->layer_data_i8(l),
                            step.kv_scales->inverses(l, 0), step.kv_scales->inverses(l, 1),
                            ws_.tables[plan.seq_of[t]], plan.position[t], &ws_.k[t * kv_dim],
                            &ws_.v[t * kv_dim]);
  }
}

// Token t's attention for the query heads of KV heads [g0, g1), into attn; `thread` picks the
// scratch.
void LlamaModel::AttendKvHeads(const StepView& step, int32_t l, int64_t t, int32_t g0, int32_t g1,
                               int thread) {
  const LlamaConfig& c = config_;
  const StepPlan& plan = *step.plan;
  const int32_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const float scale = c.attention_scale;
  // A local layer's table sees only its native window (SinkWindowTable::span).
  const kernels::SinkWindowTable& table = LayerTable(l, plan.seq_of[t]);
  for (int32_t g = g0; g < g1; ++g) {
    const int64_t first = t * c.q_dim() + static_cast<int64_t>(g) * group * hd;
    const float* q = &ws_.q[first];
    const float* q_sink = ws_.has_sink_rope[t] ? &ws_.q_sink[first] : q;
    float* scores = &ws_.scores[static_cast<size_t>(thread) * group * (plan.max_keys + 2 * hd)];
    if (step.kv_scales == nullptr) {
      kernels::cpu::PagedAttentionGroup(*step.layout, LayerKv(plan, l), table, plan.position[t], g,
                                        group, q, q_sink, scale, scores, &ws_.attn[first],
                                        tuning_.attention_prefetch_runs);
    } else {
      kernels::cpu::PagedAttentionGroupI8(
          *step.layout, plan.pool->layer_data_i8(l), step.kv_scales->scales(l, 0),
          step.kv_scales->scales(l, 1), table, plan.position[t], g, group, q, q_sink, scale, scores,
          &ws_.attn[first], tuning_.attention_prefetch_runs);
    }
  }
}

void LlamaModel::NormForFfn(int32_t l, int64_t t) {
  const int32_t dim = config_.dim;
  PostNorm(weights_.layers[l].post_attn_norm, t);
  kernels::cpu::AddRmsNormRow(&ws_.x[t * dim], &ws_.proj[t * dim], weights_.layers[l].ffn_norm,
                              config_.rms_eps, dim, &ws_.xb[t * dim]);
}

void LlamaModel::GatedActivation(int64_t t) {
  const int32_t ffn = config_.ffn_dim;
  if (config_.family.ffn_activation == FfnActivation::kGeluTanh) {
    kernels::cpu::GeluTanhMul(&ws_.gate[t * ffn], &ws_.up[t * ffn], ffn);
  } else {
    kernels::cpu::SiluMul(&ws_.gate[t * ffn], &ws_.up[t * ffn], ffn);
  }
}

void LlamaModel::NormForHead(const StepView& step, int64_t t) {
  const int32_t row = step.plan->out_row[t];
  if (row < 0) return;
  const int32_t dim = config_.dim;
  PostNorm(weights_.layers.back().post_ffn_norm, t);
  kernels::cpu::AddRmsNormRow(&ws_.x[t * dim], &ws_.proj[t * dim], weights_.output_norm,
                              config_.rms_eps, dim, &ws_.xb[static_cast<int64_t>(row) * dim]);
}

}  // namespace streamd
