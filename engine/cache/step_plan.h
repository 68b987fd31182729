// StepPlan: everything one forward pass does, decided by the engine before any backend runs
// (DESIGN.md, "Who owns what"). Per token: its session, its text position, the position its
// query uses against sink keys, and its logits row; per session: its block table (sink blocks,
// then window blocks, oldest first), so each token's K/V slot and each query's span (sinks
// [0, VisibleSinks(p)), window [WindowStart(p), p]) follow from the kernels' SinkWindowTable.
// A plain value: the CPU and CUDA backends execute it and plan nothing themselves (no block
// reservations, no positions, no per-token bookkeeping of their own).
//
// Two phases, as llama.cpp's memory module (plan a batch, then one mutation):
//   PlanStep    places every sequence's chunk in its cache (SessionCache::BeginChunk: the blocks
//               the chunk lands in are allocated) and describes the step;
//   CommitStep  after the backend ran it, makes the chunks part of each context (or fewer
//               tokens of a chunk, when the engine gives one back); AbortStep undoes PlanStep.
// Between the two, the caches must not change; the plan's block ids stay valid.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/util/status.h"
#include "kernels/common/paged_kv.h"

namespace streamd {

enum class LogitsMode {
  kLast,  // logits of the sequence's last token: [vocab]
  kAll,   // logits of every token: [n_tokens, vocab]
};

// One session's part of a step: its next n_tokens tokens, appended to its cache.
struct SequenceInput {
  SessionCache* cache = nullptr;
  int32_t n_tokens = 0;
  LogitsMode logits = LogitsMode::kLast;
};

// Where one of a session's caches is in a plan: its block ids are StepPlan::block_ids[ids_at,
// ids_at + n_sink_ids + n_window_ids), the sink blocks, then the window blocks.
struct PlannedTable {
  int32_t ids_at = 0;
  int32_t n_sink_ids = 0;
  int32_t n_window_ids = 0;
  int64_t first_window_block = 0;
  int32_t sinks = 0;
  int32_t window = 0;
  int32_t span = 0;  // SinkWindowTable::span: the local layers' native window, else 0

  // The planned ids of `cache`, appended to `block_ids`.
  static PlannedTable Append(const SessionCache& cache, const kernels::SinkWindowTable& table,
                             std::vector<int32_t>* block_ids);
  // The table over a copy of the plan's block ids that starts at `block_ids` (the plan's own
  // vector on the host, or the backend's device copy).
  kernels::SinkWindowTable Table(const int32_t* block_ids, int32_t block_size) const {
    kernels::SinkWindowTable t;
    t.sink_blocks = block_ids + ids_at;
    t.window_blocks = block_ids + ids_at + n_sink_ids;
    t.first_window_block = first_window_block;
    t.sinks = sinks;
    t.window = window;
    t.block_size = block_size;
    t.span = span;
    return t;
  }
};

// One session of a plan: its tokens, and its cache's table. A session whose local layers keep a
// cache of their own (SessionCache::local()) also has that cache's table, whose ids follow the
// main one's: its local layers read LocalTable.
struct PlannedSequence {
  int32_t first_token = 0;  // index of its first token in the step
  int32_t n_tokens = 0;
  int64_t first_position = 0;  // text position of its first token
  int32_t block_size = 0;
  PlannedTable cache;  // the session's cache: every layer's, or the non-local layers'
  PlannedTable local;  // the local layers' cache (StepPlan::local_pool), else empty

  kernels::SinkWindowTable Table(const int32_t* block_ids) const {
    return cache.Table(block_ids, block_size);
  }
  kernels::SinkWindowTable LocalTable(const int32_t* block_ids) const {
    return local.Table(block_ids, block_size);
  }
  // Most keys one of its queries sees (the local cache never holds more).
  int32_t max_keys() const { return cache.sinks + cache.window; }
};

struct StepPlan {
  BlockPool* pool = nullptr;  // every sequence's cache lives here
  // Where the local layers' caches live when the sessions keep them apart (every sequence of a
  // step does, or none): the layers of the model that are local are in this pool, the others
  // in `pool` (engine/cache/layer_split.h). Null: every layer is in `pool`.
  BlockPool* local_pool = nullptr;
  std::vector<int32_t> tokens;          // [n] token ids, sequence by sequence
  std::vector<int32_t> seq_of;          // [n] index into seqs
  std::vector<int64_t> position;        // [n] text position (K is rotated by it, and so is q
                                        //     against window keys)
  std::vector<int64_t> cache_position;  // [n] position of the query in its rebuilt cache: q's
                                        //     rotation against sink keys (== position until
                                        //     eviction starts)
  std::vector<int32_t> out_row;         // [n] logits row the token writes, or -1
  std::vector<int32_t> block_ids;       // every sequence's sink, then window block ids
  std::vector<PlannedSequence> seqs;
  int32_t n_out = 0;     // logits rows
  int32_t max_keys = 0;  // most keys any query of the step sees (workspace sizes)
  bool decode = false;   // every sequence appends exactly one token

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  kernels::SinkWindowTable HostTable(size_t s) const { return seqs[s].Table(block_ids.data()); }
  kernels::SinkWindowTable HostLocalTable(size_t s) const {
    return seqs[s].LocalTable(block_ids.data());
  }
  // Whether token t's query needs its own rotation for sink keys (eviction has begun and it
  // sees sinks).
  bool NeedsSinkRotation(int32_t t) const {
    const PlannedSequence& s = seqs[seq_of[t]];
    return cache_position[t] != position[t] && s.cache.sinks > 0;
  }
};

// Checks the batch (non-empty; every sequence with a cache and >= 1 token; one pool for all;
// counts that add up; token ids in [0, vocab_size)), places every chunk and returns the plan.
// Errors name the sequence or token and the limit; on error nothing is placed.
StatusOr<StepPlan> PlanStep(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs,
                            int32_t vocab_size);
// The step ran: sequence k keeps the first kept[k] tokens of its chunk (all of them when `kept`
// is empty).
void CommitStep(std::span<const SequenceInput> seqs, std::span<const int32_t> kept = {});
// The step did not run (or failed): every chunk is given back.
void AbortStep(std::span<const SequenceInput> seqs);

}  // namespace streamd
