#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd::kernels::cpu {
namespace {

// One run of consecutive slots of a block: `n` keys' K and V rows ([n, head_dim] each) of
// element type T (f16 bits or int8).
template <class T>
struct Run {
  const T* k;
  const T* v;
  int64_t n;
  bool sink;  // scored with q_sink
};

// How many keys the query at position p sees: its sinks [SinkBegin(p), VisibleSinks(p)) and its
// window [WindowStart(p), p] (both narrowed by the table's span, if any).
int64_t VisibleKeys(const SinkWindowTable& table, int64_t p) {
  return (table.VisibleSinks(p) - table.SinkBegin(p)) + (p - table.WindowStart(p) + 1);
}

// The visible keys of the query at position p in score order (the sinks SinkBegin(p) ..
// VisibleSinks(p) - 1, then the window WindowStart(p) .. p), as runs: one per block touched, a
// run also stopping at the sink/window boundary (a different table).
template <class T>
class KeyRuns {
 public:
  KeyRuns(const KvPoolLayout& layout, const T* layer_kv, const SinkWindowTable& table,
          int32_t kv_head, int64_t p)
      : layout_(layout),
        layer_kv_(layer_kv),
        table_(table),
        kv_head_(kv_head),
        n_sinks_(table.VisibleSinks(p)),
        w_start_(table.WindowStart(p)),
        p_(p),
        t_(table.SinkBegin(p) < n_sinks_ ? table.SinkBegin(p) : w_start_) {}

  bool Next(Run<T>* run) {
    if (t_ > p_) return false;
    int32_t block, slot;
    table_.Locate(t_, &block, &slot);
    const bool sink = t_ < n_sinks_;
    const int64_t last = sink ? n_sinks_ - 1 : p_;
    const int64_t n = std::min<int64_t>(layout_.block_size - slot, last - t_ + 1);
    *run = {layer_kv_ + layout_.Offset(block, 0, kv_head_, slot),
            layer_kv_ + layout_.Offset(block, 1, kv_head_, slot), n, sink};
    t_ += n;
    if (t_ == n_sinks_) t_ = w_start_;
    return true;
  }

 private:
  const KvPoolLayout& layout_;
  const T* layer_kv_;
  const SinkWindowTable& table_;
  int32_t kv_head_;
  int64_t n_sinks_, w_start_, p_;  // n_sinks_: the end of the visible sinks
  int64_t t_;                      // next text position
};

// The cache lines of `n` contiguous elements, asked for in `slices` about equal calls of Next()
// (one slice: all of them at once).
class SlicedPrefetch {
 public:
  SlicedPrefetch() = default;
  template <class T>
  SlicedPrefetch(const T* rows, int64_t n, int64_t slices)
      : next_(reinterpret_cast<const char*>(rows)),
        end_(reinterpret_cast<const char*>(rows + n)),
        step_(((n * static_cast<int64_t>(sizeof(T)) + 63) / 64 + slices - 1) / slices * 64) {}

  void Next() {
    const char* stop = end_ - next_ > step_ ? next_ + step_ : end_;
    for (; next_ < stop; next_ += 64) __builtin_prefetch(next_, 0, 3);
  }

