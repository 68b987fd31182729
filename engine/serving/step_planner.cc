#include "engine/serving/step_planner.h"

#include <algorithm>

namespace streamd {
namespace {

// Indices of `items` (sorted by id) starting at the first id > cursor, wrapping around.
template <typename T>
std::vector<size_t> RotatedOrder(const std::vector<T>& items, uint64_t cursor) {
  std::vector<size_t> order(items.size());
  size_t start = 0;
  while (start < items.size() && items[start].id <= cursor) ++start;
  for (size_t i = 0; i < items.size(); ++i) order[i] = (start + i) % items.size();
  return order;
}

}  // namespace

std::pair<size_t, int64_t> StepPlanner::DecodeLimits(size_t cap, int64_t budget,
                                                     bool prefill_waiting) {
  if (!prefill_waiting) return {cap, budget};
  return {cap > 1 ? cap - 1 : cap, budget > 1 ? budget - std::max<int64_t>(1, budget / 8) : budget};
}

std::vector<PlannedChunk> StepPlanner::Plan(const std::vector<SessionWork>& work) {
  std::vector<SessionWork> decoders, prefills;
  for (const SessionWork& w : work) {
    if (w.pending <= 0) continue;
    (w.decoding ? decoders : prefills).push_back(w);
  }
  const auto by_id = [](const SessionWork& a, const SessionWork& b) { return a.id < b.id; };
  std::sort(decoders.begin(), decoders.end(), by_id);
  std::sort(prefills.begin(), prefills.end(), by_id);

  std::vector<PlannedChunk> plan;
  int64_t budget = config_.max_batch_tokens;
  const size_t cap = static_cast<size_t>(std::max(1, config_.max_batch_sessions));
  // When appends wait, decoders leave them a share (1/8 of the budget, one session slot), so
  // prefill progresses even when decoders alone would fill every step.
  const auto [decode_cap, decode_budget] = DecodeLimits(cap, budget, !prefills.empty());

  for (size_t i : RotatedOrder(decoders, decode_cursor_)) {
    if (plan.size() >= decode_cap || static_cast<int64_t>(plan.size()) >= decode_budget) break;
    plan.push_back({decoders[i].id, 1});
  }
  budget -= static_cast<int64_t>(plan.size());
  // Next step's rotation starts after the last decoder served; all of them were served when
  // they fit, and then the cursor does not matter.
  if (!plan.empty()) decode_cursor_ = plan.back().id;

  uint64_t last_prefill = prefill_cursor_;
  for (size_t i : RotatedOrder(prefills, prefill_cursor_)) {
    if (plan.size() >= cap || budget < 1) break;
    const SessionWork& w = prefills[i];
    const int64_t n = std::min<int64_t>({w.pending, w.max_chunk, budget});
    plan.push_back({w.id, static_cast<int32_t>(n)});
    budget -= n;
    last_prefill = w.id;
  }
  prefill_cursor_ = last_prefill;
  return plan;
}

}  // namespace streamd
