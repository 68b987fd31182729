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

CacheSpec SessionCache::LocalSpec(const CacheSpec& effective, int32_t span) {
  if (effective.mode != CacheMode::kDense && effective.window < span) return effective;
  return {CacheMode::kWindow, 0, std::min(effective.window, span), effective.max_chunk};
}

StatusOr<std::unique_ptr<SessionCache>> SessionCache::Create(BlockPool* pool, CacheSpec spec,
                                                             int32_t model_context,
                                                             LocalLayers local) {
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
  std::unique_ptr<SessionCache> cache(new SessionCache(pool, spec));
  if (local.pool != nullptr) {
    if (local.span < 1) {
      return InvalidArgumentError("the local layers' span = " + std::to_string(local.span) +
                                  " must be >= 1");
    }
    if (local.layers == nullptr || local.layers->n_local != local.pool->layout().n_layers ||
        local.layers->n_main != pool->layout().n_layers) {
      return InvalidArgumentError(
          "the local layers' pool and the session's pool do not hold the model's local and "
          "other layers");
    }
    if (local.pool->dtype() != kernels::KvDtype::kF16 || pool->dtype() != kernels::KvDtype::kF16 ||
        !local.pool->host_accessible() || !pool->host_accessible()) {
      return InvalidArgumentError(
          "local layers keep caches of their own only in f16 pools in host memory");
    }
    if (local.pool->block_size() != pool->block_size()) {
      return InvalidArgumentError(
          "the local layers' pool has blocks of " + std::to_string(local.pool->block_size()) +
          " tokens, the session's pool of " + std::to_string(pool->block_size()));
    }
    StatusOr<std::unique_ptr<SessionCache>> part =
        Create(local.pool, LocalSpec(spec, local.span), model_context);
    if (!part.ok()) {
      return Status(part.status().code(), "the local layers' cache: " + part.status().message());
    }
    cache->local_ = std::move(*part);
    cache->local_span_ = local.span;
    cache->layer_split_ = std::move(local.layers);
  }
  return cache;
}

SessionCache::SessionCache(BlockPool* pool, CacheSpec spec)
    : pool_(pool), spec_(spec), bound_blocks_(BoundBlocks(spec, pool->block_size())) {}

SessionCache::~SessionCache() { Clear(); }

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

namespace {

// Blocks a cache of these sinks and window holds with a chunk of n (>= 1) tokens placed at
// `seen` (CacheGeometry::BlocksForChunk).
int64_t BlocksHeld(int64_t sinks, int64_t window, int64_t block_size, int64_t seen, int64_t n) {
  const int64_t last = seen + n - 1;  // text position of the chunk's last token
  // Between steps a cache holds exactly the sink blocks of its committed sinks (Trim).
  const int64_t sink_blocks = CeilDiv(std::min<int64_t>(last + 1, sinks), block_size);
  int64_t window_blocks = 0;
  if (last >= sinks) {
    // From the oldest key the chunk's first query sees to the chunk's last token.
    const int64_t first = seen < sinks ? sinks : std::max<int64_t>(sinks, seen - window + 1);
    window_blocks = (last - sinks) / block_size - (first - sinks) / block_size + 1;
  }
  return sink_blocks + window_blocks;
}

}  // namespace

int32_t CacheGeometry::BlocksForChunk(int32_t n) const {
  return static_cast<int32_t>(BlocksHeld(sinks, window, block_size, seen, n));
}

int32_t CacheGeometry::HeadroomForChunk(int32_t n) const {
  int32_t headroom = std::max(0, BlocksForChunk(n) - bound_blocks);
  if (local_window > 0) {
    const int64_t local = BlocksHeld(local_sinks, local_window, block_size, seen, n);
    headroom = std::max(headroom, static_cast<int32_t>(local) - local_bound_blocks);
  }
  return headroom;
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
  CacheGeometry g{spec_.sinks, spec_.window, pool_->block_size(), bound_blocks_, seen_};
  if (local_ != nullptr) {
    g.local_sinks = local_->spec_.sinks;
    g.local_window = local_->spec_.window;
    g.local_bound_blocks = local_->bound_blocks_;
  }
  return g;
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
  if (local_ != nullptr) {
    if (Status placed = local_->BeginChunk(tokens); !placed.ok()) {
      Abort();
      return Status(placed.code(), "the local layers' cache: " + placed.message());
    }
  }
  return OkStatus();
}

