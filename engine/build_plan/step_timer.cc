#include "engine/build_plan/step_timer.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>

namespace streamd {
namespace {

constexpr int32_t kBlockSize = 16;
// Tokens one fast-forward call appends (a prefill chunk of the server's default size).
constexpr int32_t kMaxChunk = 256;
constexpr int64_t kMaxSessions = 4096;

Status CheckWorkload(const StepWorkload& w, const LlamaConfig& c) {
  auto field = [](const char* name, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return InvalidArgumentError(std::string("step workload: ") + name + " = " +
                                  std::to_string(v) + " outside [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "]");
    }
    return OkStatus();
  };
  STREAMD_RETURN_IF_ERROR(field("sessions", w.sessions, 1, kMaxSessions));
  STREAMD_RETURN_IF_ERROR(field("tokens_per_session", w.tokens_per_session, 1, kMaxChunk));
  STREAMD_RETURN_IF_ERROR(field("sinks", w.sinks, 0, c.context_length - 1));
  STREAMD_RETURN_IF_ERROR(field("window", w.window, 1, c.context_length - w.sinks));
  return OkStatus();
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  return values[mid];
}

StepTimer::StepTimer(ModelBackend& model, const StepWorkload& workload)
    : model_(model), step_(model), workload_(workload) {}

StepTimer::~StepTimer() {
  caches_.clear();  // their blocks go back before the pool does
}

StatusOr<std::unique_ptr<StepTimer>> StepTimer::Create(ModelBackend& model, const StepWorkload& w) {
  const LlamaConfig& c = model.config();
  STREAMD_RETURN_IF_ERROR(CheckWorkload(w, c));
  std::unique_ptr<StepTimer> t(new StepTimer(model, w));
  t->spec_ = SessionCache::Effective(
      {CacheMode::kSink, static_cast<int32_t>(w.sinks), static_cast<int32_t>(w.window),
       std::min(kMaxChunk, c.context_length)},
      c.context_length);
  const KvShape shape = model.CacheShape();  // f16, or int8 once a plan's cache is applied
  const int64_t pool_bytes = w.sessions * SessionCache::PeakBlocks(t->spec_, kBlockSize) *
                             BlockPool::BlockBytes(shape, kBlockSize);
  STREAMD_ASSIGN_OR_RETURN(t->pool_, model.CreatePool(shape, kBlockSize, pool_bytes));
  const std::vector<int32_t> zeros(static_cast<size_t>(t->spec_.max_chunk), 0);
  for (int64_t s = 0; s < w.sessions; ++s) {
    STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SessionCache> cache,
                             SessionCache::Create(t->pool_.get(), t->spec_, c.context_length));
    // Past S + W (eviction has begun), staggered so the sessions' rings differ.
    int64_t left = t->spec_.sinks + t->spec_.window + 1 + s % kBlockSize;
    while (left > 0) {
      const int32_t chunk = static_cast<int32_t>(std::min<int64_t>(left, t->spec_.max_chunk));
      STREAMD_RETURN_IF_ERROR(cache->BeginChunk({zeros.data(), static_cast<size_t>(chunk)}));
      cache->Commit(chunk);
      left -= chunk;
    }
    t->caches_.push_back(std::move(cache));
  }
  for (auto& cache : t->caches_) {
    t->seqs_.push_back(
        {cache.get(), static_cast<int32_t>(w.tokens_per_session), LogitsMode::kLast});
  }
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, c.vocab_size - 1);
  t->tokens_.resize(static_cast<size_t>(w.sessions * w.tokens_per_session));
  for (int32_t& id : t->tokens_) id = pick(rng);
  t->next_.resize(static_cast<size_t>(w.sessions));
  return t;
}

StatusOr<std::vector<double>> StepTimer::Run(int64_t steps) {
  std::vector<double> ms;
  ms.reserve(static_cast<size_t>(std::max<int64_t>(steps, 0)));
  const int64_t per = workload_.tokens_per_session;
  for (int64_t step = 0; step < steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    STREAMD_RETURN_IF_ERROR(step_.RunGreedy(tokens_, seqs_, next_.data()));
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    // Each session's next input: its argmax, then (for chunks) the ids that followed it.
    for (int64_t s = 0; s < workload_.sessions; ++s)
      tokens_[static_cast<size_t>(s * per)] = next_[s];
  }
  return ms;
}

double StepTimer::kv_bytes_per_step() const {
  return static_cast<double>(workload_.sessions) * (spec_.sinks + spec_.window) *
         static_cast<double>(pool_->bytes_per_token());
}

double StepTimer::bytes_per_step() const {
  return static_cast<double>(model_.weight_bytes()) + kv_bytes_per_step();
}

}  // namespace streamd
