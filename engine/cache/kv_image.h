// KvImage: one session's cached K/V in cache order, independent of pools, block sizes and
// backends; what SessionState carries. ReadCacheKv gathers it out of a cache's blocks and
// WriteCacheKv scatters it into a cache restored with SessionCache::Restore, through the pool's
// block copies (BlockPool::ReadBlocks / WriteBlocks), so device pools work too.
//
// Layout: per layer, K then V, per KV head, the cached tokens in cache order (sinks, then the
// window oldest first), head_dim values each: [n_layers][2][n_kv_heads][n_tokens][head_dim].
// One (layer, K/V, head) run of a block's slots is one contiguous copy on either side. Pools
// in host memory are copied to and from directly; device pools go through a host staging copy
// of their blocks (one 2D copy per block).
//
// Dtype: an image holds the K/V as its pool stores them, f16 or int8 with the pool's static
// scales (kv_scales.h), so a capture of an int8 session is half the bytes of an f16 one and
// moves no conversion. Writing an image into a pool converts only where the encodings differ
// (kv_convert.h):
//   f16  -> f16 pool                     copied
//   f16  -> int8 pool                    quantized with the pool's scales
//   int8 -> int8 pool, the same scales   copied: bit for bit the cache it was read from
//   int8 -> int8 pool, other scales      dequantized with the image's, quantized with the pool's
//   int8 -> f16 pool (host or device)    dequantized with the image's scales
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cache/kv_scales.h"
#include "engine/cache/session_cache.h"
#include "engine/util/status.h"
#include "kernels/common/paged_kv.h"

namespace streamd {

struct KvImage {
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t n_tokens = 0;
  // kF16: f16 bits, [n_layers][2 (K, V)][n_kv_heads][n_tokens][head_dim].
  std::vector<uint16_t> data;
  kernels::KvDtype dtype = kernels::KvDtype::kF16;
  std::vector<int8_t> data_i8;  // kInt8: the same layout, value = scale[channel] * q
  // kInt8: the scales data_i8 was quantized with (the pool's); null for kF16.
  std::shared_ptr<const KvInt8Scales> scales;

  int64_t elements() const {
    return static_cast<int64_t>(n_layers) * 2 * n_kv_heads * n_tokens * head_dim;
  }
  // Bytes of the K/V in this dtype (without the scales).
  int64_t bytes() const { return elements() * kernels::KvDtypeBytes(dtype); }
  // Elements held in the dtype's vector.
  int64_t held() const {
    return static_cast<int64_t>(dtype == kernels::KvDtype::kInt8 ? data_i8.size() : data.size());
  }
  // Offset of the head_dim vector of (layer, K or V, head, cache index).
  int64_t Offset(int32_t layer, int32_t kv, int32_t head, int64_t index) const {
    return (((static_cast<int64_t>(layer) * 2 + kv) * n_kv_heads + head) * n_tokens + index) *
           head_dim;
  }
  // Scales compare by value: two images are equal when they hold the same numbers.
  bool operator==(const KvImage& o) const;
};

// Layers of a cache's image: the pool's, or the model's when the local layers keep a cache of
// their own (then the image still holds every layer: it reads and restores the same with or
// without the split, the local layers' rows that their cache no longer holds as zeros).
int32_t KvImageLayers(const SessionCache& cache);

// Whether two sets of scales hold the same numbers (both null counts as equal).
bool SameScales(const KvInt8Scales* a, const KvInt8Scales* b);

// A KvImage's layout over bytes someone else owns (a snapshot mapped from its file): restore
// reads the K/V where they lie, without copying them into an image first.
struct KvView {
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t n_tokens = 0;
  const uint16_t* data = nullptr;  // kF16: [n_layers][2][n_kv_heads][n_tokens][head_dim]
  int64_t size = 0;                // elements at data (kF16) or data_i8 (kInt8)
  kernels::KvDtype dtype = kernels::KvDtype::kF16;
  const int8_t* data_i8 = nullptr;             // kInt8: the same layout
  std::shared_ptr<const KvInt8Scales> scales;  // kInt8: what data_i8 was quantized with

  int64_t elements() const {
    return static_cast<int64_t>(n_layers) * 2 * n_kv_heads * n_tokens * head_dim;
  }
  int64_t Offset(int32_t layer, int32_t kv, int32_t head, int64_t index) const {
    return (((static_cast<int64_t>(layer) * 2 + kv) * n_kv_heads + head) * n_tokens + index) *
           head_dim;
  }
  static KvView Of(const KvImage& image) {
    return {image.n_layers, image.n_kv_heads,     image.head_dim,
            image.n_tokens, image.data.data(),    image.held(),
            image.dtype,    image.data_i8.data(), image.scales};
  }
};

// OK when `kv` holds all its elements and, for int8, scales of its shape; else INVALID_ARGUMENT
// saying what is missing. WriteCacheKv checks it; Engine::Restore checks it before it admits.
Status CheckKvView(const KvView& kv);

// The K/V of cache.cached_span(), in the pool's dtype (an int8 pool's image carries its
// scales). The cache must not change meanwhile (no chunk placed); the copy itself needs no lock
// on the pool's bookkeeping. ReadCacheKvInto reuses `out`'s buffers (a writer thread that
// captures session after session faults no new pages in).
StatusOr<KvImage> ReadCacheKv(const SessionCache& cache);
Status ReadCacheKvInto(const SessionCache& cache, KvImage* out);
// The same into `dest`, which holds the image's bytes in its layout and the pool's dtype
// (n_tokens = cached_span().size(); f16 values, or int8 ones for an int8 pool): a capture can
// gather straight into a snapshot's K/V section.
Status ReadCacheKvTo(const SessionCache& cache, void* dest);
// Writes the K/V into the blocks of a cache that holds exactly their n_tokens cached tokens
// (after SessionCache::Restore), converting as the table above says. INVALID_ARGUMENT when the
// shapes do not match or the view is incomplete (CheckKvView).
Status WriteCacheKv(const SessionCache& cache, const KvView& kv);
inline Status WriteCacheKv(const SessionCache& cache, const KvImage& image) {
  return WriteCacheKv(cache, KvView::Of(image));
}

}  // namespace streamd
