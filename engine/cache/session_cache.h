// SessionCache: one session's KV cache over the shared BlockPool. It keeps the first S tokens
// (attention sinks) forever and the most recent W tokens in an ordered list of window blocks;
// everything in between is evicted by bookkeeping alone (StreamingLLM; ../shared/DESIGN.md
// facts 1-5). It also keeps the ids of the tokens it holds, so a session's cache describes
// itself (snapshots, export).
//
// Modes:
//   kDense  - no eviction: S = 0, W = the model context; appending past it is OUT_OF_RANGE.
//   kWindow - S = 0: the ablation that shows why sinks matter.
//   kSink   - S sinks + a window of W.
//
// What is kept. After a step the next query (text position seen) reads the sinks
// 0 .. min(S, seen) - 1 and the window [max(S, seen - W + 1), seen - 1] of the cache, plus its
// own key: those are the cached tokens (CachedSpan), and blocks holding none of them go back to
// the pool at once.
//
// Bound (what admission reserves, BoundBlocks): between steps and during a decode step a
// session holds at most ceil(S / B) + ceil((W + B - 1) / B) blocks (W window keys touch at most
// that many blocks of B; a dense cache never slides, so ceil(W / B)). A prefill chunk of n
// tokens briefly needs its queries' windows too, up to ~(n - 1) / B more blocks: those are
// borrowed from the pool's prefill headroom, a pool-wide reserve the engine hands out per step
// (HeadroomForChunk says how much a chunk needs), and are returned when the step commits.
// So a 4 + 252 session of 16-token blocks reserves 18 blocks, not 34 as with a per-session
// chunk slack.
//
// Rollback (Rewind): the last n tokens leave the context as if they had never been committed:
// the ids go, blocks past the new end return to the pool, and the next chunk writes its K/V
// over the stale rows. The result is exact only when every row the shorter context's next
// query reads is still held: the window's oldest block may still hold some tokens older than
// the window (the ring drops whole blocks), and those make up how far a cache that has already
// evicted can rewind (MaxRewind). A cache that has evicted nothing rewinds any distance.
//
// Sharing (Fork): a fork holds the same blocks as its parent, one more reference each in the
// pool. Before a chunk writes into a held block that another cache also holds, BeginChunk
// copies it to a fresh block (copy-on-write): only the block being written is copied, and the
// fork's count of held blocks does not change, so the bound and admission stay exact.
//
// Local layers (LocalLayers): a model whose local layers attend only to their last N tokens
// (Gemma 3's native sliding window) reads nothing older in those layers. A session of such a
// model may keep those layers' K/V in a second cache over a pool of only those layers: the local
// cache (LocalSpec), which holds exactly the keys a local layer reads (its table with span N sees
// the same positions as the shared cache's would). Every operation (chunks, commits, rewinds,
// forks, restores) applies to both; the token ids live in the main cache. With W > N the local
// layers then cost N / W of what they cost in the shared cache.
//
// Two-phase steps: BeginChunk(tokens) places the chunk (allocates the blocks it lands in; the
// engine then builds the step plan from table()), and after the forward pass Commit(kept) makes
// the first `kept` tokens part of the context, or Abort() undoes the placement. Nothing else
// mutates the cache. Not thread-safe: the engine serializes access.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/cache/block_pool.h"
#include "engine/cache/layer_split.h"
#include "engine/util/status.h"
#include "kernels/common/paged_kv.h"

namespace streamd {

enum class CacheMode { kDense, kWindow, kSink };
std::string_view CacheModeName(CacheMode mode);
StatusOr<CacheMode> ParseCacheMode(std::string_view name);

struct CacheSpec {
  CacheMode mode = CacheMode::kSink;
  int32_t sinks = 4;        // S; forced to 0 for kDense and kWindow
  int32_t window = 1020;    // W; forced to the model context for kDense
  int32_t max_chunk = 512;  // C: most tokens one forward pass appends
};

// The text positions a cache holds, in cache order: sinks [0, sinks), then the window
// [window_begin, window_end) (empty when window_begin == window_end).
struct CachedSpan {
  int64_t sinks = 0;
  int64_t window_begin = 0;
  int64_t window_end = 0;
  int64_t size() const { return sinks + (window_end - window_begin); }
  // Text position of cache index i (0 <= i < size()).
  int64_t Position(int64_t i) const { return i < sinks ? i : window_begin + (i - sinks); }
  // Cache index of text position p (the inverse of Position; p must be held).
  int64_t Index(int64_t p) const { return p < sinks ? p : sinks + (p - window_begin); }
};

// Where a cache stands, as a value: enough to compute, without the cache, how many blocks a
// chunk would make it hold (the step planner shares the pool's prefill headroom with it).
struct CacheGeometry {
  int32_t sinks = 0;
  int32_t window = 1;
  int32_t block_size = 1;
  int32_t bound_blocks = 0;  // SessionCache::BoundBlocks
  int64_t seen = 0;          // tokens committed
  // Blocks held with a chunk of n (>= 1) more tokens placed at `seen`.
  int32_t BlocksForChunk(int32_t n) const;
  // Blocks over the bound such a chunk borrows from the pool's prefill headroom (0 for n = 1).
  int32_t HeadroomForChunk(int32_t n) const;
  // The longest chunk of at most `n` tokens that borrows at most `headroom` blocks (>= 1).
  int32_t LongestChunkWithin(int32_t n, int32_t headroom) const;

