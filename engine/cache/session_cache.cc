#include "engine/cache/session_cache.h"

#include <algorithm>
#include <string>

namespace streamd {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string_view CacheModeName(CacheMode mode) {
  switch (mode) {
    case CacheMode::kDense: return "dense";
    case CacheMode::kWindow: return "window";
    case CacheMode::kSink: return "sink";
  }
  return "?";
}

StatusOr<CacheMode> ParseCacheMode(std::string_view name) {
  if (name == "dense") return CacheMode::kDense;
  if (name == "window") return CacheMode::kWindow;
  if (name == "sink") return CacheMode::kSink;
  return InvalidArgumentError("cache mode \"" + std::string(name) +
                              "\" is not one of dense, window, sink");
}

CacheSpec SessionCache::Effective(CacheSpec spec, int32_t model_context) {
  if (spec.mode == CacheMode::kDense) {
    spec.sinks = 0;
    spec.window = model_context;
  } else if (spec.mode == CacheMode::kWindow) {
    spec.sinks = 0;
  }
  return spec;
}

int32_t SessionCache::MaxBlocks(const CacheSpec& spec, int32_t block_size) {
  const int64_t ring = CeilDiv(spec.window + spec.max_chunk - 1, block_size) + 1;
  return static_cast<int32_t>(CeilDiv(spec.sinks, block_size) + ring);
}

StatusOr<std::unique_ptr<SessionCache>> SessionCache::Create(BlockPool* pool, CacheSpec spec,
                                                             int32_t model_context) {
  spec = Effective(spec, model_context);
  if (spec.sinks < 0) {
    return InvalidArgumentError("sinks = " + std::to_string(spec.sinks) + " must be >= 0");
  }
  if (spec.window < 1) {
    return InvalidArgumentError("window = " + std::to_string(spec.window) + " must be >= 1");
  }
  if (static_cast<int64_t>(spec.sinks) + spec.window > model_context) {
    return InvalidArgumentError("sinks + window = " + std::to_string(spec.sinks) + " + " +
                                std::to_string(spec.window) + " is over the model context of " +
                                std::to_string(model_context) + " positions");
  }
  if (spec.max_chunk < 1 || spec.max_chunk > model_context) {
    return InvalidArgumentError("max_chunk = " + std::to_string(spec.max_chunk) +
                                " is outside [1, " + std::to_string(model_context) + "]");
  }
  const int32_t need = MaxBlocks(spec, pool->block_size());
  if (need > pool->total_blocks()) {
    return ResourceExhaustedError(
        "a " + std::string(CacheModeName(spec.mode)) + " cache with sinks " +
        std::to_string(spec.sinks) + ", window " + std::to_string(spec.window) + " and chunks of " +
        std::to_string(spec.max_chunk) + " needs up to " + std::to_string(need) +
        " blocks; the whole pool has " + std::to_string(pool->total_blocks()));
  }
  return std::unique_ptr<SessionCache>(new SessionCache(pool, spec));
}

SessionCache::SessionCache(BlockPool* pool, CacheSpec spec)
    : pool_(pool),
      spec_(spec),
      ring_size_(static_cast<int32_t>(
          CeilDiv(spec.window + spec.max_chunk - 1, pool->block_size()) + 1)),
      max_blocks_(MaxBlocks(spec, pool->block_size())) {}

SessionCache::~SessionCache() {
  for (int32_t b : sink_blocks_) pool_->Free(b);
  for (int32_t b : ring_blocks_) pool_->Free(b);
}

Status SessionCache::Reserve(int32_t n) {
  if (n < 1 || n > spec_.max_chunk) {
    return InvalidArgumentError("a chunk of " + std::to_string(n) + " tokens is outside [1, " +
                                std::to_string(spec_.max_chunk) + "]");
  }
  const int64_t last = seen_ + n - 1;  // text position of the chunk's last token
  if (spec_.mode == CacheMode::kDense && last >= spec_.window) {
    return OutOfRangeError("the dense cache holds " + std::to_string(spec_.window) +
                           " tokens (the model context); " + std::to_string(seen_) +
                           " are used and " + std::to_string(n) + " more were appended");
  }
  const int32_t b = pool_->block_size();
  // Sink blocks for positions < S in this chunk.
  const int64_t sink_end = std::min<int64_t>(last + 1, spec_.sinks);
  while (static_cast<int64_t>(sink_blocks_.size()) * b < sink_end) {
    const int32_t id = pool_->Allocate();
    if (id < 0) return ResourceExhaustedError("KV pool has no free block for a sink");
    sink_blocks_.push_back(id);
  }
  // Ring blocks for window positions in this chunk; once the ring is full its blocks are
  // reused in order (the oldest block holds only tokens no query of this chunk sees).
  if (last >= spec_.sinks) {
    const int64_t last_block = (last - spec_.sinks) / b;
    while (static_cast<int64_t>(ring_blocks_.size()) <= std::min<int64_t>(last_block, ring_size_ - 1)) {
      const int32_t id = pool_->Allocate();
      if (id < 0) return ResourceExhaustedError("KV pool has no free block for the window");
      ring_blocks_.push_back(id);
    }
  }
  return OkStatus();
}

void SessionCache::Commit(int32_t n) { seen_ += n; }

int64_t SessionCache::tokens_cached() const {
  const int64_t sinks = std::min<int64_t>(seen_, spec_.sinks);
  const int64_t window = std::min<int64_t>(seen_ - sinks, spec_.window);
  return sinks + window;
}

kernels::SinkWindowTable SessionCache::table() const {
  kernels::SinkWindowTable t;
  t.sink_blocks = sink_blocks_.data();
  t.ring_blocks = ring_blocks_.data();
  t.sinks = spec_.sinks;
  t.window = spec_.window;
  t.ring_size = ring_size_;
  t.block_size = pool_->block_size();
  return t;
}

}  // namespace streamd
