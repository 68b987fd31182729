#include "engine/core/engine.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "engine/core/engine_internal.h"

namespace streamd {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEndOfGeneration:
      return "end_of_generation";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

int32_t DefaultPrefillHeadroom(const PlannerConfig& planner, int32_t max_chunk,
                               int32_t block_size) {
  const int64_t tokens = planner.max_batch_tokens;
  const int64_t chunks = CeilDiv(tokens, std::max(1, max_chunk));
  return static_cast<int32_t>(CeilDiv(tokens, block_size) + chunks + 2);
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<ModelBackend> model,
                                                 std::unique_ptr<tokenizer::Tokenizer> tokenizer,
                                                 EngineConfig config) {
  const LlamaConfig& c = model->config();
  if (tokenizer->vocab_size() > c.vocab_size) {
    return InvalidArgumentError("the vocabulary has " + std::to_string(tokenizer->vocab_size()) +
                                " tokens, the model's output " + std::to_string(c.vocab_size));
  }
  if (config.max_chunk < 1 || config.max_chunk > c.context_length) {
    return InvalidArgumentError("max_chunk = " + std::to_string(config.max_chunk) +
                                " is outside [1, " + std::to_string(c.context_length) + "]");
  }
  if (config.planner.max_batch_tokens < 1 || config.planner.max_batch_sessions < 1) {
    return InvalidArgumentError("max_batch_tokens and max_batch_sessions must be >= 1");
  }
  if (config.planner.shared_step_tokens < 0) {
    return InvalidArgumentError(
        "shared_step_tokens = " + std::to_string(config.planner.shared_step_tokens) +
        " must be >= 0 (0 = off)");
  }
  if (config.prefill_headroom_blocks < -1) {
    return InvalidArgumentError(
        "prefill_headroom_blocks = " + std::to_string(config.prefill_headroom_blocks) +
        " must be >= 0, or -1 for the default");
  }
  if (config.pool_fraction < 0.0 || config.pool_fraction > 1.0) {
    return InvalidArgumentError("KV pool fraction = " + std::to_string(config.pool_fraction) +
                                " is outside (0, 1]");
  }
  if (config.pool_fraction > 0.0) {
    STREAMD_ASSIGN_OR_RETURN(config.pool_bytes,
                             model->PoolBudgetFromFraction(config.pool_fraction));
  }
  if (config.prefill_headroom_blocks < 0) {
    config.prefill_headroom_blocks =
        DefaultPrefillHeadroom(config.planner, config.max_chunk, config.block_size);
  }
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<KvPools> pools, KvPools::Create(*model, config));
  if (config.threads > 0) model->set_threads(config.threads);
  return std::unique_ptr<Engine>(
      new Engine(std::move(model), std::move(tokenizer), config, std::move(pools)));
}

Engine::Engine(std::unique_ptr<ModelBackend> model, std::unique_ptr<tokenizer::Tokenizer> tokenizer,
               EngineConfig config, std::unique_ptr<KvPools> pools)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      config_(config),
      pools_(std::move(pools)),
      planner_(config.planner),
      runner_(*model_) {
  stats_.blocks_total = pools_->total().main;
  stats_.blocks_headroom = pools_->headroom();
  stats_.bytes_per_token = pools_->main().bytes_per_token();
  if (const BlockPool* local = pools_->local()) {
    stats_.local_blocks_total = local->total_blocks();
    stats_.local_bytes_per_token = local->bytes_per_token();
  }
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  admission_cv_.notify_all();
  step_cv_.notify_all();
  thread_.join();
  sessions_.clear();  // caches return their blocks before the pool goes
}

