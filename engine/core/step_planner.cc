#include "engine/core/step_planner.h"

#include <algorithm>

namespace streamd {

std::pair<size_t, int64_t> StepPlanner::DecodeLimits(size_t cap, int64_t budget,
                                                     bool prefill_waiting) {
  if (!prefill_waiting) return {cap, budget};
  return {cap > 1 ? cap - 1 : cap, budget > 1 ? budget - std::max<int64_t>(1, budget / 8) : budget};
}

void StepPlanner::Gather(const std::vector<SessionWork>& work) {
  decoders_.clear();
  prefills_.clear();
  stamps_.assign(work.size(), 0);
  for (size_t i = 0; i < work.size(); ++i) {
    const SessionWork& w = work[i];
    if (w.pending <= 0) continue;
    // A session (tenant) seen for the first time queues as served now, so later arrivals
    // never overtake it and a waiting session is passed over at most once by each session
    // that was waiting before it.
    SessionClock& s = sessions_.try_emplace(w.id, SessionClock{step_, step_}).first->second;
    s.seen = step_;
    stamps_[i] = s.last_served;
    TenantLedger& t =
        tenants_.try_emplace(TenantOf(w), TenantLedger{.last_served = step_}).first->second;
    t.seen = step_;
    (w.decoding ? decoders_ : prefills_).push_back(static_cast<uint32_t>(i));
  }
  // Forget sessions and tenants without work.
  std::erase_if(sessions_, [&](const auto& e) { return e.second.seen != step_; });
  std::erase_if(tenants_, [&](const auto& e) { return e.second.seen != step_; });
  const auto longest_waiting = [&](uint32_t a, uint32_t b) {
    return stamps_[a] != stamps_[b] ? stamps_[a] < stamps_[b] : work[a].id < work[b].id;
  };
  std::sort(decoders_.begin(), decoders_.end(), longest_waiting);
  std::sort(prefills_.begin(), prefills_.end(), longest_waiting);
}

void StepPlanner::EnterLane(Lane lane, const std::vector<SessionWork>& work,
                            const std::vector<uint32_t>& sessions, bool contended) {
  if (!contended) floor_[lane] = 0;
  for (uint32_t i : sessions) {
    TenantLedger& t = tenants_.at(TenantOf(work[i]));
    if (t.in_lane[lane] == step_) continue;
    if (!contended) {
      t.served[lane] = 0;  // nobody was held back: nobody is owed anything
    } else if (t.in_lane[lane] + 1 != step_) {
      t.served[lane] = floor_[lane];  // entering: level with the least served held back
    }
    t.in_lane[lane] = step_;
  }
}

template <typename Take, typename Full>
void StepPlanner::Deal(Lane lane, const std::vector<SessionWork>& work,
                       const std::vector<uint32_t>& sessions, int64_t credit, Take take,
                       Full full) {
  // Each tenant's sessions in a run, longest waiting first.
  grouped_.assign(sessions.begin(), sessions.end());
  std::stable_sort(grouped_.begin(), grouped_.end(),
                   [&](uint32_t a, uint32_t b) { return TenantOf(work[a]) < TenantOf(work[b]); });
  queues_.clear();
  for (size_t i = 0; i < grouped_.size(); ++i) {
    const uint32_t key = TenantOf(work[grouped_[i]]);
    if (queues_.empty() || queues_.back().key != key) {
      queues_.push_back({key, &tenants_.at(key), i, i, false});
    }
    queues_.back().end = i + 1;
  }
  // A min-heap of tenants: fewest of the lane's tokens, then least recently served, then key.
  const auto later = [&](size_t a, size_t b) {
    const TenantLedger& x = *queues_[a].ledger;
    const TenantLedger& y = *queues_[b].ledger;
    if (x.served[lane] != y.served[lane]) return x.served[lane] > y.served[lane];
    if (x.last_served != y.last_served) return x.last_served > y.last_served;
    return queues_[a].key > queues_[b].key;
  };
  heap_.clear();
  for (size_t q = 0; q < queues_.size(); ++q) heap_.push_back(q);
  std::make_heap(heap_.begin(), heap_.end(), later);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    TenantQueue& q = queues_[heap_.back()];
    const uint32_t i = grouped_[q.next];
    const int64_t n = take(i);
    if (n < 0) break;  // the lane is full: q keeps this session
    q.ledger->served[lane] += n;
    q.held_back = q.held_back || n < full(i);
    if (++q.next < q.end) {
      std::push_heap(heap_.begin(), heap_.end(), later);
    } else {
      heap_.pop_back();
    }
  }
  // Tenants that got all they asked for are raised to the least count of those held back, less
  // `credit`: asking for little banks no more than that. Decode turns are one token, so a
  // tenant that got all it asked for is not owed anything (0); prefill turns are chunks, and
  // a tenant can get its whole chunk, be behind by up to a step's budget and still ask for
  // more next step (the budget).
  int64_t floor = std::numeric_limits<int64_t>::max();
  for (const TenantQueue& q : queues_) {
    if (q.next < q.end || q.held_back) floor = std::min(floor, q.ledger->served[lane]);
  }
  if (floor == std::numeric_limits<int64_t>::max()) floor = 0;
  for (const TenantQueue& q : queues_) {
    q.ledger->served[lane] = std::max(q.ledger->served[lane], floor - credit);
  }
  floor_[lane] = floor;
}

