// Attention of one query head, or of the query heads that share one KV head (GQA), over its
// session's paged sink + window cache, on the CPU. This is the reference the CUDA decode and
// prefill kernels are tested against, and the CPU backend's fast path (its dot products, axpys
// and exps are the SIMD ones of vec_ops.h).
//
//   s_j = scale * q_sink . K_j     for the visible sinks j (SinkBegin(p) .. VisibleSinks(p) - 1)
//   s_j = scale * q_window . K_j   for the window j        (WindowStart(p) .. p)
//   out = sum_j softmax(s)_j V_j   (max-subtracted; probabilities normalised, then summed)
//
// for each query of the group. A group reads each K/V row once for all its queries (each f16
// row converted once per up to 4 queries), which is what makes it cheaper than one call per head.
// Measured with SmolLM2's 3 query heads per KV head, 16 sessions at window 192, one thread, per
// decode step, against the former per-head AVX2 code: 8.4 -> 3.6 ms with K and V in L1/L2,
// 18 -> 6 ms with them in L3, 21 -> 11 ms inside the real step, where they mostly come from DRAM
// (72 MB per step; this machine reads 2 KiB pieces at 6-9 GB/s on one core, 12 GB/s
// sequentially), so there the memory, not the arithmetic, sets the time.
//
// Keys are stored rotated by their text position. q_window is the query rotated by its text
// position p, so window scores see the true distance p - j, which is also the distance in
// the rebuilt cache; q_sink is the query rotated by CachePosition(p), the query's place in
// the rebuilt cache, so sink scores see the distance the model would see had the cache been
// rebuilt with positions 0 .. S + W - 1. No query ever sees a distance over S + W - 1.
//
// table.span: 0 for the layers of most models, where the key set is the one above with
// SinkBegin(p) = 0. Gemma 3's local layers are trained with a native sliding window of N = 512
// tokens and never saw a key at p - N or earlier, so they pass a table with span = N (the same
// one, or their own cache's when the engine keeps their K/V apart):
// SinkBegin(p) and WindowStart(p) then start no earlier than p - N + 1, which leaves fewer
// window keys (when N < W) and fewer sinks, none once p >= S + N - 1. Its global layers pass
// span 0. q_sink and q_window are the same for both kinds (CachePosition ignores span).
#pragma once

#include <cstdint>

#include "kernels/common/paged_kv.h"

namespace streamd::kernels::cpu {

// How many runs of keys (a run: the keys of one block) the score pass asks the memory for ahead
// of the one it scores: each block is a separate 2 KiB stretch of K for one head (B = 16,
// hd = 64), too short for the hardware prefetcher to pick up. Any distance gives the same
// result, bit for bit; which is fastest depends on the machine's memory, so a build plan times
// them (CpuTuning::attention_prefetch_runs). 0 asks for nothing (nor for the V rows of the run
// being scored, which the others ask for during the score pass): the hardware's prefetch only.
inline constexpr int32_t kDefaultPrefetchRuns = 2;
inline constexpr int32_t kMaxPrefetchRuns = 8;

// The n_q query heads of KV head kv_head, all at text position p. layer_kv: the layer's base in
// the pool (f16). q_window, q_sink, out: [n_q, head_dim]. scratch: at least n_q * (S + W) floats.
// q_sink may equal q_window (no eviction yet). prefetch_runs in [0, kMaxPrefetchRuns].
void PagedAttentionGroup(const KvPoolLayout& layout, const uint16_t* layer_kv,
                         const SinkWindowTable& table, int64_t p, int32_t kv_head, int32_t n_q,
                         const float* q_window, const float* q_sink, float scale, float* scratch,
                         float* out, int32_t prefetch_runs = kDefaultPrefetchRuns);

// One query head: PagedAttentionGroup with n_q = 1. q_window, q_sink, out: [head_dim]; scratch:
// at least S + W floats.
void PagedAttentionHead(const KvPoolLayout& layout, const uint16_t* layer_kv,
                        const SinkWindowTable& table, int64_t p, int32_t kv_head,
                        const float* q_window, const float* q_sink, float scale, float* scratch,
                        float* out);

// Writes one token's K and V ([n_kv_heads, head_dim] each, f32) at text position t as f16.
void WriteKv(const KvPoolLayout& layout, uint16_t* layer_kv, const SinkWindowTable& table,
             int64_t t, const float* k, const float* v);

// An int8 KV cache (layout.dtype == kInt8): K_c = k_scale[c] * K8_c, V_c = v_scale[c] * V8_c with
// the scales of this layer ([n_kv_heads, head_dim] each, > 0, engine/cache/kv_scales.h).
// PagedAttentionGroupI8 computes what PagedAttentionGroup computes over those values; scratch
// needs n_q * (S + W) + 2 * n_q * head_dim floats (the scaled queries).
void PagedAttentionGroupI8(const KvPoolLayout& layout, const int8_t* layer_kv, const float* k_scale,
                           const float* v_scale, const SinkWindowTable& table, int64_t p,
                           int32_t kv_head, int32_t n_q, const float* q_window, const float* q_sink,
                           float scale, float* scratch, float* out,
                           int32_t prefetch_runs = kDefaultPrefetchRuns);
// out[i] = round(x[i] * inv_scale[i]) saturated to [-127, 127] (ties to even).
void QuantizeRowI8(const float* x, const float* inv_scale, int64_t n, int8_t* out);
// WriteKv for an int8 cache: each value times the inverse scale of its channel
// ([n_kv_heads, head_dim] each), rounded and saturated by QuantizeRowI8.
void WriteKvI8(const KvPoolLayout& layout, int8_t* layer_kv, const float* k_inv_scale,
               const float* v_inv_scale, const SinkWindowTable& table, int64_t t, const float* k,
               const float* v);

}  // namespace streamd::kernels::cpu
