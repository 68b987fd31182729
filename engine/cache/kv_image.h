// KvImage: one session's cached K/V in cache order, independent of pools, block sizes and
// backends; what SessionState carries. ReadCacheKv gathers it out of a cache's blocks and
// WriteCacheKv scatters it into a cache restored with SessionCache::Restore, through the pool's
// block copies (BlockPool::ReadBlocks / WriteBlocks), so device pools work too.
//
// Layout: per layer, K then V, per KV head, the cached tokens in cache order (sinks, then the
// window oldest first), head_dim f16 values each: [n_layers][2][n_kv_heads][n_tokens][head_dim].
// One (layer, K/V, head) run of a block's slots is one contiguous copy on either side. Pools
// in host memory are copied to and from directly; device pools go through a host staging copy
// of their blocks (one 2D copy per block). An int8 pool's rows are dequantized on the way out and
// quantized on the way in with the pool's scales (kv_scales.h), so the image stays f16.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cache/session_cache.h"
#include "engine/util/status.h"

namespace streamd {

struct KvImage {
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t n_tokens = 0;
  std::vector<uint16_t> data;  // f16 bits: [n_layers][2 (K, V)][n_kv_heads][n_tokens][head_dim]

  int64_t elements() const {
    return static_cast<int64_t>(n_layers) * 2 * n_kv_heads * n_tokens * head_dim;
  }
  // Offset of the head_dim vector of (layer, K or V, head, cache index).
  int64_t Offset(int32_t layer, int32_t kv, int32_t head, int64_t index) const {
    return (((static_cast<int64_t>(layer) * 2 + kv) * n_kv_heads + head) * n_tokens + index) *
           head_dim;
  }
  bool operator==(const KvImage&) const = default;
};

// A KvImage's layout over bytes someone else owns (a snapshot mapped from its file): restore
// reads the K/V where they lie, without copying them into an image first.
struct KvView {
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t n_tokens = 0;
  const uint16_t* data = nullptr;  // [n_layers][2][n_kv_heads][n_tokens][head_dim]
  int64_t size = 0;                // elements at data

  int64_t elements() const {
    return static_cast<int64_t>(n_layers) * 2 * n_kv_heads * n_tokens * head_dim;
  }
  int64_t Offset(int32_t layer, int32_t kv, int32_t head, int64_t index) const {
    return (((static_cast<int64_t>(layer) * 2 + kv) * n_kv_heads + head) * n_tokens + index) *
           head_dim;
  }
  static KvView Of(const KvImage& image) {
    return {image.n_layers, image.n_kv_heads, image.head_dim, image.n_tokens, image.data.data(),
            static_cast<int64_t>(image.data.size())};
  }
};

// The K/V of cache.cached_span(). The cache must not change meanwhile (no chunk placed); the
// copy itself needs no lock on the pool's bookkeeping. ReadCacheKvInto reuses `out`'s buffer
// (a writer thread that captures session after session faults no new pages in).
StatusOr<KvImage> ReadCacheKv(const SessionCache& cache);
Status ReadCacheKvInto(const SessionCache& cache, KvImage* out);
// The same into `dest`, which holds the image's elements in its layout (n_tokens =
// cached_span().size()): a capture can gather straight into a snapshot's K/V section.
Status ReadCacheKvTo(const SessionCache& cache, uint16_t* dest);
// Writes the K/V into the blocks of a cache that holds exactly their n_tokens cached tokens
// (after SessionCache::Restore). INVALID_ARGUMENT when the shapes do not match.
Status WriteCacheKv(const SessionCache& cache, const KvView& kv);
inline Status WriteCacheKv(const SessionCache& cache, const KvImage& image) {
  return WriteCacheKv(cache, KvView::Of(image));
}

}  // namespace streamd
