#include "engine/cache/kv_image.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/cache/kv_convert.h"

namespace streamd {
namespace {

// Where cache index i's slot is, as (block id, its place in the cache's block list, slot).
// Calls copy(block_id, list_index, slot, index, tokens) for each run of consecutive cache
// indices that share a block (a run never crosses from the sinks into the window).
template <class Copy>
void ForEachRun(const SessionCache& cache, Copy&& copy) {
  const CachedSpan span = cache.cached_span();
  const kernels::SinkWindowTable table = cache.table();
  const int64_t n_sink_blocks = static_cast<int64_t>(cache.sink_block_ids().size());
  const int64_t b = table.block_size;
  for (int64_t i = 0; i < span.size();) {
    const int64_t p = span.Position(i);
    int64_t listed, slot;
    if (p < table.sinks) {
      listed = p / b;
      slot = p % b;
    } else {
      const int64_t w = p - table.sinks;
      listed = n_sink_blocks + (w / b - table.first_window_block);
      slot = w % b;
    }
    int64_t run = std::min<int64_t>(b - slot, span.size() - i);
    if (i < span.sinks) run = std::min<int64_t>(run, span.sinks - i);
    const int32_t block = listed < n_sink_blocks ? cache.sink_block_ids()[listed]
                                                 : cache.window_block_ids()[listed - n_sink_blocks];
    copy(block, listed, static_cast<int32_t>(slot), i, run);
    i += run;
  }
}

std::vector<int32_t> BlockList(const SessionCache& cache) {
  std::vector<int32_t> ids(cache.sink_block_ids().begin(), cache.sink_block_ids().end());
  ids.insert(ids.end(), cache.window_block_ids().begin(), cache.window_block_ids().end());
  return ids;
}

template <class Image>
Status CheckShape(const SessionCache& cache, const Image& image, int64_t have) {
  const kernels::KvPoolLayout& l = cache.pool()->layout();
  const int32_t layers = KvImageLayers(cache);
  if (image.n_layers != layers || image.n_kv_heads != l.n_kv_heads ||
      image.head_dim != l.head_dim) {
    return InvalidArgumentError("K/V image of " + std::to_string(image.n_layers) + " layers, " +
                                std::to_string(image.n_kv_heads) + " KV heads of " +
                                std::to_string(image.head_dim) + " does not fit a pool of " +
                                std::to_string(layers) + ", " + std::to_string(l.n_kv_heads) +
                                " of " + std::to_string(l.head_dim));
  }
  if (image.n_tokens != cache.cached_span().size() || have != image.elements()) {
    return InvalidArgumentError("K/V image of " + std::to_string(image.n_tokens) + " tokens (" +
                                std::to_string(have) + " values) does not fit a cache holding " +
                                std::to_string(cache.cached_span().size()));
  }
  return OkStatus();
}

// The runs first, then one pass per (layer, K/V, head) over them: `out` is then written front
// to back (each pass fills one contiguous [tokens][head_dim] stretch), which streams at memory
// speed where block-major order scattered 2-KiB writes over the whole image. `source(layer,
// run)` is where that run's layer starts, in the pool's own elements (T: f16 bits or int8).
struct Run {
  int32_t block;
  int32_t slot;
  int64_t listed, index, tokens;
};

template <typename T, class Source>
void GatherRuns(const SessionCache& cache, const KvView& layout, Source&& source, T* out) {
  const kernels::KvPoolLayout& l = cache.pool()->layout();
  thread_local std::vector<Run> runs;
  runs.clear();
  ForEachRun(cache, [&](int32_t block, int64_t listed, int32_t slot, int64_t index, int64_t run) {
    runs.push_back({block, slot, listed, index, run});
  });
  for (int32_t layer = 0; layer < l.n_layers; ++layer) {
    for (int32_t kv = 0; kv < 2; ++kv) {
      for (int32_t h = 0; h < l.n_kv_heads; ++h) {
        T* dest = out + layout.Offset(layer, kv, h, 0);
        for (const Run& r : runs) {
          const T* base = source(layer, r) + l.Offset(0, kv, h, r.slot);
          std::copy_n(base, r.tokens * l.head_dim, dest + r.index * l.head_dim);
        }
      }
    }
  }
}

// The runs of a cache as a list (ForEachRun's order).
std::vector<Run> RunsOf(const SessionCache& cache) {
  std::vector<Run> runs;
  ForEachRun(cache, [&](int32_t block, int64_t listed, int32_t slot, int64_t index, int64_t run) {
    runs.push_back({block, slot, listed, index, run});
  });
  return runs;
}

// The local layers' runs, their indices moved to where their positions are in the main cache's
// span (the image's token order): the local span lies inside the main one, and consecutive
// positions there have consecutive indices.
std::vector<Run> LocalRunsOf(const SessionCache& cache) {
  const CachedSpan main = cache.cached_span();
  const CachedSpan local = cache.local()->cached_span();
  std::vector<Run> runs = RunsOf(*cache.local());
  for (Run& r : runs) {
    r.index = main.Index(local.Position(r.index));
  }
  return runs;
}

// A session whose local layers keep a cache of their own (f16 host pools, SessionCache::Create
// checks): each model layer moves between the image and its own pool, a local layer's rows at
// the image indices of the positions its cache holds. Calls move(layer, kv, head, cached, image
// offset, elements) for each (layer, K/V, head, run).
template <class Move>
void ForEachSplitRun(const SessionCache& cache, const KvView& layout, Move&& move) {
  const LayerSplit& split = *cache.layer_split();
  const kernels::KvPoolLayout& l = cache.pool()->layout();  // the per-block layout both share
  const std::vector<Run> main_runs = RunsOf(cache);
  const std::vector<Run> local_runs = LocalRunsOf(cache);
  for (int32_t layer = 0; layer < split.n_layers(); ++layer) {
    const bool local = split.local[layer] != 0;
    BlockPool& pool = local ? *cache.local()->pool() : *cache.pool();
    uint16_t* base = pool.layer_data(split.index[layer]);
    for (int32_t kv = 0; kv < 2; ++kv) {
      for (int32_t h = 0; h < l.n_kv_heads; ++h) {
        for (const Run& r : local ? local_runs : main_runs) {
          move(layer, kv, h, base + l.Offset(r.block, kv, h, r.slot),
               layout.Offset(layer, kv, h, r.index), r.tokens * l.head_dim);
        }
      }
    }
  }
}

// The image of such a session: the local layers' rows that their cache no longer holds are
// zeros (no local layer reads them again: its cache holds everything it will read).
void ReadSplitKv(const SessionCache& cache, const KvView& layout, uint16_t* out) {
  const LayerSplit& split = *cache.layer_split();
  const int64_t section = layout.n_tokens * layout.head_dim;  // one (layer, K/V, head)
  for (int32_t layer = 0; layer < split.n_layers(); ++layer) {
    if (split.local[layer] == 0) continue;
    std::fill_n(out + layout.Offset(layer, 0, 0, 0), 2 * layout.n_kv_heads * section, uint16_t{0});
  }
  ForEachSplitRun(cache, layout,
                  [&](int32_t, int32_t, int32_t, const uint16_t* cached, int64_t at, int64_t n) {
                    std::copy_n(cached, n, out + at);
                  });
}

// Into such a session: f16 values copied, int8 ones dequantized with the view's scales, run by
// run (as into a shared f16 pool).
void WriteSplitKv(const SessionCache& cache, const KvView& kv) {
  ForEachSplitRun(
      cache, kv, [&](int32_t layer, int32_t k, int32_t h, uint16_t* cached, int64_t at, int64_t n) {
        if (kv.dtype == kernels::KvDtype::kInt8) {
          DequantizeRowsToF16(kv.data_i8 + at, n / kv.head_dim, kv.head_dim,
                              kv.scales->scales(layer, k) + h * kv.head_dim, cached);
        } else {
          std::copy_n(kv.data + at, n, cached);
        }
      });
}

}  // namespace

int32_t KvImageLayers(const SessionCache& cache) {
  return cache.layer_split() != nullptr ? cache.layer_split()->n_layers()
                                        : cache.pool()->layout().n_layers;
}

bool SameScales(const KvInt8Scales* a, const KvInt8Scales* b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr) return false;
  return a->n_layers() == b->n_layers() && a->n_kv_heads() == b->n_kv_heads() &&
         a->head_dim() == b->head_dim() && a->k() == b->k() && a->v() == b->v();
}

