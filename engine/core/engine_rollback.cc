// Engine: rolling a session's context back (Truncate, the rewind of a replaced partial Append)
// and forking it. A rollback is exact: the context afterwards is the one a session that never
// saw the dropped tokens would have (same tokens, same cache rows, same positions), because
// the cache only drops bookkeeping and the next step rewrites the rows it gave up
// (SessionCache::Rewind). The generation's sampler, detokenizer and stop-string matcher need
// no rollback: they belong to one generation and start fresh at every Generate.
#include <algorithm>
#include <string>
#include <utility>

#include "engine/core/engine_internal.h"

namespace streamd {

Status Engine::RewindContext(Session& s, int64_t n, std::string_view field) {
  if (n <= 0) return OkStatus();
  SessionCache& cache = *s.cache;
  const int64_t pending = static_cast<int64_t>(s.pending.size());
  const int64_t from_cache = std::max<int64_t>(0, n - pending);
  const int64_t pending_left = pending - std::min(n, pending);
  // An idle session keeps its last context token pending (the next Generate needs its logits):
  // when the rewind reaches the cache, one more token leaves it and becomes pending again.
  const bool hold_back = pending_left == 0 && cache.tokens_seen() - from_cache > 0;
  const int64_t rewind = from_cache + (hold_back ? 1 : 0);
  if (!cache.CanRewind(rewind)) {
    const int64_t most = std::max<int64_t>(0, cache.MaxRewind() - 1) + pending;
    return FailedPreconditionError(std::string(field) + ": dropping " + std::to_string(n) +
                                   " tokens needs K/V rows the window has evicted (window " +
                                   std::to_string(cache.spec().window) + ", " +
                                   std::to_string(cache.tokens_evicted()) +
                                   " tokens evicted); at most " + std::to_string(most) +
                                   " tokens can be dropped from this context now");
  }
  const int32_t held_back = hold_back ? cache.IdAt(cache.tokens_seen() - rewind) : -1;
  STREAMD_RETURN_IF_ERROR(cache.Rewind(rewind));
  s.pending.resize(static_cast<size_t>(pending_left));
  if (hold_back) s.pending.push_back(held_back);
  s.context_revision = ++s.revision;
  return OkStatus();
}

StatusOr<SessionInfo> Engine::Truncate(SessionId id, const std::string& request_id,
                                       int64_t keep_tokens) {
  std::vector<std::pair<EventSink, GenerationEvent>> events;
  std::unique_lock<std::mutex> lock(mu_);
  StatusOr<SessionInfo> result = [&]() -> StatusOr<SessionInfo> {
    STREAMD_ASSIGN_OR_RETURN(Session * found, Find(id));
    const auto not_last = [&](const Session& s, const std::string& last) {
      return NotFoundError("truncate.request_id \"" + request_id +
                           "\" is not the last generation of session " + id.ToString() +
                           (last.empty() && !s.last_gen && !s.gen
                                ? std::string(" (it has none)")
                                : " (its last is \"" + last + "\")"));
    };
    if (found->gen) {
      if (found->gen->options.request_id != request_id) {
        return not_last(*found, found->gen->options.request_id);
      }
      Finish(*found, FinishReason::kCancelled, OkStatus(), events);
    }
    if (!found->last_gen) return not_last(*found, "");
    if (found->last_gen->request_id != request_id) {
      return not_last(*found, found->last_gen->request_id);
    }
    // A cancelled generation's last step may still be in flight.
    STREAMD_ASSIGN_OR_RETURN(Session * idle, WaitForIdleSession(lock, id));
    Session& s = *idle;
    if (s.gen) {
      return FailedPreconditionError("truncate: session " + id.ToString() +
                                     " started another generation meanwhile");
    }
    if (!s.last_gen || s.last_gen->request_id != request_id) {  // changed while we waited
      return not_last(s, s.last_gen ? s.last_gen->request_id : "");
    }
    LastGeneration& last = *s.last_gen;
    if (keep_tokens < 0 || keep_tokens > last.produced) {
      return InvalidArgumentError("truncate.keep_tokens = " + std::to_string(keep_tokens) +
                                  " is outside [0, " + std::to_string(last.produced) +
                                  "] (the tokens generation \"" + request_id + "\" produced)");
    }
    if (s.context_length() != last.context_end) {
      return FailedPreconditionError(
          "truncate: " + std::to_string(s.context_length() - last.context_end) +
          " tokens were appended after generation \"" + request_id +
          "\"; only the tail of the context can be truncated");
    }
    const int64_t drop = last.produced - keep_tokens;
    STREAMD_RETURN_IF_ERROR(RewindContext(s, drop, "truncate.keep_tokens"));
    last.produced = keep_tokens;
    last.context_end -= drop;
    return InfoOf(s);
  }();
  step_cv_.notify_all();
  Deliver(lock, events);
  return result;
}

StatusOr<SessionId> Engine::Fork(SessionId id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!backend_fault_.ok()) return UnavailableError(backend_fault_.message());
  STREAMD_RETURN_IF_ERROR(Find(id).status());
  // No chunk placed: the cache is between steps.
  STREAMD_ASSIGN_OR_RETURN(Session * idle, WaitForIdleSession(lock, id));
  Session& parent = *idle;
  if (parent.gen) {
    return FailedPreconditionError("fork: session " + id.ToString() +
                                   " is generating; fork it between generations");
  }
  if (static_cast<int32_t>(sessions_.size()) >= config_.max_sessions) {
    return ResourceExhaustedError("fork: open sessions are at the limit of " +
                                  std::to_string(config_.max_sessions));
  }
  // The fork may come to hold a bound of blocks of its own (its window slides, every write
  // into a shared block copies it): reserved in full, so nothing is ever preempted.
  const KvPools::Blocks need = KvPools::BoundOf(*parent.cache);
  if (!pools_->Fits(need)) {
    return ResourceExhaustedError("fork: the KV pool cannot admit the fork: " +
                                  pools_->WhyNot(need));
  }
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SessionCache> cache, parent.cache->Fork());
  auto s = std::make_unique<Session>();
  do {
    s->id = SessionId::Random();
  } while (sessions_.contains(s->id));
  s->key = next_key_++;
  s->tenant_key = AddTenantSession(parent.options.tenant);
  s->options = parent.options;
  s->cache = std::move(cache);
  s->pending = parent.pending;
  s->metadata = parent.metadata;
  s->last_gen = parent.last_gen;
  s->partial = parent.partial;
  s->revision = s->context_revision = 1;  // a new session: its first snapshot is due
  s->created_unix_ms = UnixMillis();
  pools_->Reserve(need);
  const SessionId fork_id = s->id;
  sessions_.emplace(fork_id, std::move(s));
  lock.unlock();
  work_cv_.notify_one();  // pending input of the parent's is the fork's too
  return fork_id;
}

}  // namespace streamd
