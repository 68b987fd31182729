#include "engine/serving/engine.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_map>
#include <utility>

#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_string_matcher.h"
#include "engine/tokenizer/incremental_detokenizer.h"

namespace streamd {

using Clock = std::chrono::steady_clock;

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kEndOfGeneration: return "end_of_generation";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

struct Engine::Generation {
  GenerateOptions options;
  EventSink sink;
  Sampler sampler;
  tokenizer::IncrementalDetokenizer detok;
  StopStringMatcher stops;
  int64_t prompt_tokens = 0;  // pending input when the generation started
  int64_t produced = 0;
  Clock::time_point start, first_token;
};

struct Engine::Session {
  SessionId id;
  uint64_t plan_id = 0;  // the StepPlanner's name for it: the order of Open, never shown
  SessionOptions options;
  std::unique_ptr<SessionCache> cache;
  std::vector<int32_t> pending;  // context not yet in the cache
  // An idle session keeps its last context token back in `pending`, so that a generation can
  // start from its logits. When a generation is cancelled while its last token is in flight,
  // that token reaches the cache anyway; its logits are kept here instead, and the next
  // generation samples from them. Appending input makes them stale.
  std::vector<float> held_logits;
  int32_t last_cached_token = -1;  // the newest token in the cache (-1 while empty)
  std::unique_ptr<Generation> gen;
  bool in_flight = false;  // part of the step being computed
  bool closing = false;
};

struct Engine::StepChunk {
  Session* session;
  int32_t n_tokens;
  // The chunk ends its session's pending input while a generation runs: its logits row is
  // sampled after the step (checked again then: a cancel may land while the step runs).
  bool Samples() const {
    return session->gen && !session->closing &&
           session->pending.size() == static_cast<size_t>(n_tokens);
  }
};

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
  STREAMD_ASSIGN_OR_RETURN(
      std::unique_ptr<BlockPool> pool,
      model->CreatePool({c.n_layers, c.n_kv_heads, c.head_dim}, config.block_size,
                        config.pool_bytes));
  if (config.threads > 0) model->set_threads(config.threads);
  return std::unique_ptr<Engine>(
      new Engine(std::move(model), std::move(tokenizer), config, std::move(pool)));
}

Engine::Engine(std::unique_ptr<ModelBackend> model, std::unique_ptr<tokenizer::Tokenizer> tokenizer,
               EngineConfig config, std::unique_ptr<BlockPool> pool)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      config_(config),
      pool_(std::move(pool)),
      planner_(config.planner) {
  stats_.blocks_total = pool_->total_blocks();
  stats_.bytes_per_token = pool_->bytes_per_token();
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  admission_cv_.notify_all();
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
  const CacheSpec spec = SessionCache::Effective(
      {options.mode, options.sinks, options.window, config_.max_chunk},
      model_->config().context_length);
  const int32_t need = SessionCache::MaxBlocks(spec, pool_->block_size());
  std::unique_lock<std::mutex> lock(mu_);
  if (static_cast<int32_t>(sessions_.size()) >= config_.max_sessions) {
    return ResourceExhaustedError("open sessions are at the limit of " +
                                  std::to_string(config_.max_sessions));
  }
  const auto fits = [&] { return stopping_ || reserved_blocks_ + need <= pool_->total_blocks(); };
  if (!fits()) {
    admission_cv_.wait_for(lock, options.admission_timeout, fits);
  }
  if (stopping_) return UnavailableError("the engine is shutting down");
  if (!fits()) {
    return ResourceExhaustedError(
        "the KV pool cannot admit this session: it needs up to " + std::to_string(need) +
        " blocks (sinks " + std::to_string(spec.sinks) + ", window " +
        std::to_string(spec.window) + "), " + std::to_string(reserved_blocks_) + " of " +
        std::to_string(pool_->total_blocks()) + " are reserved by open sessions");
  }
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SessionCache> cache,
                           SessionCache::Create(pool_.get(), spec, model_->config().context_length));
  auto s = std::make_unique<Session>();
  do {
    s->id = SessionId::Random();
  } while (sessions_.contains(s->id));  // never two live sessions with one id
  s->plan_id = next_plan_id_++;
  s->options = options;
  s->cache = std::move(cache);
  reserved_blocks_ += s->cache->max_blocks();
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