 private:
  const char* next_ = nullptr;
  const char* end_ = nullptr;
  int64_t step_ = 0;
};

// The default of kDefaultPrefetchRuns (paged_attention.h), measured on the decode bench's
// attention alone (16 sessions x 30 layers of SmolLM2, window 192, one thread, 72 MB of K and V
// per step, 4 KiB pages, Sapphire Rapids): 7.3 ms per step without prefetches, 6.0 with 2 runs
// ahead and this run's V; 1 or 4 runs ahead, V further ahead, or only the first 4 lines of each
// run (for the hardware prefetcher to follow) were no better there.

// The score and value passes over rows of T: DotRowsF16 / AxpyRowsF16 for f16 rows, the int8
// ones for int8 rows.
void DotRows(const float* q, int64_t n_q, const uint16_t* k, int64_t n, int64_t hd, float scale,
             float* out, int64_t ldo) {
  DotRowsF16(q, n_q, k, n, hd, scale, out, ldo);
}
void DotRows(const float* q, int64_t n_q, const int8_t* k, int64_t n, int64_t hd, float scale,
             float* out, int64_t ldo) {
  DotRowsI8(q, n_q, k, n, hd, scale, out, ldo);
}
void AxpyRows(const float* w, int64_t ldw, int64_t n_q, const uint16_t* v, int64_t n, int64_t hd,
              float* y) {
  AxpyRowsF16(w, ldw, n_q, v, n, hd, y);
}
void AxpyRows(const float* w, int64_t ldw, int64_t n_q, const int8_t* v, int64_t n, int64_t hd,
              float* y) {
  AxpyRowsI8(w, ldw, n_q, v, n, hd, y);
}

template <class T>
void AttendGroup(const KvPoolLayout& layout, const T* layer_kv, const SinkWindowTable& table,
                 int64_t p, int32_t kv_head, int32_t n_q, const float* q_window,
                 const float* q_sink, float scale, float* scratch, float* out,
                 int32_t prefetch_runs) {
  const int32_t hd = layout.head_dim;
  const int64_t n_keys = VisibleKeys(table, p);

  // Pass 1: scores, scratch [n_q, n_keys]: per query the sinks first, then the window. A run's
  // keys are contiguous rows of a block; each block is a separate stretch of memory (2 KiB of K
  // for one head at B = 16, hd = 64) too short for the hardware prefetcher to pick up, so the K
  // rows prefetch_runs runs ahead and this run's V rows (for pass 2) are asked for explicitly.
  KeyRuns<T> ahead(layout, layer_kv, table, kv_head, p);
  Run<T> a;
  for (int i = 0; i < prefetch_runs && ahead.Next(&a); ++i) {
    SlicedPrefetch(a.k, a.n * hd, 1).Next();
  }
  KeyRuns<T> runs(layout, layer_kv, table, kv_head, p);
  Run<T> r;
  int64_t col = 0;
  // Keys per slice: what DotRowsF16 scores in one register tile for this many queries (16 for
  // one, 8 for two, 4 for more), so slicing adds no partial tiles. Measured on the 16-session
  // decode step (window 192, 2 threads, four alternations): 15.5-16.2 -> 14.9-15.5 ms.
  const int64_t key_group = n_q == 1 ? 16 : n_q == 2 ? 8 : 4;
  while (runs.Next(&r)) {
    const int64_t slices = (r.n + key_group - 1) / key_group;
    // Asked for a slice at a time between groups of keys, not as one burst: a prefetch waits
    // for a free fill buffer, and a burst of 64 lines held up the scoring behind it.
    SlicedPrefetch k_ahead = prefetch_runs > 0 && ahead.Next(&a)
                                 ? SlicedPrefetch(a.k, a.n * hd, slices)
                                 : SlicedPrefetch();
    SlicedPrefetch v_now =
        prefetch_runs > 0 ? SlicedPrefetch(r.v, r.n * hd, slices) : SlicedPrefetch();
    for (int64_t g = 0; g < r.n; g += key_group) {
      k_ahead.Next();
      v_now.Next();
      DotRows(r.sink ? q_sink : q_window, n_q, r.k + g * hd, std::min(key_group, r.n - g), hd,
              scale, scratch + col + g, n_keys);
    }
    col += r.n;
  }

  // Softmax of each query's row in place: max-subtracted, then normalised (the sum's precision
  // is documented at ExpShiftedSum).
  for (int32_t i = 0; i < n_q; ++i) {
    float* s = scratch + i * n_keys;
    const float sum = ExpShiftedSum(s, n_keys, MaxF32(s, n_keys));
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n_keys; ++j) s[j] *= inv;
  }

  // Pass 2: out = sum_j p_j V_j, in the same key order.
  std::fill(out, out + static_cast<int64_t>(n_q) * hd, 0.0f);
  KeyRuns<T> values(layout, layer_kv, table, kv_head, p);
  col = 0;
  while (values.Next(&r)) {
    AxpyRows(scratch + col, n_keys, n_q, r.v, r.n, hd, out);
    col += r.n;
  }
}

// Round to nearest (ties to even, the FPU's mode) and saturate to [-127, 127]: -128 is never
// stored, so the code is symmetric around zero. NaN (a model fault) becomes -127 rather than
// an undefined conversion.
int8_t QuantizeI8(float x, float inv_scale) {
  const float r = std::nearbyint(x * inv_scale);
  return static_cast<int8_t>(r > 127.0f ? 127.0f : r >= -127.0f ? r : -127.0f);
}

}  // namespace