std::vector<PlannedChunk> StepPlanner::Plan(const std::vector<SessionWork>& work,
                                            int32_t headroom_blocks) {
  ++step_;
  Gather(work);
  std::vector<PlannedChunk> plan;
  const auto mark_served = [&] {  // after every waiter
    for (const PlannedChunk& c : plan) {
      sessions_.at(c.id).last_served = step_ + 1;
      tenants_.at(TenantOf(work[c.work_index])).last_served = step_ + 1;
    }
  };
  int64_t budget = config_.max_batch_tokens;
  size_t cap = static_cast<size_t>(std::max(1, config_.max_batch_sessions));
  if (config_.shared_step_tokens > 0 && tenants_.size() > 1) {  // tenants_: those with work
    budget = std::min<int64_t>(budget, config_.shared_step_tokens);
    cap = std::min(cap, static_cast<size_t>(config_.shared_step_tokens));
  }
  const int64_t step_budget = budget;
  // When appends wait, decoders leave them a share (1/8 of the budget, one session slot), so
  // prefill progresses even when decoders alone would fill every step.
  const auto [decode_cap, decode_budget] = DecodeLimits(cap, budget, !prefills_.empty());
  if (!prefills_.empty() && !decoders_.empty() && (decode_cap >= cap || decode_budget >= budget)) {
    // No room to share (one session slot or one token per step): the least recently served
    // tenant's longest-waiting session of either lane takes the step.
    uint32_t best = decoders_[0];
    const auto before = [&](uint32_t a, uint32_t b) {
      const uint32_t ta = TenantOf(work[a]), tb = TenantOf(work[b]);
      const uint64_t sa = tenants_.at(ta).last_served, sb = tenants_.at(tb).last_served;
      if (ta != tb) return sa != sb ? sa < sb : ta < tb;
      return stamps_[a] != stamps_[b] ? stamps_[a] < stamps_[b] : work[a].id < work[b].id;
    };
    for (const std::vector<uint32_t>* lane : {&decoders_, &prefills_}) {
      for (uint32_t i : *lane) best = before(i, best) ? i : best;
    }
    const SessionWork& w = work[best];
    const int64_t n = std::min<int64_t>({w.pending, w.max_chunk, budget});
    plan.push_back(
        {w.id, w.cache.LongestChunkWithin(static_cast<int32_t>(n), headroom_blocks), best});
    mark_served();
    return plan;
  }

  const size_t n_decode = std::min(
      {decoders_.size(), decode_cap, static_cast<size_t>(std::max<int64_t>(decode_budget, 0))});
  const bool decode_contended = decoders_.size() > n_decode;
  EnterLane(kDecode, work, decoders_, decode_contended);
  const auto take_decoder = [&](uint32_t i) -> int64_t {
    if (plan.size() >= n_decode) return -1;
    plan.push_back({work[i].id, 1, i});
    return 1;
  };
  if (decode_contended) {
    Deal(kDecode, work, decoders_, 0, take_decoder, [](uint32_t) { return int64_t{1}; });
  } else {
    for (uint32_t i : decoders_) take_decoder(i);
  }

  budget -= static_cast<int64_t>(plan.size());
  int32_t headroom = std::max(0, headroom_blocks);
  const auto full_chunk = [&](uint32_t i) {
    return std::min<int64_t>(work[i].pending, work[i].max_chunk);
  };
  const auto take_prefill = [&](uint32_t i) -> int64_t {
    if (plan.size() >= cap || budget < 1) return -1;
    const SessionWork& w = work[i];
    const int64_t wanted = std::min(full_chunk(i), budget);
    const int32_t n = w.cache.LongestChunkWithin(static_cast<int32_t>(wanted), headroom);
    headroom -= w.cache.HeadroomForChunk(n);
    plan.push_back({w.id, n, i});
    budget -= n;
    return n;
  };
  int64_t asked = 0;
  for (uint32_t i : prefills_) asked += full_chunk(i);
  const bool prefill_contended = prefills_.size() > cap - plan.size() || asked > budget;
  EnterLane(kPrefill, work, prefills_, prefill_contended);
  if (prefill_contended) {
    Deal(kPrefill, work, prefills_, step_budget, take_prefill, full_chunk);
  } else {
    for (uint32_t i : prefills_) {
      if (take_prefill(i) < 0) break;
    }
  }
  mark_served();
  return plan;
}

}  // namespace streamd
