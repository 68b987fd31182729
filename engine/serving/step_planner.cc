#include "engine/serving/step_planner.h"

#include <algorithm>
#include <unordered_map>

namespace streamd {

std::pair<size_t, int64_t> StepPlanner::DecodeLimits(size_t cap, int64_t budget,
                                                     bool prefill_waiting) {
  if (!prefill_waiting) return {cap, budget};
  return {cap > 1 ? cap - 1 : cap, budget > 1 ? budget - std::max<int64_t>(1, budget / 8) : budget};
}

std::vector<PlannedChunk> StepPlanner::Plan(const std::vector<SessionWork>& work,
                                            int32_t headroom_blocks) {
  ++step_;
  // Least recently served first; a session seen for the first time queues as served now, so
  // later arrivals never overtake it and a waiting session is passed over at most once by
  // each session that was waiting before it.
  std::unordered_map<uint64_t, uint64_t> seen;
  std::vector<SessionWork> decoders, prefills;
  for (const SessionWork& w : work) {
    if (w.pending <= 0) continue;
    auto it = last_served_.find(w.id);
    seen[w.id] = it == last_served_.end() ? step_ : it->second;
    (w.decoding ? decoders : prefills).push_back(w);
  }
  last_served_ = std::move(seen);  // forget sessions without work
  const auto longest_waiting = [&](const SessionWork& a, const SessionWork& b) {
    const uint64_t sa = last_served_.at(a.id), sb = last_served_.at(b.id);
    return sa != sb ? sa < sb : a.id < b.id;
  };
  std::sort(decoders.begin(), decoders.end(), longest_waiting);
  std::sort(prefills.begin(), prefills.end(), longest_waiting);

  std::vector<PlannedChunk> plan;
  int64_t budget = config_.max_batch_tokens;
  const size_t cap = static_cast<size_t>(std::max(1, config_.max_batch_sessions));
  // When appends wait, decoders leave them a share (1/8 of the budget, one session slot), so
  // prefill progresses even when decoders alone would fill every step.
  const auto [decode_cap, decode_budget] = DecodeLimits(cap, budget, !prefills.empty());
  if (!prefills.empty() && !decoders.empty() &&
      (decode_cap >= cap || decode_budget >= budget)) {
    // No room to share (one session slot or one token per step): the longest-waiting session
    // of either lane takes the step.
    const SessionWork& w =
        longest_waiting(prefills[0], decoders[0]) ? prefills[0] : decoders[0];
    const int64_t n = std::min<int64_t>({w.pending, w.max_chunk, budget});
    plan.push_back({w.id, w.cache.LongestChunkWithin(static_cast<int32_t>(n), headroom_blocks)});
    last_served_[w.id] = step_ + 1;
    return plan;
  }
  for (const SessionWork& w : decoders) {
    if (plan.size() >= decode_cap || static_cast<int64_t>(plan.size()) >= decode_budget) break;
    plan.push_back({w.id, 1});
  }
  budget -= static_cast<int64_t>(plan.size());
  int32_t headroom = std::max(0, headroom_blocks);
  for (const SessionWork& w : prefills) {
    if (plan.size() >= cap || budget < 1) break;
    const int64_t wanted = std::min<int64_t>({w.pending, w.max_chunk, budget});
    const int32_t n = w.cache.LongestChunkWithin(static_cast<int32_t>(wanted), headroom);
    headroom -= w.cache.HeadroomForChunk(n);
    plan.push_back({w.id, n});
    budget -= n;
  }
  for (const PlannedChunk& c : plan) last_served_[c.id] = step_ + 1;  // after every waiter
  return plan;
}

}  // namespace streamd