Status Engine::ValidateOptions(const SessionOptions& o) const {
  const int32_t ctx = model_->config().context_length;
  if (o.mode != CacheMode::kDense) {
    const int32_t sinks = o.mode == CacheMode::kWindow ? 0 : o.sinks;
    if (sinks < 0 || sinks > config_.max_sinks) {
      return InvalidArgumentError("sinks = " + std::to_string(o.sinks) + " is outside [0, " +
                                  std::to_string(config_.max_sinks) + "]");
    }
    const int32_t max_window = std::min(config_.max_window, ctx - sinks);
    if (o.window < 1 || o.window > max_window) {
      return InvalidArgumentError("window = " + std::to_string(o.window) + " is outside [1, " +
                                  std::to_string(max_window) + "]");
    }
  }
  return ValidateSamplingParams(o.sampling, model_->config().vocab_size);
}

StatusOr<SessionId> Engine::Open(const SessionOptions& options) {
  STREAMD_RETURN_IF_ERROR(ValidateOptions(options));
  const CacheSpec spec =
      SessionCache::Effective({options.mode, options.sinks, options.window, config_.max_chunk},
                              model_->config().context_length);
  std::unique_lock<std::mutex> lock(mu_);
  const KvPools::Blocks need = pools_->BoundOf(spec);
  if (!backend_fault_.ok()) return UnavailableError(backend_fault_.message());
  if (static_cast<int32_t>(sessions_.size()) >= config_.max_sessions) {
    return ResourceExhaustedError("open sessions are at the limit of " +
                                  std::to_string(config_.max_sessions));
  }
  const auto fits = [&] { return stopping_ || pools_->Fits(need); };
  if (!fits()) {
    admission_cv_.wait_for(lock, options.admission_timeout, fits);
  }
  if (stopping_) return UnavailableError("the engine is shutting down");
  if (!fits()) {
    return ResourceExhaustedError("the KV pool cannot admit this session (sinks " +
                                  std::to_string(spec.sinks) + ", window " +
                                  std::to_string(spec.window) + "): " + pools_->WhyNot(need));
  }
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SessionCache> cache,
                           pools_->NewCache(spec, model_->config().context_length));
  auto s = std::make_unique<Session>();
  do {
    s->id = SessionId::Random();
  } while (sessions_.contains(s->id));  // never two live sessions with one id
  s->key = next_key_++;
  s->tenant_key = AddTenantSession(options.tenant);
  s->options = options;
  s->cache = std::move(cache);
  s->created_unix_ms = UnixMillis();
  pools_->Reserve(KvPools::BoundOf(*s->cache));
  const SessionId id = s->id;
  sessions_.emplace(id, std::move(s));
  return id;
}

StatusOr<Engine::Session*> Engine::Find(SessionId id) const {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->closing) {
    return NotFoundError("session " + id.ToString() + " does not exist (never opened, or closed)");
  }
  return it->second.get();
}