Status Engine::Append(SessionId id, std::span<const int32_t> tokens) {
  if (tokens.empty()) return InvalidArgumentError("append: tokens is empty");
  const int32_t vocab = tokenizer_->vocab_size();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return InvalidArgumentError("append: token id " + std::to_string(tokens[i]) + " at index " +
                                  std::to_string(i) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
    if (s->gen) {
      return FailedPreconditionError("session " + id.ToString() +
                                     " is generating; cancel the generation before appending");
    }
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
    s->held_logits.clear();
  }
  work_cv_.notify_one();
  return OkStatus();
}

Status Engine::Generate(SessionId id, GenerateOptions options, EventSink sink) {
  if (options.max_tokens < 1) {
    return InvalidArgumentError("max_tokens = " + std::to_string(options.max_tokens) +
                                " must be >= 1");
  }
  STREAMD_RETURN_IF_ERROR(StopStringMatcher::Validate(options.stop));
  {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
    const SamplingParams params = options.sampling.value_or(s->options.sampling);
    STREAMD_RETURN_IF_ERROR(ValidateSamplingParams(params, model_->config().vocab_size));
    if (s->gen) {
      return FailedPreconditionError("session " + id.ToString() +
                                     " is already generating; cancel it or wait for it to end");
    }
    if (s->pending.empty() && s->held_logits.empty()) {
      return FailedPreconditionError("session " + id.ToString() +
                                     " has no context to continue; append input first");
    }
    const int32_t last = s->pending.empty() ? s->last_cached_token : s->pending.back();
    auto gen = std::unique_ptr<Generation>(new Generation{
        std::move(options), std::move(sink), Sampler(params, model_->config().vocab_size),
        tokenizer::IncrementalDetokenizer(*tokenizer_, tokenizer_->IsSpecial(last)),
        StopStringMatcher({}), 0, 0, Clock::now(), {}});
    gen->stops = StopStringMatcher(gen->options.stop);
    gen->prompt_tokens = static_cast<int64_t>(s->pending.size());
    s->gen = std::move(gen);
  }
  work_cv_.notify_one();
  return OkStatus();
}

Status Engine::Cancel(SessionId id) {
  std::vector<std::pair<EventSink, GenerationEvent>> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
    if (s->gen) Finish(*s, FinishReason::kCancelled, OkStatus(), events);
  }
  for (auto& [sink, event] : events) sink(std::move(event));
  return OkStatus();
}

Status Engine::Close(SessionId id) {
  std::vector<std::pair<EventSink, GenerationEvent>> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_ASSIGN_OR_RETURN(Session * s, Find(id));
    if (s->gen) Finish(*s, FinishReason::kCancelled, OkStatus(), events);
    s->closing = true;
    DestroyClosed();
  }
  admission_cv_.notify_all();
  for (auto& [sink, event] : events) sink(std::move(event));
  return OkStatus();
}

void Engine::DestroyClosed() {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second->closing && !it->second->in_flight) {
      reserved_blocks_ -= it->second->cache->max_blocks();
      it = sessions_.erase(it);  // the cache returns its blocks to the pool here
    } else {
      ++it;
    }
  }
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
  info.max_blocks = s.cache->max_blocks();
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
  st.blocks_used = pool_->used_blocks();
  st.blocks_reserved = reserved_blocks_;
  return st;
}

