// StepPlanner: decides what one forward pass runs. Plain logic over small value types, so the
// policy is unit-tested without a model.
//
// Policy, per step, under a token budget (max_batch_tokens) and a session cap
// (max_batch_sessions):
//  1. Decode first: every session whose next work is one token of a running generation gets
//     that token (inter-token latency stays one step). While appends wait, decoders use at
//     most 7/8 of the budget and all but one session slot, so prefill always progresses.
//  2. Prefill with what is left: sessions with pending input get chunks of at most their
//     cache's max_chunk, so one huge append shares the budget with later ones and never stalls
//     decoders by more than the one step it shares with them.
//  3. Prefill headroom: a chunk may make its session hold more blocks than its bound (its
//     queries' windows reach back before the chunk); those blocks come from the pool's prefill
//     headroom, `headroom_blocks` per step, shared by the step's chunks. A chunk that would
//     borrow more than is left is shortened to the longest that fits (a one-token chunk never
//     borrows), so prefill always progresses and admission stays exact.
// Fairness, first across tenants, then across a tenant's sessions. A lane (decode, prefill) is
// contended when its sessions do not all get what they ask for (a slot each; a full chunk
// each) within its slots and tokens. Then the lane is dealt one session at a time to the
// tenant that has received the fewest of the lane's tokens so far (ties: the tenant served
// least recently, then the smaller key), which gives it its longest-waiting session. So a
// tenant with 100 busy sessions and one with 1 split a contended step evenly (max-min: a
// tenant that asks for less than an even share gets all of it, the others split the rest);
// over K steps each tenant's total is within one slot (decode) or one chunk (prefill) of that
// share. The counts live only while the lane stays contended: after a step, a tenant that got
// all it asked for is raised to the least count of those held back (decode; prefill: to
// within one step's budget of it, as a whole chunk can leave a tenant behind that still asks
// for more), a tenant entering the lane starts at that count, and an uncontended step clears
// them, so no tenant banks credit while it asks for little and then floods. Uncontended lanes
// are planned exactly as without tenants (same chunks, same order).
// Within a tenant (and within an uncontended lane) order is by the step a session was last
// served (a new session counts as served when it first shows up), so no later arrival
// overtakes a waiting session. With one session slot or one token per step and work in both
// lanes, the least recently served tenant's longest-waiting session of either lane takes it.
// PlannerConfig::fair_tenants = false puts every session in one tenant (the policy before
// tenants, step for step; benchmarks compare the two).
// Latency while tenants share: on a CPU a step costs in proportion to its tokens, so a tenant's
// one session decoding beside another tenant's full steps waits for the whole step at every
// token (~4x its latency alone at 16 tokens). PlannerConfig::shared_step_tokens, when set,
// is the step's token budget (and session cap) whenever sessions of more than one tenant have
// work: each tenant's inter-token latency then stays near what it is alone, and the engine's
// throughput drops to what steps of that size give, only while tenants share it. A step with
// work of one tenant (or fair_tenants off) plans exactly as without it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/cache/session_cache.h"

namespace streamd {

struct PlannerConfig {
  int32_t max_batch_tokens = 512;
  int32_t max_batch_sessions = 256;
  bool fair_tenants = true;  // false: SessionWork::tenant is ignored (one tenant)
  // The token budget and session cap of a step while more than one tenant has work; 0 = none
  // (max_batch_tokens and max_batch_sessions). Above.
  int32_t shared_step_tokens = 0;
};

struct SessionWork {
  uint64_t id = 0;
  int64_t pending = 0;    // tokens waiting to enter the cache
  bool decoding = false;  // pending == 1 and it is the last sampled token of a generation
  int32_t max_chunk = 1;  // the session cache's chunk limit
  CacheGeometry cache;    // where its cache stands (for the headroom a chunk borrows)
  uint32_t tenant = 0;    // who owns it: any key, equal for the sessions of one tenant
};

struct PlannedChunk {
  uint64_t id = 0;
  int32_t n_tokens = 0;
  uint32_t work_index = 0;  // its SessionWork's place in Plan's `work`
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
  static std::pair<size_t, int64_t> DecodeLimits(size_t cap, int64_t budget, bool prefill_waiting);

 private:
  enum Lane { kDecode = 0, kPrefill = 1 };
  struct SessionClock {
    uint64_t last_served = 0;  // the step after the one it last ran in
    uint64_t seen = 0;         // the step it last had work
  };
  struct TenantLedger {
    uint64_t last_served = 0;  // as SessionClock
    uint64_t seen = 0;
    std::array<int64_t, 2> served{};    // a lane's tokens received while it stays contended
    std::array<uint64_t, 2> in_lane{};  // the step it last had work in a lane
  };
  struct TenantQueue {  // one tenant's sessions of a lane in a contended step
    uint32_t key = 0;
    TenantLedger* ledger = nullptr;
    size_t next = 0, end = 0;  // its range of grouped_
    bool held_back = false;    // a chunk of it was shortened by the budget
  };

  uint32_t TenantOf(const SessionWork& w) const { return config_.fair_tenants ? w.tenant : 0; }
  void Gather(const std::vector<SessionWork>& work);
  // Sets up the lane's tenant ledgers for this step (entering tenants start at the floor).
  void EnterLane(Lane lane, const std::vector<SessionWork>& work,
                 const std::vector<uint32_t>& sessions, bool contended);
  // Deals `sessions` (longest waiting first) to their tenants, least served first, while
  // `take(index)` plans one: it returns the tokens planned, or -1 when the lane is full
  // (that session is not taken). `full(index)` is what the session asked for; a tenant that
  // got all it asked for keeps at most `credit` tokens of lag behind those held back.
  template <typename Take, typename Full>
  void Deal(Lane lane, const std::vector<SessionWork>& work, const std::vector<uint32_t>& sessions,
            int64_t credit, Take take, Full full);

  PlannerConfig config_;
  uint64_t step_ = 0;
  std::unordered_map<uint64_t, SessionClock> sessions_;  // by SessionWork::id
  std::unordered_map<uint32_t, TenantLedger> tenants_;   // by tenant key
  std::array<int64_t, 2> floor_{};  // where a tenant entering a contended lane starts
  // Scratch, reused from step to step.
  std::vector<uint64_t> stamps_;               // [work.size()] last_served of each session
  std::vector<uint32_t> decoders_, prefills_;  // indices into work, longest waiting first
  std::vector<uint32_t> grouped_;              // a lane's indices by tenant, then waiting
  std::vector<TenantQueue> queues_;
  std::vector<size_t> heap_;  // indices into queues_
};

}  // namespace streamd
