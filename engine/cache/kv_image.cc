#include "engine/cache/kv_image.h"

#include <algorithm>
#include <string>

namespace streamd {
namespace {

// A cache's blocks staged on the host, one whole block (every layer) after another, in the
// order the cache lists them: sink blocks, then window blocks.
struct StagedBlocks {
  std::vector<int32_t> ids;
  int64_t n_sink_blocks = 0;
  int64_t block_run = 0;  // elements of one staged block: every layer's K and V
  std::vector<uint16_t> data;
};

StagedBlocks StageOf(const SessionCache& cache) {
  StagedBlocks s;
  s.ids.assign(cache.sink_block_ids().begin(), cache.sink_block_ids().end());
  s.ids.insert(s.ids.end(), cache.window_block_ids().begin(), cache.window_block_ids().end());
  s.n_sink_blocks = static_cast<int64_t>(cache.sink_block_ids().size());
  const kernels::KvPoolLayout& l = cache.pool()->layout();
  s.block_run = l.block_elems() * l.n_layers;
  s.data.assign(static_cast<size_t>(s.block_run) * s.ids.size(), 0);
  return s;
}

// Calls copy(staged_offset, image_index, tokens) for each run of consecutive cache indices
// that share a block (a run never crosses from the sinks into the window).
template <class Copy>
void ForEachRun(const SessionCache& cache, const StagedBlocks& staged, Copy&& copy) {
  const CachedSpan span = cache.cached_span();
  const kernels::SinkWindowTable table = cache.table();
  const int64_t b = table.block_size;
  for (int64_t i = 0; i < span.size();) {
    const int64_t p = span.Position(i);
    int64_t block, slot;
    if (p < table.sinks) {
      block = p / b;
      slot = p % b;
    } else {
      const int64_t w = p - table.sinks;
      block = staged.n_sink_blocks + (w / b - table.first_window_block);
      slot = w % b;
    }
    int64_t run = std::min<int64_t>(b - slot, span.size() - i);
    if (i < span.sinks) run = std::min<int64_t>(run, span.sinks - i);
    copy(block * staged.block_run, static_cast<int32_t>(slot), i, run);
    i += run;
  }
}

Status CheckShape(const SessionCache& cache, const KvImage& image) {
  const kernels::KvPoolLayout& l = cache.pool()->layout();
  if (image.n_layers != l.n_layers || image.n_kv_heads != l.n_kv_heads ||
      image.head_dim != l.head_dim) {
    return InvalidArgumentError(
        "K/V image of " + std::to_string(image.n_layers) + " layers, " +
        std::to_string(image.n_kv_heads) + " KV heads of " + std::to_string(image.head_dim) +
        " does not fit a pool of " + std::to_string(l.n_layers) + ", " +
        std::to_string(l.n_kv_heads) + " of " + std::to_string(l.head_dim));
  }
  if (image.n_tokens != cache.cached_span().size() ||
      static_cast<int64_t>(image.data.size()) != image.elements()) {
    return InvalidArgumentError("K/V image of " + std::to_string(image.n_tokens) +
                                " tokens (" + std::to_string(image.data.size()) +
                                " values) does not fit a cache holding " +
                                std::to_string(cache.cached_span().size()));
  }
  return OkStatus();
}

}  // namespace

StatusOr<KvImage> ReadCacheKv(const SessionCache& cache) {
  if (cache.placed() != 0) {
    return FailedPreconditionError("read K/V: a chunk is placed and not committed");
  }
  const kernels::KvPoolLayout& l = cache.pool()->layout();
  KvImage image;
  image.n_layers = l.n_layers;
  image.n_kv_heads = l.n_kv_heads;
  image.head_dim = l.head_dim;
  image.n_tokens = cache.cached_span().size();
  image.data.assign(static_cast<size_t>(image.elements()), 0);
  StagedBlocks staged = StageOf(cache);
  STREAMD_RETURN_IF_ERROR(cache.pool()->ReadBlocks(staged.ids, staged.data.data()));
  ForEachRun(cache, staged, [&](int64_t at, int32_t slot, int64_t index, int64_t run) {
    for (int32_t layer = 0; layer < l.n_layers; ++layer) {
      const uint16_t* base = staged.data.data() + at + layer * l.block_elems();
      for (int32_t kv = 0; kv < 2; ++kv) {
        for (int32_t h = 0; h < l.n_kv_heads; ++h) {
          std::copy_n(base + l.Offset(0, kv, h, slot), run * l.head_dim,
                      image.data.data() + image.Offset(layer, kv, h, index));
        }
      }
    }
  });
  return image;
}

Status WriteCacheKv(const SessionCache& cache, const KvImage& image) {
  STREAMD_RETURN_IF_ERROR(CheckShape(cache, image));
  const kernels::KvPoolLayout& l = cache.pool()->layout();
  StagedBlocks staged = StageOf(cache);
  ForEachRun(cache, staged, [&](int64_t at, int32_t slot, int64_t index, int64_t run) {
    for (int32_t layer = 0; layer < l.n_layers; ++layer) {
      uint16_t* base = staged.data.data() + at + layer * l.block_elems();
      for (int32_t kv = 0; kv < 2; ++kv) {
        for (int32_t h = 0; h < l.n_kv_heads; ++h) {
          std::copy_n(image.data.data() + image.Offset(layer, kv, h, index), run * l.head_dim,
                      base + l.Offset(0, kv, h, slot));
        }
      }
    }
  });
  return cache.pool()->WriteBlocks(staged.ids, staged.data.data());
}

}  // namespace streamd
