// The CPU forward pass's matrix products, in the two orders LlamaModel runs them (llama_model.cc):
//   - FusedMatMul: the products of a group (which share the input x) over all tokens of a step,
//     their rows cut into work items for the thread pool (CpuTuning::split);
//   - ProductsForTokens: the same products for a range of tokens, every row, on the calling
//     thread (the token-parallel decode of llama_token_parallel.cc).
// Both quantize each token's activations once per weight type and run the level and activation
// bits the tuning gives the shape for the bucket of the token count the kernel multiplies at
// once; every token's result is the same bit for bit in either order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/backends/cpu/cpu_tuning.h"
#include "engine/backends/cpu/llama_weights.h"
#include "engine/util/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace streamd::model_internal {

// One matrix product of a fused group: out[t * ldo + r] = W[r] . x[t].
struct Product {
  const WeightMatrix* w;
  float* out;
  int64_t ldo;
};

// Rows per work item for products of n tokens (see CpuTuning::split; llama_model.cc has the
// measurements behind the defaults).
int64_t RowChunk(const WeightMatrix& w, const RowSplit& split, int threads);

// The activation buffers a group needs: one per distinct (weight type, 8-bit or not) among its
// products, at xq_base + slot * xq_stride; the usual case is one.
template <size_t N>
struct ActivationSlots {
  kernels::cpu::WeightType types[N];
  bool int8[N];
  int slot_of[N];
  int n = 0;

  ActivationSlots(const Product (&group)[N], int bucket) {
    for (size_t i = 0; i < N; ++i) {
      const bool eight = group[i].w->int8_by_bucket[bucket];
      int s = 0;
      while (s < n && (types[s] != group[i].w->type || int8[s] != eight)) ++s;
      if (s == n) {
        types[n] = group[i].w->type;
        int8[n++] = eight;
      }
      slot_of[i] = s;
    }
  }
};

// Quantizes row t of x ([*, k], row stride k) into every slot's buffer, at index t there.
template <size_t N>
void PrepareToken(const ActivationSlots<N>& slots, const float* x, int64_t k, int64_t t,
                  uint8_t* xq_base, size_t xq_stride) {
  for (int s = 0; s < slots.n; ++s) {
    if (slots.int8[s]) {
      kernels::cpu::PrepareActivations8(x, k, k, t, t + 1, xq_base + s * xq_stride);
    } else {
      kernels::cpu::PrepareActivations(slots.types[s], x, k, k, t, t + 1, xq_base + s * xq_stride);
    }
  }
}

// Rows [r0, r1) of one product for n tokens whose activations start at xq (in the slot's
// format) and whose outputs start at out (row stride p.ldo), at the level and bits the shape has
// for `bucket`.
void RunProductRows(const Product& p, bool int8, int bucket, const uint8_t* xq, float* out,
                    int64_t n, int64_t r0, int64_t r1);

// Quantizes x once per weight type and runs the products of `group` (which share the input
// x: [n, k]) as one pool of row chunks. produce(t) runs first for each token t, in the task
// that then quantizes its row: the elementwise step that makes x (residual add, norm, SwiGLU)
// needs no loop of its own (each ParallelFor is a fork and a join of the pool; these steps are
// ~1 us of work per token).
template <size_t N, class Produce>
void FusedMatMul(ThreadPool& pool, const CpuTuning& tuning, const Product (&group)[N],
                 const float* x, int64_t n, uint8_t* xq_base, size_t xq_stride, Produce&& produce) {
  const int64_t k = group[0].w->cols;
  const int bucket = TokenBucket(n);
  const ActivationSlots<N> slots(group, bucket);
  pool.ParallelFor(n, [&](int64_t t, int) {
    produce(t);
    PrepareToken(slots, x, k, t, xq_base, xq_stride);
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
    const int64_t r0 = first * rows[i];
    const int64_t r1 = std::min(group[i].w->rows, r0 + rows[i]);
    const int s = slots.slot_of[i];
    RunProductRows(group[i], slots.int8[s], bucket, xq_base + s * xq_stride, group[i].out, n, r0,
                   r1);
  });
}

// The products of `group` for tokens [t0, t1) of x, every row, on this thread: produce(t) and
// the quantization of row t first, as in FusedMatMul. The activations go to the caller's own
// area (xq_base, slots xq_stride bytes apart) from its index 0: threads that run other token
// ranges meanwhile, products of another k among them, use areas of their own. The kernels
// multiply t1 - t0 tokens at once, so their level and bits are those of that count's bucket.
template <size_t N, class Produce>
void ProductsForTokens(const Product (&group)[N], const float* x, int64_t t0, int64_t t1,
                       uint8_t* xq_base, size_t xq_stride, Produce&& produce) {
  const int64_t k = group[0].w->cols;
  const int bucket = TokenBucket(t1 - t0);
  const ActivationSlots<N> slots(group, bucket);
  for (int64_t t = t0; t < t1; ++t) {
    produce(t);
    PrepareToken(slots, x + t0 * k, k, t - t0, xq_base, xq_stride);
  }
  for (size_t i = 0; i < N; ++i) {
    const int s = slots.slot_of[i];
    RunProductRows(group[i], slots.int8[s], bucket, xq_base + s * xq_stride,
                   group[i].out + t0 * group[i].ldo, t1 - t0, 0, group[i].w->rows);
  }
}

}  // namespace streamd::model_internal
