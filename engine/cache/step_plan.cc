#include "engine/cache/step_plan.h"

#include <algorithm>
#include <string>

namespace streamd {
namespace {

Status CheckBatch(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs,
                  int32_t vocab_size) {
  if (tokens.empty() || seqs.empty()) return InvalidArgumentError("step: the batch is empty");
  int64_t total = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].cache == nullptr || seqs[s].n_tokens < 1) {
      return InvalidArgumentError("step: sequence " + std::to_string(s) +
                                  " has no cache or no tokens");
    }
    const SessionCache* local = seqs[s].cache->local();
    const SessionCache* local0 = seqs[0].cache->local();
    if (seqs[s].cache->pool() != seqs[0].cache->pool() ||
        (local == nullptr) != (local0 == nullptr) ||
        (local != nullptr && local->pool() != local0->pool())) {
      return InvalidArgumentError("step: sequences from different KV pools in one batch");
    }
    for (size_t o = 0; o < s; ++o) {
      if (seqs[o].cache == seqs[s].cache) {
        return InvalidArgumentError("step: sequences " + std::to_string(o) + " and " +
                                    std::to_string(s) + " share one cache");
      }
    }
    if (seqs[s].n_tokens > seqs[s].cache->spec().max_chunk) {
      return InvalidArgumentError("step: sequence " + std::to_string(s) + " appends " +
                                  std::to_string(seqs[s].n_tokens) +
                                  " tokens, over its cache's chunk limit of " +
                                  std::to_string(seqs[s].cache->spec().max_chunk));
    }
    total += seqs[s].n_tokens;
  }
  if (total != static_cast<int64_t>(tokens.size())) {
    return InvalidArgumentError("step: sequences hold " + std::to_string(total) +
                                " tokens, the batch " + std::to_string(tokens.size()));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(tokens[i]) + " at index " +
                                  std::to_string(i) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab_size) + ")");
    }
  }
  return OkStatus();
}

}  // namespace

PlannedTable PlannedTable::Append(const SessionCache& cache, const kernels::SinkWindowTable& table,
                                  std::vector<int32_t>* block_ids) {
  PlannedTable p;
  p.ids_at = static_cast<int32_t>(block_ids->size());
  p.n_sink_ids = static_cast<int32_t>(cache.sink_block_ids().size());
  p.n_window_ids = static_cast<int32_t>(cache.window_block_ids().size());
  block_ids->insert(block_ids->end(), cache.sink_block_ids().begin(), cache.sink_block_ids().end());
  block_ids->insert(block_ids->end(), cache.window_block_ids().begin(),
                    cache.window_block_ids().end());
  p.first_window_block = table.first_window_block;
  p.sinks = table.sinks;
  p.window = table.window;
  p.span = table.span;
  return p;
}

StatusOr<StepPlan> PlanStep(std::span<const int32_t> tokens, std::span<const SequenceInput> seqs,
                            int32_t vocab_size) {
  STREAMD_RETURN_IF_ERROR(CheckBatch(tokens, seqs, vocab_size));
  StepPlan plan;
  plan.pool = seqs[0].cache->pool();
  if (seqs[0].cache->local() != nullptr) plan.local_pool = seqs[0].cache->local()->pool();
  const size_t n = tokens.size();
  plan.tokens.assign(tokens.begin(), tokens.end());
  plan.seq_of.reserve(n);
  plan.position.reserve(n);
  plan.cache_position.reserve(n);
  plan.out_row.reserve(n);
  plan.seqs.reserve(seqs.size());
  plan.decode = true;
  int32_t t = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    SessionCache& cache = *seqs[s].cache;
    const Status placed = cache.BeginChunk(tokens.subspan(t, seqs[s].n_tokens));
    if (!placed.ok()) {
      AbortStep(seqs.first(s));
      return Status(placed.code(), "step: sequence " + std::to_string(s) + ": " + placed.message());
    }
    PlannedSequence ps;
    ps.first_token = t;
    ps.n_tokens = seqs[s].n_tokens;
    ps.first_position = cache.tokens_seen();
    ps.block_size = cache.pool()->block_size();
    const kernels::SinkWindowTable table = cache.table();
    ps.cache = PlannedTable::Append(cache, table, &plan.block_ids);
    if (const SessionCache* local = cache.local(); local != nullptr) {
      ps.local = PlannedTable::Append(*local, cache.local_table(), &plan.block_ids);
    }
    plan.max_keys = std::max(plan.max_keys, ps.max_keys());
    plan.decode = plan.decode && ps.n_tokens == 1;
    for (int32_t i = 0; i < ps.n_tokens; ++i, ++t) {
      const int64_t p = ps.first_position + i;
      plan.seq_of.push_back(static_cast<int32_t>(s));
      plan.position.push_back(p);
      plan.cache_position.push_back(table.CachePosition(p));
      const bool wants = seqs[s].logits == LogitsMode::kAll || i + 1 == ps.n_tokens;
      plan.out_row.push_back(wants ? plan.n_out++ : -1);
    }
    plan.seqs.push_back(ps);
  }
  return plan;
}

void CommitStep(std::span<const SequenceInput> seqs, std::span<const int32_t> kept) {
  for (size_t s = 0; s < seqs.size(); ++s) {
    seqs[s].cache->Commit(kept.empty() ? seqs[s].n_tokens : kept[s]);
  }
}

void AbortStep(std::span<const SequenceInput> seqs) {
  for (const SequenceInput& s : seqs) s.cache->Abort();
}

}  // namespace streamd