Status Engine::Append(SessionId id, std::span<const int32_t> tokens,
                      const MetadataUpdates& metadata, AppendMode mode) {
  const bool partial = mode == AppendMode::kPartial;
  if (tokens.empty()) return InvalidArgumentError("append: tokens is empty");
  const int32_t vocab = tokenizer_->vocab_size();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return InvalidArgumentError("append: token id " + std::to_string(tokens[i]) + " at index " +
                                  std::to_string(i) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
    }
  }
  std::vector<std::pair<EventSink, GenerationEvent>> events;
  std::unique_lock<std::mutex> lock(mu_);
  // Every exit delivers what the body made: a speculative generation cancelled by a partial's
  // replacement ends with its GenerationDone even when the Append then fails.
  const Status result = [&]() -> Status {
    STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
    int64_t start = s->context_length();  // where these tokens begin in the context
    const std::span<const int32_t> all = tokens;
    if (s->partial && mode != AppendMode::kAfterPartial) {
      // Replacing a partial Append: keep the common prefix, rewind the rest of the context.
      const std::vector<int32_t>& old = s->partial->tokens;
      const size_t common = static_cast<size_t>(
          std::mismatch(old.begin(), old.end(), tokens.begin(), tokens.end()).first - old.begin());
      if (common == old.size() && common == tokens.size()) {
        if (!partial) s->partial.reset();  // the same input, now final: everything stays
        for (const auto& [key, value] : metadata) s->metadata[key] = value;
        s->context_revision = ++s->revision;
        return OkStatus();
      }
      if (s->gen) Finish(*s, FinishReason::kCancelled, OkStatus(), events);
      s = WaitUntilIdle(lock, id);
      if (s == nullptr || s->closing || stopping_) {
        return NotFoundError("session " + id.ToString() + " was closed");
      }
      const int64_t keep = s->partial->start + static_cast<int64_t>(common);
      if (Status rewound = RewindContext(*s, s->context_length() - keep, "append.partial");
          !rewound.ok()) {
        // The partial stays open, and every other replacement would fail alike: say the one
        // Append that still works.
        return Status(rewound.code(),
                      rewound.message() +
                          "; the partial Append stays open: send the partial's input again, "
                          "as final, to keep it");
      }
      if (s->last_gen && s->last_gen->context_end > keep) s->last_gen.reset();
      start = s->partial->start;
      tokens = tokens.subspan(common);
      s->partial.reset();
    } else if (s->gen) {
      return FailedPreconditionError("session " + id.ToString() +
                                     " is generating; cancel the generation before appending");
    }
    if (partial) s->partial = PartialInput{{}, start};
    const int64_t pending = static_cast<int64_t>(s->pending.size() + tokens.size());
    if (pending > config_.max_pending_tokens) {
      return ResourceExhaustedError("append: " + std::to_string(pending) +
                                    " tokens would wait for prefill, over the limit of " +
                                    std::to_string(config_.max_pending_tokens));
    }
    if (s->cache->spec().mode == CacheMode::kDense &&
        s->cache->tokens_seen() + pending > s->cache->spec().window) {
      return OutOfRangeError("append: a dense session holds at most " +
                             std::to_string(s->cache->spec().window) + " tokens; it would have " +
                             std::to_string(s->cache->tokens_seen() + pending));
    }
    s->pending.insert(s->pending.end(), tokens.begin(), tokens.end());
    // The partial's tokens: all of this Append's (a replacement's kept prefix included).
    if (partial) s->partial->tokens.assign(all.begin(), all.end());
    stats_.tokens_appended += static_cast<int64_t>(tokens.size());
    for (const auto& [key, value] : metadata) s->metadata[key] = value;
    s->context_revision = ++s->revision;
    work_cv_.notify_one();
    return OkStatus();
  }();
  Deliver(lock, events);
  return result;
}

Status Engine::Generate(SessionId id, GenerateOptions options, EventSink sink) {
  if (options.max_tokens < 1) {
    return InvalidArgumentError("max_tokens = " + std::to_string(options.max_tokens) +
                                " must be >= 1");
  }
  STREAMD_RETURN_IF_ERROR(StopStringMatcher::Validate(options.stop));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!backend_fault_.ok()) return UnavailableError(backend_fault_.message());
    STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
    const SamplingParams params = options.sampling.value_or(s->options.sampling);
    STREAMD_RETURN_IF_ERROR(ValidateSamplingParams(params, model_->config().vocab_size));
    if (s->gen) {
      return FailedPreconditionError("session " + id.ToString() +
                                     " is already generating; cancel it or wait for it to end");
    }
    if (s->pending.empty()) {
      return FailedPreconditionError("session " + id.ToString() +
                                     " has no context to continue; append input first");
    }
    const int32_t last = s->pending.back();
    auto gen = std::unique_ptr<Generation>(
        new Generation{std::move(options),
                       std::move(sink),
                       Sampler(params, model_->config().vocab_size),
                       tokenizer::IncrementalDetokenizer(*tokenizer_, tokenizer_->IsSpecial(last)),
                       StopStringMatcher({}),
                       0,
                       0,
                       Clock::now(),
                       {}});
    gen->stops = StopStringMatcher(gen->options.stop);
    gen->prompt_tokens = static_cast<int64_t>(s->pending.size());
    s->gen = std::move(gen);
  }
  work_cv_.notify_one();
  return OkStatus();
}

