// The paged KV cache as kernels see it: the pool layout and one session's sink + window block
// table. Plain structs passed by value; every helper is usable from host and device code, so
// the CPU backend and the CUDA kernels index blocks through the same arithmetic.
//
// Pool layout, one array per layer (layer base = pool + layer * layer_elems()):
//   [num_blocks][2 (0 = K, 1 = V)][n_kv_heads][block_size][head_dim]
// A block holds block_size consecutive tokens of one session for every kv head; one head's
// keys of a block are block_size * head_dim contiguous elements, so decode attention streams
// them with unit stride. Elements are f16, or int8 with static per-channel scales (KvDtype::kInt8,
// CPU only): the layout is the same, in elements of that type.
//
// Sink + window addressing (StreamingLLM). Text positions t = 0, 1, 2, ... of a session:
//   t <  S: sink token, pinned: block sink_blocks[t / B], slot t % B;
//   t >= S: window index i = t - S, logical window block k = i / B, held in
//           window_blocks[k - first_window_block], slot i % B.
// A query at text position p sees the sinks 0..min(S, p + 1) - 1 and the window
// [WindowStart(p), p] (its own last W tokens, itself included). A layer trained with a native
// sliding window of N tokens (Gemma 3's local layers, N = 512) sets span = N: its queries see
// only text positions j > p - N, i.e. the sinks [SinkBegin(p), VisibleSinks(p)) and a window
// that starts no earlier than p - N + 1. Span only narrows which keys are read, and
// CachePosition(p) ignores it: the same table serves every layer (the engine plans its blocks
// for span 0, the widest key set), or the local layers get a table of their own over a cache
// that holds only what they read (the engine's "local layers" pool); either way a spanned
// query reads the same positions. window_blocks lists the blocks
// of the logical window blocks first_window_block .. first_window_block + n - 1, oldest first:
// the engine appends a block when the window reaches a new one and drops the oldest once no
// query can see any token in it, so eviction never copies K/V and a chunk of any length keeps
// every key its queries see (the engine plans which blocks a step holds; kernels only read).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define STREAMD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define STREAMD_HOST_DEVICE inline
#endif

namespace streamd::kernels {

// What one cached K or V value is: an IEEE binary16, or an int8 that a per-(layer, kv head,
// channel) scale turns back into the value (engine/cache/kv_scales.h).
enum class KvDtype : int32_t { kF16 = 0, kInt8 = 1 };

STREAMD_HOST_DEVICE int32_t KvDtypeBytes(KvDtype d) { return d == KvDtype::kInt8 ? 1 : 2; }

struct KvPoolLayout {
  int32_t num_blocks = 0;
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  KvDtype dtype = KvDtype::kF16;

  STREAMD_HOST_DEVICE int32_t elem_bytes() const { return KvDtypeBytes(dtype); }
  // Elements of one head's keys (or values) in one block: [block_size, head_dim].
  STREAMD_HOST_DEVICE int64_t head_elems() const {
    return static_cast<int64_t>(block_size) * head_dim;
  }
  // Elements of one block in one layer: K and V of every kv head.
  STREAMD_HOST_DEVICE int64_t block_elems() const { return 2 * n_kv_heads * head_elems(); }
  STREAMD_HOST_DEVICE int64_t layer_elems() const { return num_blocks * block_elems(); }
  // Offset, from a layer's base, of the head_dim vector of (block, K or V, head, slot).
  STREAMD_HOST_DEVICE int64_t Offset(int32_t block, int32_t kv, int32_t head, int32_t slot) const {
    return block * block_elems() + (kv * n_kv_heads + head) * head_elems() +
           static_cast<int64_t>(slot) * head_dim;
  }
};

struct SinkWindowTable {
  const int32_t* sink_blocks = nullptr;    // [ceil(sinks / block_size)]
  const int32_t* window_blocks = nullptr;  // [blocks the window holds], oldest first
  int64_t first_window_block = 0;          // logical window block of window_blocks[0]
  int32_t sinks = 0;                       // S
  int32_t window = 0;                      // W >= 1
  int32_t block_size = 0;                  // B
  // N > 0: a query at p sees only text positions j > p - N (the layer's native sliding window:
  // Gemma 3's local layers); 0: no such limit (every other layer and model).
  int32_t span = 0;

  // Block id and slot of text position t (t must be visible to some query of the step).
  STREAMD_HOST_DEVICE void Locate(int64_t t, int32_t* block, int32_t* slot) const {
    if (t < sinks) {
      *block = sink_blocks[t / block_size];
      *slot = static_cast<int32_t>(t % block_size);
      return;
    }
    const int64_t i = t - sinks;
    *block = window_blocks[i / block_size - first_window_block];
    *slot = static_cast<int32_t>(i % block_size);
  }
  // End of the sinks a query at text position p sees: min(S, p + 1).
  STREAMD_HOST_DEVICE int64_t VisibleSinks(int64_t p) const {
    return p + 1 < sinks ? p + 1 : sinks;
  }
  // First sink a query at text position p sees: 0 without a span, else the first position the
  // span leaves, p - N + 1, clamped to [0, VisibleSinks(p)]. Its sinks are
  // [SinkBegin(p), VisibleSinks(p)), empty when SinkBegin(p) == VisibleSinks(p).
  STREAMD_HOST_DEVICE int64_t SinkBegin(int64_t p) const {
    if (span <= 0) return 0;
    const int64_t first = p - span + 1;
    const int64_t end = VisibleSinks(p);
    return first < 0 ? 0 : (first < end ? first : end);
  }
  // First text position of p's window: max(p - W + 1, p - N + 1 when N > 0, S). The window is
  // empty when p < S: then it returns p + 1.
  STREAMD_HOST_DEVICE int64_t WindowStart(int64_t p) const {
    const int64_t start = UnspannedWindowStart(p);
    if (span <= 0 || p < sinks) return start;
    const int64_t first = p - span + 1;
    return first > start ? first : start;
  }
  // Position of the query inside its rebuilt cache (sinks 0..S-1, then the window): the
  // position its RoPE rotation must use against sink keys. Equals p until eviction starts.
  // Independent of span: every layer shares one cache, rebuilt with the sink + window only.
  STREAMD_HOST_DEVICE int64_t CachePosition(int64_t p) const {
    if (p < sinks) return p;
    return sinks + (p - UnspannedWindowStart(p));
  }
  // WindowStart(p) as if span were 0: max(p - W + 1, S), or p + 1 when p < S. The window the
  // engine keeps blocks for, whatever the layer's span.
  STREAMD_HOST_DEVICE int64_t UnspannedWindowStart(int64_t p) const {
    if (p < sinks) return p + 1;
    const int64_t start = p - window + 1;
    return start > sinks ? start : sinks;
  }
};

}  // namespace streamd::kernels
