#include "engine/cache/kv_image.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/vec_ops.h"

namespace streamd {
namespace {

// An int8 pool's rows (kv_scales.h): `rows` rows of head_dim values, f16 out[r][c] =
// scale[c] * q[r][c], and back: q[r][c] = round(f16 in[r][c] * inverse[c]) saturated to
// [-127, 127].
// Through f32 rows, with the kernels' vector f16 conversions (scalar ones made an int8 session's
// snapshot capture ~20x slower than an f16 one's).
void DequantizeRowsToF16(const int8_t* q, int64_t rows, int32_t head_dim, const float* scale,
                         uint16_t* out) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(head_dim));
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < head_dim; ++c) row[c] = scale[c] * q[r * head_dim + c];
    kernels::cpu::FloatToHalfRow(row.data(), out + r * head_dim, head_dim);
  }
}

void QuantizeRowsFromF16(const uint16_t* in, int64_t rows, int32_t head_dim,
                         const float* inverse, int8_t* q) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(head_dim));
  for (int64_t r = 0; r < rows; ++r) {
    kernels::cpu::HalfToFloatRow(in + r * head_dim, row.data(), head_dim);
    kernels::cpu::QuantizeRowI8(row.data(), inverse, head_dim, q + r * head_dim);
  }
}


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
    const int32_t block = listed < n_sink_blocks
                              ? cache.sink_block_ids()[listed]
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
  if (image.n_layers != l.n_layers || image.n_kv_heads != l.n_kv_heads ||
      image.head_dim != l.head_dim) {
    return InvalidArgumentError(
        "K/V image of " + std::to_string(image.n_layers) + " layers, " +
        std::to_string(image.n_kv_heads) + " KV heads of " + std::to_string(image.head_dim) +
        " does not fit a pool of " + std::to_string(l.n_layers) + ", " +
        std::to_string(l.n_kv_heads) + " of " + std::to_string(l.head_dim));
  }
  if (image.n_tokens != cache.cached_span().size() || have != image.elements()) {
    return InvalidArgumentError("K/V image of " + std::to_string(image.n_tokens) +
                                " tokens (" + std::to_string(have) +
                                " values) does not fit a cache holding " +
                                std::to_string(cache.cached_span().size()));
  }
  return OkStatus();
}

}  // namespace

Status ReadCacheKvTo(const SessionCache& cache, uint16_t* out) {
  if (cache.placed() != 0) {
    return FailedPreconditionError("read K/V: a chunk is placed and not committed");
  }
  BlockPool& pool = *cache.pool();
  const kernels::KvPoolLayout& l = pool.layout();
  KvView layout;  // where each (layer, K/V, head, index) goes in `out`
  layout.n_layers = l.n_layers;
  layout.n_kv_heads = l.n_kv_heads;
  layout.head_dim = l.head_dim;
  layout.n_tokens = cache.cached_span().size();
  // Host pools are read where they lie; device pools through one staged copy per block.
  std::vector<uint16_t> staged;
  const int64_t block_run = l.block_elems() * l.n_layers;
  if (!pool.host_accessible()) {
    staged.resize(static_cast<size_t>(block_run) * BlockList(cache).size());
    STREAMD_RETURN_IF_ERROR(pool.ReadBlocks(BlockList(cache), staged.data()));
  }
  if (const KvInt8Scales* scales = pool.int8_scales()) {
    // An int8 pool (always host memory): each run dequantized into the f16 image.
    ForEachRun(cache, [&](int32_t block, int64_t, int32_t slot, int64_t index, int64_t run) {
      for (int32_t layer = 0; layer < l.n_layers; ++layer) {
        for (int32_t kv = 0; kv < 2; ++kv) {
          for (int32_t h = 0; h < l.n_kv_heads; ++h) {
            DequantizeRowsToF16(pool.layer_data_i8(layer) + l.Offset(block, kv, h, slot), run,
                                l.head_dim, scales->scales(layer, kv) + h * l.head_dim,
                                out + layout.Offset(layer, kv, h, index));
          }
        }
      }
    });
    return OkStatus();
  }
  // The runs first, then one pass per (layer, K/V, head) over them: `out` is then written front
  // to back (each pass fills one contiguous [tokens][head_dim] stretch), which streams at
  // memory speed where block-major order scattered 2-KiB writes over the whole image.
  struct Run {
    int32_t block;
    int32_t slot;
    int64_t listed, index, tokens;
  };
  thread_local std::vector<Run> runs;
  runs.clear();
  ForEachRun(cache, [&](int32_t block, int64_t listed, int32_t slot, int64_t index, int64_t run) {
    runs.push_back({block, slot, listed, index, run});
  });
  for (int32_t layer = 0; layer < l.n_layers; ++layer) {
    for (int32_t kv = 0; kv < 2; ++kv) {
      for (int32_t h = 0; h < l.n_kv_heads; ++h) {
        uint16_t* dest = out + layout.Offset(layer, kv, h, 0);
        for (const Run& r : runs) {
          const uint16_t* base =
              pool.host_accessible()
                  ? pool.layer_data(layer) + l.Offset(r.block, kv, h, r.slot)
                  : staged.data() + r.listed * block_run + layer * l.block_elems() +
                        l.Offset(0, kv, h, r.slot);
          std::copy_n(base, r.tokens * l.head_dim, dest + r.index * l.head_dim);
        }
      }
    }
  }
  return OkStatus();
}

Status ReadCacheKvInto(const SessionCache& cache, KvImage* image) {
  const kernels::KvPoolLayout& l = cache.pool()->layout();
  image->n_layers = l.n_layers;
  image->n_kv_heads = l.n_kv_heads;
  image->head_dim = l.head_dim;
  image->n_tokens = cache.cached_span().size();
  image->data.resize(static_cast<size_t>(image->elements()));  // keeps the capacity it had
  return ReadCacheKvTo(cache, image->data.data());
}

StatusOr<KvImage> ReadCacheKv(const SessionCache& cache) {
  KvImage image;
  STREAMD_RETURN_IF_ERROR(ReadCacheKvInto(cache, &image));
  return image;
}

Status WriteCacheKv(const SessionCache& cache, const KvView& kv) {
  STREAMD_RETURN_IF_ERROR(CheckShape(cache, kv, kv.size));
  BlockPool& pool = *cache.pool();
  const kernels::KvPoolLayout& l = pool.layout();
  if (const KvInt8Scales* scales = pool.int8_scales()) {
    ForEachRun(cache, [&](int32_t block, int64_t, int32_t slot, int64_t index, int64_t run) {
      for (int32_t layer = 0; layer < l.n_layers; ++layer) {
        for (int32_t k = 0; k < 2; ++k) {
          for (int32_t h = 0; h < l.n_kv_heads; ++h) {
            QuantizeRowsFromF16(kv.data + kv.Offset(layer, k, h, index), run, l.head_dim,
                                scales->inverses(layer, k) + h * l.head_dim,
                                pool.layer_data_i8(layer) + l.Offset(block, k, h, slot));
          }
        }
      }
    });
    return OkStatus();
  }
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
          std::copy_n(kv.data + kv.Offset(layer, k, h, index), run * l.head_dim,
                      base + l.Offset(at, k, h, slot));
        }
      }
    }
  });
  if (pool.host_accessible()) return OkStatus();
  return pool.WriteBlocks(BlockList(cache), staged.data());
}

}  // namespace streamd
