// Engine: a session's state read out (Capture) and written back (Restore), its metadata, and
// the close that only happens if nothing changed since a snapshot (the persister's offload).
#include <algorithm>
#include <string>
#include <utility>

#include "engine/core/engine_internal.h"

namespace streamd {

Status Engine::CloseIfUnchanged(SessionId id, uint64_t revision) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
    if (s->gen || s->context_revision > revision) {
      return FailedPreconditionError("session " + id.ToString() + " changed (context revision " +
                                     std::to_string(s->context_revision) + ", snapshot " +
                                     std::to_string(revision) + ") or is generating");
    }
    s->closing = true;
    DestroyClosed();
  }
  admission_cv_.notify_all();
  return OkStatus();
}

Status Engine::SetMetadata(SessionId id, const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
  auto [it, inserted] = s->metadata.try_emplace(key, value);
  if (!inserted && it->second == value) return OkStatus();
  it->second = value;
  s->context_revision = ++s->revision;
  return OkStatus();
}

Engine::Session* Engine::WaitUntilIdle(std::unique_lock<std::mutex>& lock, SessionId id) {
  Session* s = nullptr;
  step_cv_.wait(lock, [&] {
    auto it = sessions_.find(id);  // looked up again: it may be destroyed while we wait
    s = it == sessions_.end() ? nullptr : it->second.get();
    return stopping_ || s == nullptr || (!s->in_flight && !s->copying);
  });
  return s;
}

StatusOr<Engine::Session*> Engine::WaitForIdleSession(std::unique_lock<std::mutex>& lock,
                                                      SessionId id) {
  Session* idle = WaitUntilIdle(lock, id);
  if (stopping_) return UnavailableError("the engine is shutting down");
  if (idle == nullptr || idle->closing) {
    return NotFoundError("session " + id.ToString() + " was closed");
  }
  return idle;
}

StatusOr<SessionState> Engine::Capture(SessionId id) {
  SessionState st;
  STREAMD_RETURN_IF_ERROR(CaptureInto(id, &st));
  return st;
}

Status Engine::CaptureInto(SessionId id, SessionState* out, const KvDestination& kv_destination) {
  std::unique_lock<std::mutex> lock(mu_);
  STREAMD_RETURN_IF_ERROR(Find(id).status());
  STREAMD_ASSIGN_OR_RETURN(Session * idle, WaitForIdleSession(lock, id));
  Session& s = *idle;
  if (s.gen) {
    return FailedPreconditionError("session " + id.ToString() +
                                   " is generating; its state is captured between generations");
  }
  const SessionCache& cache = *s.cache;
  SessionState& st = *out;
  st.id = s.id;
  st.tenant = s.options.tenant;
  st.mode = cache.spec().mode;
  st.sinks = cache.spec().sinks;
  st.window = cache.spec().window;
  st.sampling = s.options.sampling;
  st.tokens_seen = cache.tokens_seen();
  st.cached_tokens = cache.cached_ids();
  st.pending.assign(s.pending.begin(), s.pending.end());
  st.metadata = s.metadata;
  st.revision = s.revision;
  st.created_unix_ms = s.created_unix_ms;
  st.saved_unix_ms = UnixMillis();
  s.copying = true;
  lock.unlock();

  // The copy runs without the lock: the session sits out the steps meanwhile (its cache does
  // not change), and Close defers to the end of the copy.
  Status copied;
  if (kv_destination) {
    const kernels::KvPoolLayout& l = pools_->main().layout();
    st.kv.n_layers = KvImageLayers(cache);
    st.kv.n_kv_heads = l.n_kv_heads;
    st.kv.head_dim = l.head_dim;
    st.kv.n_tokens = cache.cached_span().size();
    st.kv.dtype = pools_->main().dtype();
    st.kv.scales = pools_->main().int8_scales_shared();
    st.kv.data.clear();
    st.kv.data_i8.clear();
    void* dest = kv_destination(st);
    copied = dest != nullptr ? ReadCacheKvTo(cache, dest)
                             : InternalError("capture: no destination for the K/V");
  } else {
    copied = ReadCacheKvInto(cache, &st.kv);
  }

  lock.lock();
  s.copying = false;
  DestroyClosed();
  lock.unlock();
  step_cv_.notify_all();
  work_cv_.notify_one();
  admission_cv_.notify_all();
  return copied;
}

Status Engine::Restore(const SessionState& st) { return Restore(st, KvView::Of(st.kv)); }

