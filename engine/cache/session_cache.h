// SessionCache: one session's KV cache over the shared BlockPool. It keeps the first S tokens
// (attention sinks) forever and the most recent W tokens in a ring of blocks; everything in
// between is evicted by bookkeeping alone (StreamingLLM; ../shared/DESIGN.md facts 1-5).
//
// Modes:
//   kDense  - no eviction: S = 0, W = the model context; appending past it is OUT_OF_RANGE.
//   kWindow - S = 0: the ablation that shows why sinks matter.
//   kSink   - S sinks + a window of W.
//
// Bound. With chunks of at most C tokens per forward pass the session never holds more than
//   MaxBlocks = ceil(S / B) + R,   R = ceil((W + C - 1) / B) + 1 ring blocks,
// i.e. ceil(S/B) + ceil(W/B) + 1 plus a chunk slack of at most ceil((C - 1) / B) blocks
// (0 for decode, C = 1). The scheduler admits a session only when MaxBlocks fits.
// Blocks are taken from the pool lazily as the session grows and returned when it is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/cache/block_pool.h"
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

class SessionCache {
 public:
  // Validates `spec` against the model context and the pool (errors name the field and the
  // limit: sinks < 0, window < 1, sinks + window over the context, a bound over the whole pool).
  static StatusOr<std::unique_ptr<SessionCache>> Create(BlockPool* pool, CacheSpec spec,
                                                        int32_t model_context);
  // The spec after mode rules are applied (what Create would use).
  static CacheSpec Effective(CacheSpec spec, int32_t model_context);
  // Worst-case blocks of a session with this (effective) spec.
  static int32_t MaxBlocks(const CacheSpec& spec, int32_t block_size);

  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;

  // Makes room for the next n tokens (1 <= n <= max_chunk), recycling ring blocks whose tokens
  // no query of this chunk can see. RESOURCE_EXHAUSTED when the pool is out of blocks (cannot
  // happen for an admitted session), OUT_OF_RANGE when a dense cache would pass the context.
  Status Reserve(int32_t n);
  // The n reserved tokens have been written: they are now part of the context.
  void Commit(int32_t n);

  // The block table the kernels read; valid until the next Reserve.
  kernels::SinkWindowTable table() const;
  // The block ids behind table(), as held now (the CUDA backend copies them to the device).
  std::span<const int32_t> sink_block_ids() const { return sink_blocks_; }
  std::span<const int32_t> ring_block_ids() const { return ring_blocks_; }

  const CacheSpec& spec() const { return spec_; }
  BlockPool* pool() const { return pool_; }
  int64_t tokens_seen() const { return seen_; }    // every token ever appended
  int64_t tokens_cached() const;                   // visible to the next query
  int64_t tokens_evicted() const { return seen_ - tokens_cached(); }
  int32_t blocks_held() const {
    return static_cast<int32_t>(sink_blocks_.size() + ring_blocks_.size());
  }
  int32_t max_blocks() const { return max_blocks_; }
  int32_t ring_size() const { return ring_size_; }

 private:
  SessionCache(BlockPool* pool, CacheSpec spec);

  BlockPool* pool_;
  CacheSpec spec_;
  int32_t ring_size_;
  int32_t max_blocks_;
  int64_t seen_ = 0;
  std::vector<int32_t> sink_blocks_;
  std::vector<int32_t> ring_blocks_;  // grows to ring_size_, then is reused in order
};

}  // namespace streamd