bool KvImage::operator==(const KvImage& o) const {
  return n_layers == o.n_layers && n_kv_heads == o.n_kv_heads && head_dim == o.head_dim &&
         n_tokens == o.n_tokens && dtype == o.dtype && data == o.data && data_i8 == o.data_i8 &&
         SameScales(scales.get(), o.scales.get());
}

Status CheckKvView(const KvView& kv) {
  const bool int8 = kv.dtype == kernels::KvDtype::kInt8;
  if (!int8 && kv.dtype != kernels::KvDtype::kF16) {
    return InvalidArgumentError("K/V of unknown dtype " +
                                std::to_string(static_cast<int32_t>(kv.dtype)));
  }
  const void* values = int8 ? static_cast<const void*>(kv.data_i8) : kv.data;
  if (kv.size != kv.elements() || (kv.size > 0 && values == nullptr)) {
    return InvalidArgumentError("K/V of " + std::to_string(kv.n_tokens) + " tokens hold " +
                                std::to_string(kv.size) + " " + (int8 ? "int8" : "f16") +
                                " values, need " + std::to_string(kv.elements()));
  }
  if (!int8) return OkStatus();
  if (kv.scales == nullptr) return InvalidArgumentError("int8 K/V without their scales");
  if (kv.scales->n_layers() != kv.n_layers || kv.scales->n_kv_heads() != kv.n_kv_heads ||
      kv.scales->head_dim() != kv.head_dim) {
    return InvalidArgumentError(
        "int8 K/V of " + std::to_string(kv.n_layers) + " layers x " +
        std::to_string(kv.n_kv_heads) + " KV heads x " + std::to_string(kv.head_dim) +
        " with scales of " + std::to_string(kv.scales->n_layers()) + " x " +
        std::to_string(kv.scales->n_kv_heads()) + " x " + std::to_string(kv.scales->head_dim()));
  }
  return OkStatus();
}