  // The local layers' cache, when the session has one (local_window > 0): its sinks, window
  // and bound, in the same block size. Each pool keeps the same prefill headroom, so a chunk
  // borrows the larger of the two caches' needs (HeadroomForChunk).
  int32_t local_sinks = 0;
  int32_t local_window = 0;
  int32_t local_bound_blocks = 0;
};

// The local layers of a model (their native window) and the pool that keeps their K/V apart
// from the other layers' (see "Local layers" above).
struct LocalLayers {
  BlockPool* pool = nullptr;  // null: every layer reads the session's one cache
  int32_t span = 0;           // N >= 1: a local layer's query at p sees only positions > p - N
  // Which model layers are in `pool`, and where (the K/V images read and write them there).
  std::shared_ptr<const LayerSplit> layers;
};

// What a cache of `spec` holds after `tokens_seen` tokens (SessionCache::cached_span), from the
// spec alone: what a snapshot of such a session must carry.
CachedSpan CachedSpanOf(const CacheSpec& spec, int64_t tokens_seen);

class SessionCache {
 public:
  // Validates `spec` against the model context and the pool (errors name the field and the
  // limit: sinks < 0, window < 1, sinks + window over the context, a bound over the whole pool).
  // With `local.pool`, the local layers keep a cache of their own in that pool (same block
  // size; INVALID_ARGUMENT otherwise).
  static StatusOr<std::unique_ptr<SessionCache>> Create(BlockPool* pool, CacheSpec spec,
                                                        int32_t model_context,
                                                        LocalLayers local = {});
  // The spec after mode rules are applied (what Create would use).
  static CacheSpec Effective(CacheSpec spec, int32_t model_context);
  // Blocks a session with this (effective) spec holds at most between steps and in a decode
  // step: what admission reserves for it.
  static int32_t BoundBlocks(const CacheSpec& spec, int32_t block_size);
  // Blocks it holds at most during a step that appends spec.max_chunk tokens: the bound plus
  // the most headroom one chunk borrows. For tools that run a session alone in its own pool.
  static int32_t PeakBlocks(const CacheSpec& spec, int32_t block_size);
  // The local layers' cache of a session with this effective spec: what a query with span N
  // reads and nothing more. A window of at least N (or a dense cache) becomes a window of N
  // without sinks (the sinks a query still sees then lie inside its last N positions); a
  // smaller window keeps the spec, whose keys all stay within reach.
  static CacheSpec LocalSpec(const CacheSpec& effective, int32_t span);

  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;

  // Where it stands (between steps: no chunk placed).
  CacheGeometry geometry() const;
  // Blocks this session would hold with a chunk of n more tokens placed (nothing changes).
  int32_t BlocksForChunk(int32_t n) const { return geometry().BlocksForChunk(n); }
  // Blocks over its bound such a chunk borrows from the pool's prefill headroom (0 for n = 1).
  int32_t HeadroomForChunk(int32_t n) const { return geometry().HeadroomForChunk(n); }

  // Places the next tokens.size() tokens (1 <= n <= max_chunk) at text positions
  // tokens_seen() ...: allocates the blocks they land in. RESOURCE_EXHAUSTED when the pool has
  // no free block (the engine's admission and headroom accounting make that a bug),
  // OUT_OF_RANGE when a dense cache would pass the context, FAILED_PRECONDITION when a chunk is
  // already placed. On error nothing is placed.
  Status BeginChunk(std::span<const int32_t> tokens);
  // The first `kept` (<= placed) tokens of the placed chunk have been written and are now part
  // of the context; the rest are given back (the engine keeps the last one of a cancelled
  // generation pending). Blocks no later query can see return to the pool.
  void Commit(int32_t kept);
  // The placed chunk did not run: back to the blocks the context needs.
  void Abort() { Commit(0); }
  int32_t placed() const { return static_cast<int32_t>(placed_.size()); }