// A session has work when it generates (its held-back token must be run), or when it holds
// more than the one context token an idle session keeps back.
bool Engine::HasWork() const {
  for (const auto& [id, s] : sessions_) {
    if (s->closing) continue;
    if (s->gen ? !s->pending.empty() || !s->held_logits.empty() : s->pending.size() > 1) {
      return true;
    }
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
  std::vector<std::pair<EventSink, GenerationEvent>> events;
  // Generations that start from held logits draw their first token without a forward pass.
  for (const auto& [id, s] : sessions_) {
    if (s->closing || !s->gen || !s->pending.empty() || s->held_logits.empty()) continue;
    const int32_t token = s->gen->sampler.Sample(std::span<float>(s->held_logits));
    ApplyToken(*s, token, events);
    s->held_logits.clear();
  }
  // Plan under the lock.
  std::vector<SessionWork> work;
  std::unordered_map<uint64_t, Session*> by_plan_id;
  for (const auto& [id, s] : sessions_) {
    if (s->closing) continue;
    // Idle sessions prefill all but their last token; generating ones everything.
    const int64_t runnable = static_cast<int64_t>(s->pending.size()) - (s->gen ? 0 : 1);
    if (runnable <= 0) continue;
    by_plan_id.emplace(s->plan_id, s.get());
    work.push_back({s->plan_id, runnable,
                    s->gen != nullptr && s->pending.size() == 1 && s->gen->produced > 0,
                    s->cache->spec().max_chunk});
  }
  const std::vector<PlannedChunk> plan = planner_.Plan(work);
  std::vector<StepChunk> chunks;
  std::vector<int32_t> tokens;
  std::vector<SequenceInput> seqs;
  for (const PlannedChunk& p : plan) {
    Session& s = *by_plan_id.at(p.id);
    s.in_flight = true;
    chunks.push_back({&s, p.n_tokens});
    tokens.insert(tokens.end(), s.pending.begin(), s.pending.begin() + p.n_tokens);
    seqs.push_back({s.cache.get(), p.n_tokens, LogitsMode::kLast});
  }
  if (chunks.empty()) {
    lock.unlock();
    for (auto& [sink, event] : events) sink(std::move(event));
    lock.lock();
    return;
  }
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
  lock.unlock();
  const Status status = ids_only ? model_->ForwardGreedy(tokens, seqs, ids.data())
                                 : model_->Forward(tokens, seqs, logits_.data());
  lock.lock();
  // Rows an ids-only step did not bring back: a generation cancelled (its logits are held) or
  // replaced by one that samples while the step ran. Rare; fetched one by one.
  const auto fetch_row = [&](size_t i, std::vector<float>& row) {
    row.resize(vocab);
    return model_->CopyGreedyStepLogits(static_cast<int64_t>(i), row.data());
  };

  ++stats_.steps;
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
        sampled[i] = chunks[i].session->gen->sampler.Sample(
            std::span<float>(&logits_[i * vocab], vocab));
      });
    }
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    Session& s = *chunks[i].session;
    s.in_flight = false;
    if (!status.ok()) {
      // The step failed for every session in it (a failed forward pass is not retried: the
      // chunk is dropped so a persistent fault cannot spin the loop); generations end with it.
      s.pending.erase(s.pending.begin(), s.pending.begin() + chunks[i].n_tokens);
      if (s.gen) Finish(s, FinishReason::kError, status, events);
      continue;
    }
    stats_.tokens_in += chunks[i].n_tokens;
    s.last_cached_token = s.pending[chunks[i].n_tokens - 1];
    s.pending.erase(s.pending.begin(), s.pending.begin() + chunks[i].n_tokens);
    if (s.closing) continue;
    if (s.gen) {
      if (sampled[i] >= 0) ApplyToken(s, sampled[i], events);
      if (!sample_errors[i].ok()) Finish(s, FinishReason::kError, sample_errors[i], events);
    } else if (s.pending.empty()) {  // its generation was cancelled while this step ran
      if (!ids_only) {
        const float* row = &logits_[i * vocab];
        s.held_logits.assign(row, row + vocab);
      } else if (Status fetched = fetch_row(i, s.held_logits); !fetched.ok()) {
        // Without its logits the session continues from new input only.
        s.held_logits.clear();
      }
    }
  }
  DestroyClosed();
  lock.unlock();
  admission_cv_.notify_all();
  for (auto& [sink, event] : events) sink(std::move(event));
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
  if (reason != FinishReason::kStop) e.tail_text = g.stops.Feed(g.detok.Flush()).text + g.stops.Flush();
  e.prompt_tokens = g.prompt_tokens;
  e.output_tokens = g.produced;
  const Clock::time_point now = Clock::now();
  e.time_to_first_token_s =
      g.produced > 0 ? std::chrono::duration<double>(g.first_token - g.start).count() : 0.0;
  e.total_s = std::chrono::duration<double>(now - g.start).count();
  out.emplace_back(g.sink, std::move(e));
  s.gen.reset();
}

}  // namespace streamd