Status ReadCacheKvTo(const SessionCache& cache, void* out) {
  if (cache.placed() != 0) {
    return FailedPreconditionError("read K/V: a chunk is placed and not committed");
  }
  BlockPool& pool = *cache.pool();
  const kernels::KvPoolLayout& l = pool.layout();
  KvView layout;  // where each (layer, K/V, head, index) goes in `out`
  layout.n_layers = KvImageLayers(cache);
  layout.n_kv_heads = l.n_kv_heads;
  layout.head_dim = l.head_dim;
  layout.n_tokens = cache.cached_span().size();
  if (cache.local() != nullptr) {
    ReadSplitKv(cache, layout, static_cast<uint16_t*>(out));
    return OkStatus();
  }
  if (pool.dtype() == kernels::KvDtype::kInt8) {
    // An int8 pool: its bytes as they are, the scales travel beside them.
    if (!pool.host_accessible()) {
      return FailedPreconditionError("read K/V: int8 pools live in host memory only");
    }
    GatherRuns<int8_t>(
        cache, layout,
        [&](int32_t layer, const Run& r) {
          return pool.layer_data_i8(layer) + l.Offset(r.block, 0, 0, 0);
        },
        static_cast<int8_t*>(out));
    return OkStatus();
  }
  // Host pools are read where they lie; device pools through one staged copy per block.
  std::vector<uint16_t> staged;
  const int64_t block_run = l.block_elems() * l.n_layers;
  if (!pool.host_accessible()) {
    staged.resize(static_cast<size_t>(block_run) * BlockList(cache).size());
    STREAMD_RETURN_IF_ERROR(pool.ReadBlocks(BlockList(cache), staged.data()));
  }
  GatherRuns<uint16_t>(
      cache, layout,
      [&](int32_t layer, const Run& r) -> const uint16_t* {
        return pool.host_accessible()
                   ? pool.layer_data(layer) + l.Offset(r.block, 0, 0, 0)
                   : staged.data() + r.listed * block_run + layer * l.block_elems();
      },
      static_cast<uint16_t*>(out));
  return OkStatus();
}