void SessionCache::Commit(int32_t kept) {
  kept = std::clamp(kept, 0, placed());
  if (local_ != nullptr && local_->placed() > 0) local_->Commit(kept);
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
  if (local_ != nullptr && !local_->CanRewind(n)) return false;
  const CachedSpan span = CachedSpanAt(seen_ - n);
  // Only sinks left (always held), or a window whose every row is still held.
  return span.window_begin == span.window_end || span.window_begin >= held_from();
}

int64_t SessionCache::MaxRewind() const {
  const int64_t local = local_ != nullptr ? local_->MaxRewind() : seen_;
  if (seen_ <= spec_.sinks || held_from() <= spec_.sinks) return local;  // nothing evicted
  // The window of a context of s tokens starts at s - W + 1 (past the sinks): it must not
  // start before the oldest held row.
  return std::min(local, std::clamp<int64_t>(seen_ - (held_from() + spec_.window - 1), 0, seen_));
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
  if (local_ != nullptr && !local_->CanRewind(n)) {
    return FailedPreconditionError("rewind: dropping " + std::to_string(n) +
                                   " tokens needs rows that the local layers' window (" +
                                   std::to_string(local_span_) + " tokens) has evicted; at most " +
                                   std::to_string(MaxRewind()) + " tokens can be dropped now");
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
  Trim();                                           // blocks past the new end go back to the pool
  if (local_ != nullptr) return local_->Rewind(n);  // CanRewind said it can
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
  if (local_ != nullptr) {
    STREAMD_ASSIGN_OR_RETURN(f->local_, local_->Fork());
    f->local_span_ = local_span_;
    f->layer_split_ = layer_split_;
  }
  return f;
}

int32_t SessionCache::shared_blocks() const {
  int32_t shared = 0;
  for (int32_t block : sink_blocks_) shared += pool_->refs(block) > 1;
  for (int32_t block : window_blocks_) shared += pool_->refs(block) > 1;
  if (local_ != nullptr) shared += local_->shared_blocks();
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
  if (local_ != nullptr) {
    if (Status restored = local_->Restore(tokens_seen, LocalIds(tokens_seen, cached_ids));
        !restored.ok()) {
      Clear();
      return Status(restored.code(), "the local layers' cache: " + restored.message());
    }
  }
  return OkStatus();
}

std::vector<int32_t> SessionCache::LocalIds(int64_t tokens_seen,
                                            std::span<const int32_t> cached_ids) const {
  // The local span lies inside the main one (LocalSpec never keeps a position the main cache
  // has evicted): find each of its positions there.
  const CachedSpan main = CachedSpanAt(tokens_seen);
  const CachedSpan local = local_->CachedSpanAt(tokens_seen);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(local.size()));
  for (int64_t i = 0; i < local.size(); ++i) {
    const int64_t p = local.Position(i);  // held by the main cache too
    ids.push_back(cached_ids[main.Index(p)]);
  }
  return ids;
}

void SessionCache::Clear() {
  for (int32_t b : sink_blocks_) pool_->Free(b);
  for (int32_t b : window_blocks_) pool_->Free(b);
  sink_blocks_.clear();
  window_blocks_.clear();
  first_block_ = 0;
  seen_ = 0;
  placed_.clear();
  sink_ids_.clear();
  window_ids_.clear();
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

kernels::SinkWindowTable SessionCache::local_table() const {
  kernels::SinkWindowTable t = local_->table();
  t.span = local_span_;
  return t;
}

}  // namespace streamd