  // Rebuilds the bookkeeping of a cache that has seen `tokens_seen` tokens and holds exactly
  // CachedSpanAt(tokens_seen) of them, with these ids (cache order), and allocates their
  // blocks; the caller then writes their K/V through table(). Only on a fresh cache.
  // INVALID_ARGUMENT when the ids do not match the span, RESOURCE_EXHAUSTED without blocks.
  Status Restore(int64_t tokens_seen, std::span<const int32_t> cached_ids);

  // Drops the last n (0 <= n <= tokens_seen) committed tokens, between steps (no chunk
  // placed). FAILED_PRECONDITION naming the limit when the shorter context needs rows the
  // window has evicted (then nothing changes), INVALID_ARGUMENT for n outside [0, seen].
  Status Rewind(int64_t n);
  // Whether Rewind(n) would succeed, and the most tokens a rewind can drop in one go from
  // here without reaching evicted rows (tokens_seen() when nothing is evicted).
  bool CanRewind(int64_t n) const;
  int64_t MaxRewind() const;
  // The id of the last committed token (-1 when none), and of the one at text position p (-1
  // when its id is no longer held).
  int32_t last_id() const;
  int32_t IdAt(int64_t p) const;
  // A new cache with this one's spec and context that shares every block (one more reference
  // each); FAILED_PRECONDITION while a chunk is placed.
  StatusOr<std::unique_ptr<SessionCache>> Fork() const;
  // Held blocks that other caches hold too (their next write there copies them first).
  int32_t shared_blocks() const;

  // The block table the kernels read; valid until the next BeginChunk, Commit or Restore.
  kernels::SinkWindowTable table() const;
  // The local layers' cache (null when the local layers share this one), and its table with
  // their span.
  const SessionCache* local() const { return local_.get(); }
  int32_t local_span() const { return local_span_; }
  // Which layers are in local()'s pool (null without a local cache).
  const LayerSplit* layer_split() const { return layer_split_.get(); }
  kernels::SinkWindowTable local_table() const;
  std::span<const int32_t> sink_block_ids() const { return sink_blocks_; }
  std::span<const int32_t> window_block_ids() const { return window_blocks_; }

  // What the next query reads from the cache (cache order), and the ids held there.
  CachedSpan cached_span() const { return CachedSpanAt(seen_); }
  CachedSpan CachedSpanAt(int64_t tokens_seen) const;
  std::vector<int32_t> cached_ids() const;

  const CacheSpec& spec() const { return spec_; }
  BlockPool* pool() const { return pool_; }
  int64_t tokens_seen() const { return seen_; }  // every token committed
  // The sinks and the last W tokens seen, as the session reports them (the next query reads
  // all of these but the oldest window token, plus its own key).
  int64_t tokens_cached() const;
  int64_t tokens_evicted() const { return seen_ - tokens_cached(); }
  int32_t blocks_held() const {
    return static_cast<int32_t>(sink_blocks_.size() + window_blocks_.size());
  }
  int32_t bound_blocks() const { return bound_blocks_; }

 private:
  SessionCache(BlockPool* pool, CacheSpec spec);
  // Logical window block of window index i.
  int64_t WindowBlock(int64_t i) const { return i / pool_->block_size(); }
  // Frees the sink and window blocks no query after `seen_` can see, and the placed ones.
  void Trim();
  // Back to a fresh cache: every block freed, nothing seen (a restore that failed half way).
  void Clear();
  // The ids of the local cache's span at tokens_seen, picked out of the main cache's ids.
  std::vector<int32_t> LocalIds(int64_t tokens_seen, std::span<const int32_t> cached_ids) const;
  // Text position of window_ids_[0].
  int64_t held_from() const { return seen_ - static_cast<int64_t>(window_ids_.size()); }
  // Before a chunk at seen_..last writes: copies every held block it writes into that another
  // cache also holds (counted by SharedWrites).
  int32_t SharedWrites(int64_t last) const;
  Status CopySharedWrites(int64_t last);

  BlockPool* pool_;
  CacheSpec spec_;
  int32_t bound_blocks_;
  int64_t seen_ = 0;
  std::vector<int32_t> sink_blocks_;
  std::vector<int32_t> window_blocks_;  // logical window blocks first_block_ .. + size - 1
  int64_t first_block_ = 0;
  std::vector<int32_t> placed_;    // the chunk between BeginChunk and Commit
  std::vector<int32_t> sink_ids_;  // ids at text positions 0 .. min(S, seen) - 1
  // Ids of the window tokens whose rows are still held, oldest first: the cached window and
  // the older tokens that share its oldest block (what Rewind can bring back into view).
  // A restored cache knows only its cached span.
  std::deque<int32_t> window_ids_;
  // The local layers' cache (LocalLayers), or null.
  std::unique_ptr<SessionCache> local_;
  int32_t local_span_ = 0;
  std::shared_ptr<const LayerSplit> layer_split_;
};

}  // namespace streamd