Status Engine::Cancel(SessionId id) {
  std::vector<std::pair<EventSink, GenerationEvent>> events;
  std::unique_lock<std::mutex> lock(mu_);
  STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
  if (s->gen) Finish(*s, FinishReason::kCancelled, OkStatus(), events);
  Deliver(lock, events);
  return OkStatus();
}

Status Engine::Close(SessionId id) {
  std::vector<std::pair<EventSink, GenerationEvent>> events;
  std::unique_lock<std::mutex> lock(mu_);
  STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
  if (s->gen) Finish(*s, FinishReason::kCancelled, OkStatus(), events);
  s->closing = true;
  DestroyClosed();
  admission_cv_.notify_all();
  // Even with no events of its own: the session's last step may be delivering its events
  // right now (its generation ended in it), and its sink must not be called after we return.
  Deliver(lock, events, /*after_earlier=*/true);
  return OkStatus();
}

void Engine::Deliver(std::unique_lock<std::mutex>& lock,
                     std::vector<std::pair<EventSink, GenerationEvent>>& events,
                     bool after_earlier) {
  if (events.empty() && !after_earlier) {
    lock.unlock();
    return;
  }
  const uint64_t ticket = next_delivery_ticket_++;
  lock.unlock();
  DeliverInTurn(ticket, events);
}

void Engine::DeliverInTurn(uint64_t ticket,
                           std::vector<std::pair<EventSink, GenerationEvent>>& events) {
  std::unique_lock<std::mutex> turn(delivery_mu_);
  delivery_cv_.wait(turn, [&] { return delivered_tickets_ == ticket; });
  turn.unlock();  // the sinks run with no engine lock held: only the turn orders them
  for (auto& [sink, event] : events) sink(std::move(event));
  events.clear();
  turn.lock();
  ++delivered_tickets_;
  delivery_cv_.notify_all();
}

void Engine::DestroyClosed() {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    Session& s = *it->second;
    if (s.closing && !s.in_flight && !s.copying) {
      pools_->Release(KvPools::BoundOf(*s.cache));
      RemoveTenantSession(s.options.tenant);
      it = sessions_.erase(it);  // the cache returns its blocks to the pool here
    } else {
      ++it;
    }
  }
}

uint32_t Engine::AddTenantSession(const std::string& tenant) {
  auto [it, inserted] = tenant_keys_.try_emplace(tenant);
  if (inserted) it->second.key = next_tenant_key_++;
  ++it->second.sessions;
  return it->second.key;
}

void Engine::RemoveTenantSession(const std::string& tenant) {
  auto it = tenant_keys_.find(tenant);
  if (it != tenant_keys_.end() && --it->second.sessions == 0) tenant_keys_.erase(it);
}

SessionInfo Engine::InfoOf(const Session& s) const {
  SessionInfo info;
  info.id = s.id;
  info.cache = s.cache->spec();
  info.pending_tokens = static_cast<int64_t>(s.pending.size());
  info.tokens_seen = s.cache->tokens_seen() + info.pending_tokens;
  info.tokens_cached = s.cache->tokens_cached();
  info.tokens_evicted = s.cache->tokens_evicted();
  info.generating = s.gen != nullptr;
  info.blocks_held = s.cache->blocks_held();
  info.max_blocks = s.cache->bound_blocks();
  info.revision = s.revision;
  info.tenant = s.options.tenant;
  return info;
}

StatusOr<SessionInfo> Engine::Get(SessionId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
  return InfoOf(*s);
}

