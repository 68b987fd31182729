// Token-parallel decode: each thread runs the whole forward pass of its share of a decode step's
// tokens, every row of every product, with no join until the logits are written.
//
// Why: the usual order (llama_model.cc) cuts each product's rows across the threads, so every
// product is a fork and a join (~270 per step), and the next elementwise step of a token reads
// rows the other cores wrote (their cache lines cross between cores). In a decode step each token
// is a different sequence's only new token: its attention reads only its own sequence's cache
// and the key it writes itself, so nothing a token computes waits on another token, and a thread
// can take a token range through all layers alone. Each thread then streams all the weights, so
// this pays where the step is bound by arithmetic rather than by the weight stream: from some
// batch size on, which a build plan times on the machine (CpuTuning::decode_by_tokens_from).
// Every token's results are the same bit for bit in either order (the kernels' arithmetic per
// token does not depend on which other tokens share the call).
#include <algorithm>

#include "engine/backends/cpu/fused_products.h"
#include "engine/backends/cpu/llama_model.h"

namespace streamd {

using model_internal::Product;
using model_internal::ProductsForTokens;

bool LlamaModel::RunsByTokens(const StepPlan& plan) const {
  const int64_t n = plan.n_tokens();
  if (!plan.decode || threads_ < 2 || tuning_.decode_by_tokens_from <= 0 ||
      n < tuning_.decode_by_tokens_from) {
    return false;
  }
  // Each thread writes the logits rows of its tokens as one block: in a decode step every token
  // is its sequence's last, and row t is token t's.
  if (plan.n_out != n) return false;
  for (int64_t t = 0; t < n; ++t) {
    if (plan.out_row[t] != t) return false;
  }
  return true;
}

void LlamaModel::ExecuteByTokens(const StepView& step, float* logits) {
  steps_by_tokens_.fetch_add(1, std::memory_order_relaxed);
  const int64_t n = step.plan->n_tokens();
  const int parts = threads_;
  // A part a thread has not claimed yet (the OS took that thread away) is run by another one.
  thread_pool_->ParallelFor(parts, [&](int64_t part, int thread) {
    const int64_t t0 = n * part / parts;
    const int64_t t1 = n * (part + 1) / parts;
    if (t0 < t1) RunTokens(step, t0, t1, thread);
  });
  // The output head by rows, as in the usual order: split by rows each thread streams half of
  // its weights once for all tokens, where split by tokens each would stream all of them, and
  // a small model's head is a large share of its bytes (SmolLM2's: a third).
  const Product head[] = {{&weights_.output, logits, config_.vocab_size}};
  model_internal::FusedMatMul(*thread_pool_, tuning_, head, ws_.xb.data(), n, ws_.xq.data(),
                              step.xq_stride, [](int64_t) {});
}

void LlamaModel::RunTokens(const StepView& step, int64_t t0, int64_t t1, int thread) {
  const LlamaConfig& c = config_;
  Workspace& ws = ws_;
  // This thread's activation area: where t0 tokens of the widest row end in each slot, so the
  // areas of disjoint token ranges do not overlap (ReserveWorkspace sized the slots per token).
  uint8_t* xq = ws.xq.data() + static_cast<size_t>(t0) * ws.xq_token_bytes;
  const size_t stride = step.xq_stride;
  const auto no_step = [](int64_t) {};
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& w = weights_.layers[l];
    const Product qkv[] = {{&w.wq, ws.q.data(), c.q_dim()},
                           {&w.wk, ws.k.data(), c.kv_dim()},
                           {&w.wv, ws.v.data(), c.kv_dim()}};
    ProductsForTokens(qkv, ws.xb.data(), t0, t1, xq, stride,
                      [&](int64_t t) { NormForAttention(step, l, t); });
    for (int64_t t = t0; t < t1; ++t) {
      RopeAndWriteKv(step, l, t);
      AttendKvHeads(step, l, t, 0, c.n_kv_heads, thread);
    }
    const Product wo[] = {{&w.wo, ws.proj.data(), c.dim}};
    ProductsForTokens(wo, ws.attn.data(), t0, t1, xq, stride, no_step);
    const Product gate_up[] = {{&w.w_gate, ws.gate.data(), c.ffn_dim},
                               {&w.w_up, ws.up.data(), c.ffn_dim}};
    ProductsForTokens(gate_up, ws.xb.data(), t0, t1, xq, stride,
                      [&](int64_t t) { NormForFfn(l, t); });
    const Product down[] = {{&w.w_down, ws.proj.data(), c.dim}};
    ProductsForTokens(down, ws.gate.data(), t0, t1, xq, stride,
                      [&](int64_t t) { GatedActivation(t); });
  }
  for (int64_t t = t0; t < t1; ++t) NormForHead(step, t);
}

}  // namespace streamd