Status ReadCacheKvInto(const SessionCache& cache, KvImage* image) {
  const BlockPool& pool = *cache.pool();
  const kernels::KvPoolLayout& l = pool.layout();
  image->n_layers = KvImageLayers(cache);
  image->n_kv_heads = l.n_kv_heads;
  image->head_dim = l.head_dim;
  image->n_tokens = cache.cached_span().size();
  image->dtype = pool.dtype();
  image->scales = pool.int8_scales_shared();
  // Each keeps the capacity it had; the other dtype's vector is emptied.
  if (image->dtype == kernels::KvDtype::kInt8) {
    image->data.clear();
    image->data_i8.resize(static_cast<size_t>(image->elements()));
    return ReadCacheKvTo(cache, image->data_i8.data());
  }
  image->data_i8.clear();
  image->data.resize(static_cast<size_t>(image->elements()));
  return ReadCacheKvTo(cache, image->data.data());
}

StatusOr<KvImage> ReadCacheKv(const SessionCache& cache) {
  KvImage image;
  STREAMD_RETURN_IF_ERROR(ReadCacheKvInto(cache, &image));
  return image;
}

Status WriteCacheKv(const SessionCache& cache, const KvView& kv) {
  STREAMD_RETURN_IF_ERROR(CheckKvView(kv));
  STREAMD_RETURN_IF_ERROR(CheckShape(cache, kv, kv.size));
  BlockPool& pool = *cache.pool();
  const kernels::KvPoolLayout& l = pool.layout();
  const bool from_int8 = kv.dtype == kernels::KvDtype::kInt8;
  if (cache.local() != nullptr) {
    WriteSplitKv(cache, kv);
    return OkStatus();
  }
  if (const KvInt8Scales* scales = pool.int8_scales()) {
    // Into an int8 pool: the same scales copy the bytes (bit for bit the cache they came from);
    // other ones, or f16 values, are (re)quantized with the pool's.
    if (!pool.host_accessible()) {
      return FailedPreconditionError("write K/V: int8 pools live in host memory only");
    }
    const bool same = from_int8 && SameScales(kv.scales.get(), scales);
    ForEachRun(cache, [&](int32_t block, int64_t, int32_t slot, int64_t index, int64_t run) {
      for (int32_t layer = 0; layer < l.n_layers; ++layer) {
        for (int32_t k = 0; k < 2; ++k) {
          for (int32_t h = 0; h < l.n_kv_heads; ++h) {
            int8_t* dest = pool.layer_data_i8(layer) + l.Offset(block, k, h, slot);
            const int64_t at = kv.Offset(layer, k, h, index);
            const float* inverse = scales->inverses(layer, k) + h * l.head_dim;
            if (same) {
              std::copy_n(kv.data_i8 + at, run * l.head_dim, dest);
            } else if (from_int8) {
              RequantizeRows(kv.data_i8 + at, run, l.head_dim,
                             kv.scales->scales(layer, k) + h * l.head_dim, inverse, dest);
            } else {
              QuantizeRowsFromF16(kv.data + at, run, l.head_dim, inverse, dest);
            }
          }
        }
      }
    });
    return OkStatus();
  }
  // Into an f16 pool (host, or a device pool through a staged copy): f16 values are copied,
  // int8 ones dequantized with the view's scales.
  const int64_t block_run = l.block_elems() * l.n_layers;
  std::vector<uint16_t> staged;
  if (!pool.host_accessible()) {
    staged.assign(static_cast<size_t>(block_run) * BlockList(cache).size(), 0);
  }
  ForEachRun(cache, [&](int32_t block, int64_t listed, int32_t slot, int64_t index, int64_t run) {
    for (int32_t layer = 0; layer < l.n_layers; ++layer) {
      uint16_t* base = pool.host_accessible()
                           ? pool.layer_data(layer)
                           : staged.data() + listed * block_run + layer * l.block_elems();
      const int32_t at = pool.host_accessible() ? block : 0;
      for (int32_t k = 0; k < 2; ++k) {
        for (int32_t h = 0; h < l.n_kv_heads; ++h) {
          uint16_t* dest = base + l.Offset(at, k, h, slot);
          const int64_t from = kv.Offset(layer, k, h, index);
          if (from_int8) {
            DequantizeRowsToF16(kv.data_i8 + from, run, l.head_dim,
                                kv.scales->scales(layer, k) + h * l.head_dim, dest);
          } else {
            std::copy_n(kv.data + from, run * l.head_dim, dest);
          }
        }
      }
    }
  });
  if (pool.host_accessible()) return OkStatus();
  return pool.WriteBlocks(BlockList(cache), staged.data());
}

}  // namespace streamd
