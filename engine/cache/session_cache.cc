#include "engine/cache/session_cache.h"

#include <algorithm>
#include <string>

namespace streamd {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of B that n consecutive window indices may touch, whatever their alignment.
int64_t SpanBlocks(int64_t n, int32_t b) { return n <= 0 ? 0 : CeilDiv(n + b - 1, b); }

}  // namespace

std::string_view CacheModeName(CacheMode mode) {
  switch (mode) {
    case CacheMode::kDense:
      return "dense";
    case CacheMode::kWindow:
      return "window";
    case CacheMode::kSink:
      return "sink";
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

int32_t SessionCache::BoundBlocks(const CacheSpec& spec, int32_t block_size) {
  // A dense cache never slides: its tokens start block-aligned at 0.
  const int64_t window = spec.mode == CacheMode::kDense ? CeilDiv(spec.window, block_size)
                                                        : SpanBlocks(spec.window, block_size);
  return static_cast<int32_t>(CeilDiv(spec.sinks, block_size) + window);
}

int32_t SessionCache::PeakBlocks(const CacheSpec& spec, int32_t block_size) {
  if (spec.mode == CacheMode::kDense) return BoundBlocks(spec, block_size);
  // The first query of a chunk of C still sees W - 1 earlier keys: W + C - 1 window indices.
  return static_cast<int32_t>(
      CeilDiv(spec.sinks, block_size) +
      SpanBlocks(static_cast<int64_t>(spec.window) + spec.max_chunk - 1, block_size));
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
  const int32_t need = BoundBlocks(spec, pool->block_size());
  if (need > pool->total_blocks()) {
    return ResourceExhaustedError("a " + std::string(CacheModeName(spec.mode)) +
                                  " cache with sinks " + std::to_string(spec.sinks) +
                                  " and window " + std::to_string(spec.window) + " needs up to " +
                                  std::to_string(need) + " blocks; the whole pool has " +
                                  std::to_string(pool->total_blocks()));
  }
  return std::unique_ptr<SessionCache>(new SessionCache(pool, spec));
}

SessionCache::SessionCache(BlockPool* pool, CacheSpec spec)
    : pool_(pool), spec_(spec), bound_blocks_(BoundBlocks(spec, pool->block_size())) {}

SessionCache::~SessionCache() {
  for (int32_t b : sink_blocks_) pool_->Free(b);
  for (int32_t b : window_blocks_) pool_->Free(b);
}

CachedSpan CachedSpanOf(const CacheSpec& spec, int64_t seen) {
  CachedSpan span;
  span.sinks = std::min<int64_t>(seen, spec.sinks);
  if (seen > spec.sinks) {
    // A dense cache never evicts (there is no query past its context to make room for).
    span.window_begin =
        spec.mode == CacheMode::kDense ? 0 : std::max<int64_t>(spec.sinks, seen - spec.window + 1);
    span.window_end = seen;
  } else {
    span.window_begin = span.window_end = spec.sinks;
  }
  return span;
}

CachedSpan SessionCache::CachedSpanAt(int64_t seen) const { return CachedSpanOf(spec_, seen); }

int32_t CacheGeometry::BlocksForChunk(int32_t n) const {
  const int64_t last = seen + n - 1;  // text position of the chunk's last token
  // Between steps a cache holds exactly the sink blocks of its committed sinks (Trim).
  const int64_t sink_blocks = CeilDiv(std::min<int64_t>(last + 1, sinks), block_size);
  int64_t window_blocks = 0;
  if (last >= sinks) {
    // From the oldest key the chunk's first query sees to the chunk's last token.
    const int64_t first = seen < sinks ? sinks : std::max<int64_t>(sinks, seen - window + 1);
    window_blocks = (last - sinks) / block_size - (first - sinks) / block_size + 1;
  }
  return static_cast<int32_t>(sink_blocks + window_blocks);
}

int32_t CacheGeometry::HeadroomForChunk(int32_t n) const {
  return std::max(0, BlocksForChunk(n) - bound_blocks);
}

int32_t CacheGeometry::LongestChunkWithin(int32_t n, int32_t headroom) const {
  if (n <= 1 || HeadroomForChunk(n) <= headroom) return std::max(n, 1);
  // Blocks grow with n: the longest fitting chunk by bisection (n = 1 never borrows).
  int32_t lo = 1, hi = n;  // HeadroomForChunk(lo) <= headroom < HeadroomForChunk(hi)
  while (hi - lo > 1) {
    const int32_t mid = lo + (hi - lo) / 2;
    (HeadroomForChunk(mid) <= headroom ? lo : hi) = mid;
  }
  return lo;
}

CacheGeometry SessionCache::geometry() const {
  return {spec_.sinks, spec_.window, pool_->block_size(), bound_blocks_, seen_};
}

Status SessionCache::BeginChunk(std::span<const int32_t> tokens) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (!placed_.empty()) {
    return FailedPreconditionError("a chunk of " + std::to_string(placed_.size()) +
                                   " tokens is already placed and not committed");
  }
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
  // Copies of shared blocks replace held ones: they need free blocks, not a larger bound.
  const int32_t need = BlocksForChunk(n) - blocks_held() + SharedWrites(last);
  if (need > pool_->free_blocks()) {
    return ResourceExhaustedError("the KV pool has " + std::to_string(pool_->free_blocks()) +
                                  " free blocks; a chunk of " + std::to_string(n) +
                                  " tokens needs " + std::to_string(need) + " more");
  }
  STREAMD_RETURN_IF_ERROR(CopySharedWrites(last));
  const int64_t sink_end = std::min<int64_t>(last + 1, spec_.sinks);
  while (static_cast<int64_t>(sink_blocks_.size()) * b < sink_end) {
    sink_blocks_.push_back(pool_->Allocate());
  }
  if (last >= spec_.sinks) {
    if (window_blocks_.empty()) {
      const int64_t first = seen_ < spec_.sinks
                                ? spec_.sinks
                                : std::max<int64_t>(spec_.sinks, seen_ - spec_.window + 1);
      first_block_ = WindowBlock(first - spec_.sinks);
    }
    const int64_t last_block = WindowBlock(last - spec_.sinks);
    while (first_block_ + static_cast<int64_t>(window_blocks_.size()) <= last_block) {
      window_blocks_.push_back(pool_->Allocate());
    }
  }
  placed_.assign(tokens.begin(), tokens.end());
  return OkStatus();
}

void SessionCache::Commit(int32_t kept) {
  kept = std::clamp(kept, 0, placed());
  for (int32_t i = 0; i < kept; ++i) {
    const int64_t p = seen_ + i;
    if (p < spec_.sinks) {
      sink_ids_.push_back(placed_[i]);
    } else {
      window_ids_.push_back(placed_[i]);
    }
  }
  seen_ += kept;
  placed_.clear();
  Trim();
  // Keep the ids of every window row still held: the cached window and the older tokens in
  // its oldest block (what a rewind may need again).
  const int64_t oldest_held =
      window_blocks_.empty() ? seen_ : spec_.sinks + first_block_ * pool_->block_size();
  while (!window_ids_.empty() && held_from() < oldest_held) window_ids_.pop_front();
}

int32_t SessionCache::SharedWrites(int64_t last) const {
  const int32_t b = pool_->block_size();
  int32_t shared = 0;
  // Sink blocks the chunk writes into that are already held.
  if (seen_ < spec_.sinks) {
    const int64_t end = std::min<int64_t>(last + 1, spec_.sinks);
    for (int64_t k = seen_ / b; k * b < end && k < static_cast<int64_t>(sink_blocks_.size()); ++k) {
      shared += pool_->refs(sink_blocks_[k]) > 1;
    }
  }
  // Window blocks likewise: from the block of the chunk's first window token.
  if (last >= spec_.sinks && !window_blocks_.empty()) {
    const int64_t first = WindowBlock(std::max<int64_t>(seen_, spec_.sinks) - spec_.sinks);
    const int64_t end = first_block_ + static_cast<int64_t>(window_blocks_.size());
    for (int64_t k = std::max(first, first_block_); k < end && k <= WindowBlock(last - spec_.sinks);
         ++k) {
      shared += pool_->refs(window_blocks_[k - first_block_]) > 1;
    }
  }
  return shared;
}

Status SessionCache::CopySharedWrites(int64_t last) {
  const int32_t b = pool_->block_size();
  // BeginChunk checked that the pool has a free block for each copy.
  const auto copy = [&](int32_t& block) -> Status {
    if (pool_->refs(block) <= 1) return OkStatus();
    const int32_t fresh = pool_->Allocate();
    if (Status copied = pool_->CopyBlock(block, fresh); !copied.ok()) {
      pool_->Free(fresh);
      return copied;
    }
    pool_->Free(block);  // the other holders keep it
    block = fresh;
    return OkStatus();
  };
  if (seen_ < spec_.sinks) {
    const int64_t end = std::min<int64_t>(last + 1, spec_.sinks);
    for (int64_t k = seen_ / b; k * b < end && k < static_cast<int64_t>(sink_blocks_.size()); ++k) {
      STREAMD_RETURN_IF_ERROR(copy(sink_blocks_[k]));
    }
  }
  if (last >= spec_.sinks && !window_blocks_.empty()) {
    const int64_t first = WindowBlock(std::max<int64_t>(seen_, spec_.sinks) - spec_.sinks);
    const int64_t end = first_block_ + static_cast<int64_t>(window_blocks_.size());
    for (int64_t k = std::max(first, first_block_); k < end && k <= WindowBlock(last - spec_.sinks);
         ++k) {
      STREAMD_RETURN_IF_ERROR(copy(window_blocks_[k - first_block_]));
    }
  }
  return OkStatus();
}

bool SessionCache::CanRewind(int64_t n) const {
  if (n < 0 || n > seen_ || !placed_.empty()) return false;
  const CachedSpan span = CachedSpanAt(seen_ - n);
  // Only sinks left (always held), or a window whose every row is still held.
  return span.window_begin == span.window_end || span.window_begin >= held_from();
}

int64_t SessionCache::MaxRewind() const {
  if (seen_ <= spec_.sinks || held_from() <= spec_.sinks) return seen_;  // nothing evicted
  // The window of a context of s tokens starts at s - W + 1 (past the sinks): it must not
  // start before the oldest held row.
  return std::clamp<int64_t>(seen_ - (held_from() + spec_.window - 1), 0, seen_);
}

Status SessionCache::Rewind(int64_t n) {
  if (!placed_.empty()) {
    return FailedPreconditionError("rewind: a chunk of " + std::to_string(placed_.size()) +
                                   " tokens is placed and not committed");
  }
  if (n < 0 || n > seen_) {
    return InvalidArgumentError("rewind: " + std::to_string(n) + " tokens is outside [0, " +
                                std::to_string(seen_) + "] (the tokens committed)");
  }
  if (!CanRewind(n)) {
    return FailedPreconditionError(
        "rewind: dropping " + std::to_string(n) + " tokens needs the K/V of text position " +
        std::to_string(CachedSpanAt(seen_ - n).window_begin) +
        ", which the window has evicted (the oldest row held is position " +
        std::to_string(held_from()) + "); at most " + std::to_string(MaxRewind()) +
        " tokens can be dropped now (window " + std::to_string(spec_.window) + ")");
  }
  const int64_t new_seen = seen_ - n;
  if (new_seen <= spec_.sinks) {
    window_ids_.clear();
    sink_ids_.resize(static_cast<size_t>(new_seen));
  } else {
    window_ids_.resize(window_ids_.size() - static_cast<size_t>(n));
  }
  seen_ = new_seen;
  Trim();  // blocks past the new end go back to the pool
  return OkStatus();
}

int32_t SessionCache::last_id() const {
  if (!window_ids_.empty()) return window_ids_.back();
  return sink_ids_.empty() ? -1 : sink_ids_.back();
}

int32_t SessionCache::IdAt(int64_t p) const {
  if (p < 0 || p >= seen_) return -1;
  if (p < static_cast<int64_t>(sink_ids_.size())) return sink_ids_[p];
  if (p < held_from()) return -1;
  return window_ids_[static_cast<size_t>(p - held_from())];
}

StatusOr<std::unique_ptr<SessionCache>> SessionCache::Fork() const {
  if (!placed_.empty()) {
    return FailedPreconditionError("fork: a chunk of " + std::to_string(placed_.size()) +
                                   " tokens is placed and not committed");
  }
  std::unique_ptr<SessionCache> f(new SessionCache(pool_, spec_));
  f->seen_ = seen_;
  f->sink_blocks_ = sink_blocks_;
  f->window_blocks_ = window_blocks_;
  f->first_block_ = first_block_;
  f->sink_ids_ = sink_ids_;
  f->window_ids_ = window_ids_;
  for (int32_t block : sink_blocks_) pool_->AddRef(block);
  for (int32_t block : window_blocks_) pool_->AddRef(block);
  return f;
}

int32_t SessionCache::shared_blocks() const {
  int32_t shared = 0;
  for (int32_t block : sink_blocks_) shared += pool_->refs(block) > 1;
  for (int32_t block : window_blocks_) shared += pool_->refs(block) > 1;
  return shared;
}

void SessionCache::Trim() {
  const int32_t b = pool_->block_size();
  const CachedSpan span = cached_span();
  // Sink blocks past the sinks the context holds (a chunk given back before it ran).
  while (static_cast<int64_t>(sink_blocks_.size()) > CeilDiv(span.sinks, b)) {
    pool_->Free(sink_blocks_.back());
    sink_blocks_.pop_back();
  }
  if (span.window_begin == span.window_end) {
    for (int32_t id : window_blocks_) pool_->Free(id);
    window_blocks_.clear();
    first_block_ = 0;
    return;
  }
  const int64_t lo = WindowBlock(span.window_begin - spec_.sinks);
  const int64_t hi = WindowBlock(span.window_end - 1 - spec_.sinks);
  while (!window_blocks_.empty() &&
         first_block_ + static_cast<int64_t>(window_blocks_.size()) - 1 > hi) {
    pool_->Free(window_blocks_.back());
    window_blocks_.pop_back();
  }
  int64_t drop = 0;
  while (drop < static_cast<int64_t>(window_blocks_.size()) && first_block_ + drop < lo) {
    pool_->Free(window_blocks_[drop]);
    ++drop;
  }
  window_blocks_.erase(window_blocks_.begin(), window_blocks_.begin() + drop);
  first_block_ += drop;
}

Status SessionCache::Restore(int64_t tokens_seen, std::span<const int32_t> cached_ids) {
  if (seen_ != 0 || blocks_held() != 0 || !placed_.empty()) {
    return FailedPreconditionError("restore: the cache is not fresh");
  }
  if (tokens_seen < 0) {
    return InvalidArgumentError("restore: tokens_seen = " + std::to_string(tokens_seen) +
                                " must be >= 0");
  }
  if (spec_.mode == CacheMode::kDense && tokens_seen > spec_.window) {
    return OutOfRangeError("restore: a dense cache holds at most " + std::to_string(spec_.window) +
                           " tokens; the state has seen " + std::to_string(tokens_seen));
  }
  const CachedSpan span = CachedSpanAt(tokens_seen);
  if (static_cast<int64_t>(cached_ids.size()) != span.size()) {
    return InvalidArgumentError("restore: a cache that has seen " + std::to_string(tokens_seen) +
                                " tokens holds " + std::to_string(span.size()) + ", the state " +
                                std::to_string(cached_ids.size()));
  }
  const int32_t b = pool_->block_size();
  const int64_t sink_blocks = CeilDiv(span.sinks, b);
  const int64_t window_blocks = span.window_begin == span.window_end
                                    ? 0
                                    : WindowBlock(span.window_end - 1 - spec_.sinks) -
                                          WindowBlock(span.window_begin - spec_.sinks) + 1;
  if (sink_blocks + window_blocks > pool_->free_blocks()) {
    return ResourceExhaustedError(
        "restore: the KV pool has " + std::to_string(pool_->free_blocks()) +
        " free blocks; the cache needs " + std::to_string(sink_blocks + window_blocks));
  }
  for (int64_t i = 0; i < sink_blocks; ++i) sink_blocks_.push_back(pool_->Allocate());
  if (window_blocks > 0) first_block_ = WindowBlock(span.window_begin - spec_.sinks);
  for (int64_t i = 0; i < window_blocks; ++i) window_blocks_.push_back(pool_->Allocate());
  seen_ = tokens_seen;
  sink_ids_.assign(cached_ids.begin(), cached_ids.begin() + span.sinks);
  window_ids_.assign(cached_ids.begin() + span.sinks, cached_ids.end());
  return OkStatus();
}

std::vector<int32_t> SessionCache::cached_ids() const {
  std::vector<int32_t> ids(sink_ids_.begin(), sink_ids_.end());
  // window_ids_ may also hold older tokens of the oldest block: the cached ones are the last.
  const CachedSpan span = cached_span();
  const int64_t window = span.window_end - span.window_begin;
  ids.insert(ids.end(), window_ids_.end() - window, window_ids_.end());
  return ids;
}

int64_t SessionCache::tokens_cached() const {
  const int64_t sinks = std::min<int64_t>(seen_, spec_.sinks);
  const int64_t window = std::min<int64_t>(seen_ - sinks, spec_.window);
  return sinks + window;
}

kernels::SinkWindowTable SessionCache::table() const {
  kernels::SinkWindowTable t;
  t.sink_blocks = sink_blocks_.data();
  t.window_blocks = window_blocks_.data();
  t.first_window_block = first_block_;
  t.sinks = spec_.sinks;
  t.window = spec_.window;
  t.block_size = pool_->block_size();
  return t;
}

}  // namespace streamd