std::vector<SessionInfo> Engine::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SessionInfo> out;
  for (const auto& [id, s] : sessions_) {
    if (!s->closing) out.push_back(InfoOf(*s));
  }
  return out;
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats st = stats_;
  st.sessions = 0;
  st.generating = 0;
  for (const auto& [id, s] : sessions_) {
    st.sessions += !s->closing;
    st.generating += s->gen != nullptr;
  }
  st.blocks_used = pools_->used().main;
  st.blocks_reserved = pools_->reserved().main;
  st.local_blocks_used = pools_->used().local;
  st.local_blocks_reserved = pools_->reserved().local;
  return st;
}

bool Engine::CanAdmit(const SessionOptions& options) const {
  if (!ValidateOptions(options).ok()) return false;
  const CacheSpec spec =
      SessionCache::Effective({options.mode, options.sinks, options.window, config_.max_chunk},
                              model_->config().context_length);
  std::lock_guard<std::mutex> lock(mu_);
  return backend_fault_.ok() && static_cast<int32_t>(sessions_.size()) < config_.max_sessions &&
         pools_->Fits(pools_->BoundOf(spec));
}

Status Engine::BackendHealth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backend_fault_;
}

// A session has work when it generates (its held-back token must be run), or when it holds
// more than the one context token an idle session keeps back. Sessions being copied wait.
bool Engine::HasWork() const {
  for (const auto& [id, s] : sessions_) {
    if (s->closing || s->copying) continue;
    if (s->gen ? !s->pending.empty() : s->pending.size() > 1) return true;
  }
  return false;
}

void Engine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || HasWork(); });
    if (stopping_) return;
    RunStep(lock);
  }
}

