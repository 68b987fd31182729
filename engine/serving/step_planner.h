// StepPlanner: decides what one forward pass runs. Plain logic over small value types, so the
// policy is unit-tested without a model.
//
// Policy, per step, under a token budget (max_batch_tokens) and a session cap
// (max_batch_sessions):
//  1. Decode first: every session whose next work is one token of a running generation gets
//     that token (inter-token latency stays one step). While appends wait, decoders use at
//     most 7/8 of the budget and all but one session slot, so prefill always progresses. If
//     decoders outnumber what they may use, the ones skipped longest go first.
//  2. Prefill with what is left: sessions with pending input get chunks of at most their
//     cache's max_chunk, least recently served first, so one huge append shares the budget
//     with later ones and never stalls decoders by more than the one step it shares with them.
//  3. Prefill headroom: a chunk may make its session hold more blocks than its bound (its
//     queries' windows reach back before the chunk); those blocks come from the pool's prefill
//     headroom, `headroom_blocks` per step, shared by the step's chunks. A chunk that would
//     borrow more than is left is shortened to the longest that fits (a one-token chunk never
//     borrows), so prefill always progresses and admission stays exact.
// Fairness: within each lane, order is by the step a session was last served (a new session
// counts as served when it first shows up), so no later arrival overtakes a waiting session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <limits>
#include <vector>

#include "engine/cache/session_cache.h"

namespace streamd {

struct PlannerConfig {
  int32_t max_batch_tokens = 512;
  int32_t max_batch_sessions = 256;
};

struct SessionWork {
  uint64_t id = 0;
  int64_t pending = 0;     // tokens waiting to enter the cache
  bool decoding = false;   // pending == 1 and it is the last sampled token of a generation
  int32_t max_chunk = 1;   // the session cache's chunk limit
  CacheGeometry cache;     // where its cache stands (for the headroom a chunk borrows)
};

struct PlannedChunk {
  uint64_t id = 0;
  int32_t n_tokens = 0;
};

class StepPlanner {
 public:
  explicit StepPlanner(PlannerConfig config) : config_(config) {}

  // `work`: every session with pending > 0, in a stable order (e.g. by id). The step's chunks
  // borrow at most `headroom_blocks` blocks over their sessions' bounds.
  std::vector<PlannedChunk> Plan(const std::vector<SessionWork>& work,
                                 int32_t headroom_blocks = std::numeric_limits<int32_t>::max());

  const PlannerConfig& config() const { return config_; }

  // Session slots and tokens decoders may take this step.
  static std::pair<size_t, int64_t> DecodeLimits(size_t cap, int64_t budget,
                                                 bool prefill_waiting);

 private:
  PlannerConfig config_;
  uint64_t step_ = 0;
  std::unordered_map<uint64_t, uint64_t> last_served_;  // session id -> step last served
};

}  // namespace streamd