Status Engine::Restore(const SessionState& st, const KvView& kv) {
  const LlamaConfig& c = model_->config();
  if (!st.id.valid()) return InvalidArgumentError("restore: the state has no session id");
  SessionOptions options;
  options.tenant = st.tenant;
  options.mode = st.mode;
  options.sinks = st.sinks;
  options.window = st.window;
  options.sampling = st.sampling;
  STREAMD_RETURN_IF_ERROR(ValidateOptions(options));
  const CacheSpec spec =
      SessionCache::Effective({st.mode, st.sinks, st.window, config_.max_chunk}, c.context_length);
  if (spec.sinks != st.sinks || spec.window != st.window) {
    return InvalidArgumentError("restore: a " + std::string(CacheModeName(st.mode)) +
                                " cache here has sinks " + std::to_string(spec.sinks) +
                                " and window " + std::to_string(spec.window) + ", the state " +
                                std::to_string(st.sinks) + " and " + std::to_string(st.window));
  }
  if (kv.n_layers != c.n_layers || kv.n_kv_heads != c.n_kv_heads || kv.head_dim != c.head_dim) {
    return InvalidArgumentError("restore: the state's K/V have " + std::to_string(kv.n_layers) +
                                " layers, " + std::to_string(kv.n_kv_heads) + " KV heads of " +
                                std::to_string(kv.head_dim) + "; the model " +
                                std::to_string(c.n_layers) + ", " + std::to_string(c.n_kv_heads) +
                                " of " + std::to_string(c.head_dim));
  }
  if (kv.n_tokens != static_cast<int64_t>(st.cached_tokens.size()) || kv.size != kv.elements()) {
    return InvalidArgumentError("restore: the state holds " + std::to_string(kv.n_tokens) +
                                " tokens of K/V, " + std::to_string(st.cached_tokens.size()) +
                                " cached ids and " + std::to_string(kv.size) + " K/V elements");
  }
  if (const Status complete = CheckKvView(kv); !complete.ok()) {
    return InvalidArgumentError("restore: " + complete.message());
  }
  const int32_t vocab = tokenizer_->vocab_size();
  for (const std::vector<int32_t>* ids : {&st.cached_tokens, &st.pending}) {
    for (size_t i = 0; i < ids->size(); ++i) {
      if ((*ids)[i] < 0 || (*ids)[i] >= vocab) {
        return InvalidArgumentError(
            std::string("restore: ") + (ids == &st.pending ? "pending" : "cached_tokens") + "[" +
            std::to_string(i) + "] = " + std::to_string((*ids)[i]) +
            " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      }
    }
  }
  if (static_cast<int64_t>(st.pending.size()) > config_.max_pending_tokens) {
    return InvalidArgumentError("restore: " + std::to_string(st.pending.size()) +
                                " pending tokens, over the limit of " +
                                std::to_string(config_.max_pending_tokens));
  }
  if (spec.mode == CacheMode::kDense &&
      st.tokens_seen + static_cast<int64_t>(st.pending.size()) > spec.window) {
    return InvalidArgumentError("restore: a dense session holds at most " +
                                std::to_string(spec.window) + " tokens; the state has " +
                                std::to_string(st.tokens_seen + st.pending.size()));
  }

  std::unique_lock<std::mutex> lock(mu_);
  // A session of this id that is closing (its step still in flight) goes first.
  step_cv_.wait(lock, [&] {
    auto it = sessions_.find(st.id);
    return stopping_ || it == sessions_.end() || !it->second->closing;
  });
  if (stopping_) return UnavailableError("the engine is shutting down");
  if (sessions_.count(st.id) > 0) {
    return AlreadyExistsError("restore: session " + st.id.ToString() + " already exists");
  }
  if (static_cast<int32_t>(sessions_.size()) >= config_.max_sessions) {
    return ResourceExhaustedError("open sessions are at the limit of " +
                                  std::to_string(config_.max_sessions));
  }
  const KvPools::Blocks need = pools_->BoundOf(spec);
  if (!pools_->Fits(need)) {
    return ResourceExhaustedError("the KV pool cannot admit this session now: " +
                                  pools_->WhyNot(need));
  }
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SessionCache> cache,
                           pools_->NewCache(spec, c.context_length));
  STREAMD_RETURN_IF_ERROR(cache->Restore(st.tokens_seen, st.cached_tokens));
  auto owned = std::make_unique<Session>();
  Session& s = *owned;
  s.id = st.id;
  s.key = next_key_++;
  s.tenant_key = AddTenantSession(options.tenant);
  s.options = options;
  s.cache = std::move(cache);
  s.pending = st.pending;
  s.metadata = st.metadata;
  s.revision = st.revision;
  s.context_revision = st.revision;
  s.created_unix_ms = st.created_unix_ms;
  s.copying = true;  // sits out the steps until its K/V are in place
  pools_->Reserve(KvPools::BoundOf(*s.cache));
  sessions_.emplace(st.id, std::move(owned));
  lock.unlock();

  const Status written = WriteCacheKv(*s.cache, kv);

  lock.lock();
  s.copying = false;
  if (!written.ok()) s.closing = true;  // nothing half-restored stays behind
  DestroyClosed();
  lock.unlock();
  step_cv_.notify_all();
  work_cv_.notify_one();
  admission_cv_.notify_all();
  return written;
}

}  // namespace streamd