void Engine::RunStep(std::unique_lock<std::mutex>& lock) {
  const Clock::time_point step_start = Clock::now();
  std::vector<std::pair<EventSink, GenerationEvent>> events;
  // Plan under the lock: the planner picks the chunks, PlanStep places them in their caches.
  // The planner's input and its sessions are parallel (a planned chunk names its entry).
  step_work_.clear();
  step_sessions_.clear();
  for (const auto& [id, s] : sessions_) {
    if (s->closing || s->copying) continue;
    // Idle sessions prefill all but their last token; generating ones everything.
    const int64_t runnable = static_cast<int64_t>(s->pending.size()) - (s->gen ? 0 : 1);
    if (runnable <= 0) continue;
    step_work_.push_back({s->key, runnable,
                          s->gen != nullptr && s->pending.size() == 1 && s->gen->produced > 0,
                          s->cache->spec().max_chunk, s->cache->geometry(), s->tenant_key});
    step_sessions_.push_back(s.get());
  }
  const std::vector<PlannedChunk> planned = planner_.Plan(step_work_, pools_->headroom());
  if (planned.empty()) return;
  std::vector<StepChunk> chunks;
  std::vector<int32_t> tokens;
  std::vector<SequenceInput> seqs;
  for (const PlannedChunk& p : planned) {
    Session& s = *step_sessions_[p.work_index];
    chunks.push_back({&s, p.n_tokens});
    tokens.insert(tokens.end(), s.pending.begin(), s.pending.begin() + p.n_tokens);
    seqs.push_back({s.cache.get(), p.n_tokens, LogitsMode::kLast});
  }
  const Status placed = runner_.Plan(tokens, seqs);
  for (StepChunk& chunk : chunks) chunk.session->in_flight = placed.ok();
  // A backend that picks greedy ids on the device returns only ids when every session this
  // step samples is greedy: no rows of vocab floats cross to the host.
  bool ids_only = model_->greedy_ids_on_device();
  for (size_t i = 0; i < chunks.size() && ids_only; ++i) {
    if (chunks[i].Samples()) ids_only = IsPlainArgmax(chunks[i].session->gen->sampler.params());
  }
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  std::vector<int32_t> ids(ids_only ? chunks.size() : 0);
  if (!ids_only) logits_.resize(chunks.size() * vocab);

  // The forward pass runs without the lock: API calls proceed meanwhile. Sessions in flight
  // are not destroyed (Close defers to DestroyClosed) and their caches are only touched here.
  Status status = placed;
  if (placed.ok()) {
    lock.unlock();
    status = ids_only ? runner_.ExecuteGreedy(ids.data()) : runner_.Execute(logits_.data());
    lock.lock();
  }
  // Rows an ids-only step did not bring back: a generation replaced by one that samples while
  // the step ran. Rare; fetched one by one.
  const auto fetch_row = [&](size_t i, std::vector<float>& row) {
    row.resize(vocab);
    return runner_.GreedyRow(static_cast<int64_t>(i), row.data());
  };

  ++stats_.steps;
  if (status.ok()) {
    failed_steps_in_a_row_ = 0;
  } else if (backend_fault_.ok()) {
    // Only the scheduler thread calls the backend: asking it here needs no lock of its own.
    if (Status health = model_->Health(); !health.ok()) {
      backend_fault_ = std::move(health);
    } else if (++failed_steps_in_a_row_ >= kMaxFailedStepsInARow) {
      backend_fault_ =
          InternalError("the " + std::string(model_->backend_name()) + " backend " + "failed " +
                        std::to_string(failed_steps_in_a_row_) +
                        " steps in a row (restart the process); last: " + status.message());
    }
  }
  // Sampling reads a whole vocabulary row per generating session (16 x 49152 floats a step for
  // 16 sessions of SmolLM2): run it for all of them at once on the backend's threads, which are
  // idle now, before the in-order bookkeeping below. Each session's sampler is its own.
  std::vector<int32_t> sampled(chunks.size(), -1);
  std::vector<Status> sample_errors(chunks.size());  // rows an ids-only step could not fetch
  if (status.ok()) {
    std::vector<size_t> to_sample;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (chunks[i].Samples()) to_sample.push_back(i);
    }
    if (ids_only) {
      std::vector<float> row;
      for (size_t i : to_sample) {
        Sampler& sampler = chunks[i].session->gen->sampler;
        if (IsPlainArgmax(sampler.params())) {
          sampled[i] = ids[i];
        } else if (Status fetched = fetch_row(i, row); fetched.ok()) {
          sampled[i] = sampler.Sample(std::span<float>(row));
        } else {
          sample_errors[i] = fetched;
        }
      }
    } else {
      model_->RunOnHostThreads(static_cast<int64_t>(to_sample.size()), [&](int64_t j) {
        const size_t i = to_sample[static_cast<size_t>(j)];
        // The sampler edits the row in place (penalties); it is this step's scratch.
        sampled[i] =
            chunks[i].session->gen->sampler.Sample(std::span<float>(&logits_[i * vocab], vocab));
      });
    }
  }
  if (!status.ok()) {
    runner_.Abort();  // a step that was not planned has nothing to give back
  } else {
    // A chunk whose generation was cancelled mid-step gives its last token back.
    std::vector<int32_t> kept(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      kept[i] = chunks[i].n_tokens - (chunks[i].GivesBackLast() ? 1 : 0);
    }
    step_evicted_before_.resize(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      step_evicted_before_[i] = chunks[i].session->cache->tokens_evicted();
    }
    runner_.Commit(kept);
    for (size_t i = 0; i < chunks.size(); ++i) {
      Session& s = *chunks[i].session;
      stats_.tokens_evicted += s.cache->tokens_evicted() - step_evicted_before_[i];
      stats_.tokens_in += kept[i];
      s.pending.erase(s.pending.begin(), s.pending.begin() + kept[i]);
      if (kept[i] > 0) ++s.revision;
    }
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    Session& s = *chunks[i].session;
    s.in_flight = false;
    if (!status.ok()) {
      // The step failed for every session in it (a failed forward pass is not retried: the
      // chunk is dropped so a persistent fault cannot spin the loop); generations end with it.
      s.pending.erase(s.pending.begin(), s.pending.begin() + chunks[i].n_tokens);
      s.context_revision = ++s.revision;
      if (s.gen) Finish(s, FinishReason::kError, status, events);
      continue;
    }
    if (s.closing || !s.gen) continue;
    if (sampled[i] >= 0) ApplyToken(s, sampled[i], events);
    if (!sample_errors[i].ok()) Finish(s, FinishReason::kError, sample_errors[i], events);
  }
  DestroyClosed();
  // As Deliver: the step's events go out before any made after it (a Cancel's GenerationDone
  // never overtakes the generation's last tokens).
  const bool deliver = !events.empty();
  const uint64_t ticket = deliver ? next_delivery_ticket_++ : 0;
  lock.unlock();
  step_cv_.notify_all();
  admission_cv_.notify_all();
  // Observed before the events go out: whoever sees a generation end sees its steps counted.
  if (config_.step_observer) {
    config_.step_observer({std::chrono::duration<double>(Clock::now() - step_start).count(),
                           static_cast<int64_t>(tokens.size()), static_cast<int32_t>(chunks.size()),
                           status.ok()});
  }
  if (deliver) DeliverInTurn(ticket, events);
  lock.lock();
}

