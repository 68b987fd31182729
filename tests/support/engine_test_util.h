// Helpers of the engine tests: an event collector, a synthetic-model engine, and a backend
// wrapper that picks greedy ids "on the device" as CUDA does.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/core/engine.h"
#include "engine/model/forwarding_backend.h"

namespace streamd::testing {

using namespace std::chrono_literals;

// Collects events from the scheduler thread; tests wait on it.
class Collector {
 public:
  EventSink Sink() {
    return [this](GenerationEvent&& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (e.kind == GenerationEvent::Kind::kToken) {
        tokens_[e.session].push_back(e.token);
        text_[e.session] += e.text;
      } else {
        text_[e.session] += e.tail_text;
        done_[e.session] = e;
      }
      cv_.notify_all();
    };
  }
  GenerationEvent WaitDone(SessionId id) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, 120s, [&] { return done_.count(id) > 0; }))
        << "session " << id << " never finished";
    GenerationEvent e = done_[id];
    done_.erase(id);
    return e;
  }
  std::vector<int32_t> Tokens(SessionId id) {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_[id];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<SessionId, std::vector<int32_t>> tokens_;
  std::map<SessionId, std::string> text_;
  std::map<SessionId, GenerationEvent> done_;
};

// The CPU model dressed as a backend that picks greedy ids on the device (as CUDA does): the
// engine then runs greedy steps through ExecuteGreedy and fetches single rows only when a
// session needs more than its id. Its "device" is a host buffer that keeps the last greedy
// step's rows until the next step, as CudaModel keeps them on the GPU. Counts which path each
// step took.
class IdsOnDevice : public ForwardingBackend {
 public:
  explicit IdsOnDevice(std::unique_ptr<ModelBackend> inner) : ForwardingBackend(std::move(inner)) {}
  Status Execute(const StepPlan& plan, float* logits) override {
    ++full_rows_steps;
    rows_.clear();
    return inner().Execute(plan, logits);
  }
  Status ExecuteGreedy(const StepPlan& plan, int32_t* next_tokens) override {
    ++ids_only_steps;
    const size_t vocab = static_cast<size_t>(config().vocab_size);
    rows_.resize(static_cast<size_t>(plan.n_out) * vocab);
    if (Status s = inner().Execute(plan, rows_.data()); !s.ok()) {
      rows_.clear();
      return s;
    }
    for (int32_t r = 0; r < plan.n_out; ++r) {
      const float* row = &rows_[static_cast<size_t>(r) * vocab];
      next_tokens[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
    return OkStatus();
  }
  bool greedy_ids_on_device() const override { return true; }
  Status CopyGreedyStepLogits(int64_t row, float* out) override {
    ++rows_fetched;
    const size_t vocab = static_cast<size_t>(config().vocab_size);
    if (row < 0 || static_cast<size_t>(row + 1) * vocab > rows_.size()) {
      return InvalidArgumentError("row " + std::to_string(row) + " is not in the last step");
    }
    std::copy_n(&rows_[static_cast<size_t>(row) * vocab], vocab, out);
    return OkStatus();
  }

  std::atomic<int64_t> full_rows_steps{0}, ids_only_steps{0}, rows_fetched{0};

 private:
  std::vector<float> rows_;  // [n_out, vocab] of the last greedy step
};

inline SyntheticModelSpec TinyModel() {
  SyntheticModelSpec spec;
  spec.with_vocab = true;
  spec.vocab_size = 300;
  return spec;
}

// With `ids_on_device`, the model is wrapped in IdsOnDevice and *wrapper points at it.
inline std::unique_ptr<Engine> MakeEngine(int64_t pool_bytes = 64 << 20, int32_t max_chunk = 64,
                                          const SyntheticModelSpec& spec = TinyModel(),
                                          IdsOnDevice** wrapper = nullptr, int32_t block_size = 16,
                                          PlannerConfig planner = {128, 64}) {
  auto model = MakeSyntheticModel(spec);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  EngineConfig config;
  config.pool_bytes = pool_bytes;
  config.max_chunk = max_chunk;
  config.threads = 2;
  config.planner = planner;
  config.block_size = block_size;
  std::unique_ptr<ModelBackend> backend = std::move(model).value();
  if (wrapper != nullptr) {
    auto wrapped = std::make_unique<IdsOnDevice>(std::move(backend));
    *wrapper = wrapped.get();
    backend = std::move(wrapped);
  }
  auto engine = Engine::Create(std::move(backend), std::move(vocab).value(), config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

inline SessionOptions Greedy(int32_t window = 40) {
  SessionOptions o;
  o.sinks = 4;
  o.window = window;
  o.sampling.temperature = 0.0f;
  return o;
}

inline std::vector<int32_t> RandomTokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 256);  // bytes: never special
  return t;
}

inline GenerateOptions UpTo(int32_t n) {
  GenerateOptions g;
  g.max_tokens = n;
  g.ignore_end_of_generation = true;
  return g;
}

// Greedy tokens of one generation of n tokens.
inline std::vector<int32_t> GenerateN(Engine& engine, Collector& events, SessionId id, int32_t n) {
  const size_t before = events.Tokens(id).size();
  EXPECT_TRUE(engine.Generate(id, UpTo(n), events.Sink()).ok());
  const GenerationEvent done = events.WaitDone(id);
  EXPECT_EQ(done.reason, FinishReason::kLength) << done.status.ToString();
  const std::vector<int32_t> all = events.Tokens(id);
  return {all.begin() + static_cast<std::ptrdiff_t>(before), all.end()};
}

}  // namespace streamd::testing
