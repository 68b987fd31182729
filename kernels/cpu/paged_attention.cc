#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vec_ops.h"

namespace streamd::kernels::cpu {
namespace {

// Calls fn(key_ptr, value_ptr, n) for runs of consecutive slots covering text positions
// [first, last], one run per block touched.
template <typename Fn>
void ForEachRun(const KvPoolLayout& layout, const uint16_t* layer_kv,
                const SinkWindowTable& table, int32_t kv_head, int64_t first, int64_t last,
                Fn&& fn) {
  int64_t t = first;
  while (t <= last) {
    int32_t block, slot;
    table.Locate(t, &block, &slot);
    // A run stops at the block's end, and at the sink/window boundary (a different table).
    int64_t run = std::min<int64_t>(layout.block_size - slot, last - t + 1);
    if (t < table.sinks) run = std::min<int64_t>(run, table.sinks - t);
    const uint16_t* k = layer_kv + layout.Offset(block, 0, kv_head, slot);
    const uint16_t* v = layer_kv + layout.Offset(block, 1, kv_head, slot);
    fn(k, v, run);
    t += run;
  }
}

}  // namespace

void PagedAttentionHead(const KvPoolLayout& layout, const uint16_t* layer_kv,
                        const SinkWindowTable& table, int64_t p, int32_t kv_head,
                        const float* q_window, const float* q_sink, float scale, float* scratch,
                        float* out) {
  const int32_t hd = layout.head_dim;
  const int64_t n_sinks = table.VisibleSinks(p);
  const int64_t w_start = table.WindowStart(p);
  const int64_t n_keys = n_sinks + (p - w_start + 1);

  // Pass 1: scores, sinks first then the window, in scratch[0 .. n_keys).
  float* s = scratch;
  auto score = [&](const float* q) {
    return [&, q](const uint16_t* k, const uint16_t*, int64_t run) {
      DotRowsF16(q, k, run, hd, scale, s);  // a run's keys are contiguous rows of a block
      s += run;
    };
  };
  if (n_sinks > 0) ForEachRun(layout, layer_kv, table, kv_head, 0, n_sinks - 1, score(q_sink));
  if (w_start <= p) ForEachRun(layout, layer_kv, table, kv_head, w_start, p, score(q_window));

  // Softmax in place (max-subtracted, f64 normaliser).
  const float max = *std::max_element(scratch, scratch + n_keys);
  double sum = 0.0;
  for (int64_t i = 0; i < n_keys; ++i) {
    scratch[i] = std::exp(scratch[i] - max);
    sum += scratch[i];
  }
  const float inv = static_cast<float>(1.0 / sum);

  // Pass 2: out = sum_j p_j V_j, in the same key order (probabilities normalised first).
  for (int64_t i = 0; i < n_keys; ++i) scratch[i] *= inv;
  std::fill(out, out + hd, 0.0f);
  const float* w = scratch;
  auto accumulate = [&](const uint16_t*, const uint16_t* v, int64_t run) {
    AxpyRowsF16(w, v, run, hd, out);
    w += run;
  };
  if (n_sinks > 0) ForEachRun(layout, layer_kv, table, kv_head, 0, n_sinks - 1, accumulate);
  if (w_start <= p) ForEachRun(layout, layer_kv, table, kv_head, w_start, p, accumulate);
}

void WriteKv(const KvPoolLayout& layout, uint16_t* layer_kv, const SinkWindowTable& table,
             int64_t t, const float* k, const float* v) {
  int32_t block, slot;
  table.Locate(t, &block, &slot);
  for (int32_t h = 0; h < layout.n_kv_heads; ++h) {
    FloatToHalfRow(k + h * layout.head_dim, layer_kv + layout.Offset(block, 0, h, slot),
                   layout.head_dim);
    FloatToHalfRow(v + h * layout.head_dim, layer_kv + layout.Offset(block, 1, h, slot),
                   layout.head_dim);
  }
}

}  // namespace streamd::kernels::cpu