void PagedAttentionGroup(const KvPoolLayout& layout, const uint16_t* layer_kv,
                         const SinkWindowTable& table, int64_t p, int32_t kv_head, int32_t n_q,
                         const float* q_window, const float* q_sink, float scale, float* scratch,
                         float* out, int32_t prefetch_runs) {
  AttendGroup(layout, layer_kv, table, p, kv_head, n_q, q_window, q_sink, scale, scratch, out,
              prefetch_runs);
}

void PagedAttentionGroupI8(const KvPoolLayout& layout, const int8_t* layer_kv, const float* k_scale,
                           const float* v_scale, const SinkWindowTable& table, int64_t p,
                           int32_t kv_head, int32_t n_q, const float* q_window, const float* q_sink,
                           float scale, float* scratch, float* out, int32_t prefetch_runs) {
  // s_j = sum_c q_c * (k_scale_c * K8_jc) = sum_c (q_c * k_scale_c) * K8_jc: the scales go into
  // the queries once, not into every key; likewise out_c = v_scale_c * sum_j p_j V8_jc.
  const int32_t hd = layout.head_dim;
  const int64_t n_keys = VisibleKeys(table, p);
  const int64_t q_elems = static_cast<int64_t>(n_q) * hd;
  float* qw = scratch + static_cast<int64_t>(n_q) * n_keys;
  float* qs = q_sink == q_window ? qw : qw + q_elems;
  const float* ks = k_scale + static_cast<int64_t>(kv_head) * hd;
  const float* vs = v_scale + static_cast<int64_t>(kv_head) * hd;
  // Per query head, then per channel: an index e % hd per element was a division each, 6% of a
  // 16-session decode step's CPU time (a quarter of its attention's; perf, Zen 4) before.
  for (int64_t i = 0; i < q_elems; i += hd) {
    for (int32_t c = 0; c < hd; ++c) qw[i + c] = q_window[i + c] * ks[c];
  }
  if (qs != qw) {
    for (int64_t i = 0; i < q_elems; i += hd) {
      for (int32_t c = 0; c < hd; ++c) qs[i + c] = q_sink[i + c] * ks[c];
    }
  }
  AttendGroup(layout, layer_kv, table, p, kv_head, n_q, qw, qs, scale, scratch, out, prefetch_runs);
  for (int64_t i = 0; i < q_elems; i += hd) {
    for (int32_t c = 0; c < hd; ++c) out[i + c] *= vs[c];
  }
}

void PagedAttentionHead(const KvPoolLayout& layout, const uint16_t* layer_kv,
                        const SinkWindowTable& table, int64_t p, int32_t kv_head,
                        const float* q_window, const float* q_sink, float scale, float* scratch,
                        float* out) {
  PagedAttentionGroup(layout, layer_kv, table, p, kv_head, 1, q_window, q_sink, scale, scratch,
                      out);
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

void QuantizeRowI8(const float* x, const float* inv_scale, int64_t n, int8_t* out) {
  if (ActiveIsa() >= Isa::kAvx512Vnni) return internal::QuantizeRowI8Avx512(x, inv_scale, n, out);
  for (int64_t i = 0; i < n; ++i) out[i] = QuantizeI8(x[i], inv_scale[i]);
}

void WriteKvI8(const KvPoolLayout& layout, int8_t* layer_kv, const float* k_inv_scale,
               const float* v_inv_scale, const SinkWindowTable& table, int64_t t, const float* k,
               const float* v) {
  int32_t block, slot;
  table.Locate(t, &block, &slot);
  const int32_t hd = layout.head_dim;
  for (int32_t h = 0; h < layout.n_kv_heads; ++h) {
    QuantizeRowI8(k + h * hd, k_inv_scale + h * hd, hd,
                  layer_kv + layout.Offset(block, 0, h, slot));
    QuantizeRowI8(v + h * hd, v_inv_scale + h * hd, hd,
                  layer_kv + layout.Offset(block, 1, h, slot));
  }
}

}  // namespace streamd::kernels::cpu