void Engine::ApplyToken(Session& s, int32_t token,
                        std::vector<std::pair<EventSink, GenerationEvent>>& out) {
  Generation& g = *s.gen;
  g.sampler.Accept(token);
  if (g.produced == 0) g.first_token = Clock::now();
  ++g.produced;
  ++stats_.tokens_out;
  s.pending.push_back(token);  // delivered tokens stay in the context
  s.context_revision = ++s.revision;
  if (!g.options.ignore_end_of_generation && tokenizer_->IsEndOfGeneration(token)) {
    Finish(s, FinishReason::kEndOfGeneration, OkStatus(), out);
    return;
  }
  const StopStringMatcher::FeedResult fed = g.stops.Feed(g.detok.Push(token));
  GenerationEvent e;
  e.kind = GenerationEvent::Kind::kToken;
  e.session = s.id;
  e.request_id = g.options.request_id;
  e.token = token;
  e.text = fed.text;
  e.index = g.produced - 1;
  out.emplace_back(g.sink, std::move(e));
  if (fed.stopped) {
    Finish(s, FinishReason::kStop, OkStatus(), out);
  } else if (g.produced >= g.options.max_tokens) {
    Finish(s, FinishReason::kLength, OkStatus(), out);
  } else if (s.cache->spec().mode == CacheMode::kDense &&
             s.cache->tokens_seen() + 1 > s.cache->spec().window) {
    Finish(s, FinishReason::kLength, OkStatus(), out);  // the dense cache is full
  }
}

void Engine::Finish(Session& s, FinishReason reason, Status status,
                    std::vector<std::pair<EventSink, GenerationEvent>>& out) {
  Generation& g = *s.gen;
  GenerationEvent e;
  e.kind = GenerationEvent::Kind::kDone;
  e.session = s.id;
  e.request_id = g.options.request_id;
  e.reason = reason;
  e.status = std::move(status);
  if (reason != FinishReason::kStop)
    e.tail_text = g.stops.Feed(g.detok.Flush()).text + g.stops.Flush();
  e.prompt_tokens = g.prompt_tokens;
  e.output_tokens = g.produced;
  const Clock::time_point now = Clock::now();
  e.time_to_first_token_s =
      g.produced > 0 ? std::chrono::duration<double>(g.first_token - g.start).count() : 0.0;
  e.total_s = std::chrono::duration<double>(now - g.start).count();
  out.emplace_back(g.sink, std::move(e));
  s.last_gen = LastGeneration{g.options.request_id, g.produced, s.context_length()};
  s.gen.reset();
}

}  // namespace streamd
