// Captures and restores of one session while others decode on the CUDA engine through CUDA
// graphs (Engine::Capture / Restore during graph capture and replay): the decoders' tokens are
// exactly those of a twin engine that copies nothing. Moving sessions between backends:
// cuda_snapshot_test.cc. Every test is skipped, with the reason, on a machine without a usable
// GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/backends/cuda/cuda_model.h"
#include "engine/core/engine.h"
#include "engine/model/forwarding_backend.h"
#include "tests/support/cuda_model_test_util.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/engine_test_util.h"

namespace streamd::cuda {
namespace {

class GatedBackend final : public ForwardingBackend {
 public:
  explicit GatedBackend(std::unique_ptr<ModelBackend> inner)
      : ForwardingBackend(std::move(inner)) {}
  Status Execute(const StepPlan& plan, float* logits) override {
    Hold();
    return inner().Execute(plan, logits);
  }
  Status ExecuteGreedy(const StepPlan& plan, int32_t* next_tokens) override {
    Hold();
    return inner().ExecuteGreedy(plan, next_tokens);
  }

  // The next step waits at its start until Release; WaitHeld returns once it waits there.
  void Arm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
    held_ = false;
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(60), [&] { return held_; }))
        << "no step came";
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
    cv_.notify_all();
  }

 private:
  void Hold() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!armed_) return;
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !armed_; });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, held_ = false;
};

// Waits until the engine has prefilled all of a session's input but the last token.
bool WaitPrefilled(Engine& engine, SessionId id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto info = engine.Get(id);
    if (!info.ok()) return false;
    if (info->pending_tokens <= 1) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// Captures and restores of one session while three others decode on the CUDA engine (graphs
// on: the copies run while decode steps are captured into graphs and replayed): the decoders'
// tokens are exactly those of a twin engine that copies nothing, every capture of the idle
// session is the same state, and every restored copy of it reads back whole. The twin holds the
// decoders restored from the first engine (same ids and K/V bits), and in both a gate lines up
// the three generations so that both run the same steps: a blocker's step, then the three
// together until they end.
TEST(CudaSnapshotTest, CopiesDuringGraphDecodeStepsLeaveOtherSessionsAlone) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  streamd::testing::Collector events_a, events_b;  // before the engines (their threads call them)
  SyntheticModelSpec spec = SmallSpec(6);
  spec.with_vocab = true;
  spec.vocab_size = 300;
  auto cpu = MakeSyntheticModel(spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  const auto make = [&](CudaModel** cuda, GatedBackend** gate) -> std::unique_ptr<Engine> {
    auto gpu = CudaModel::FromCpuModel(**cpu);  // graphs on (the default)
    EXPECT_TRUE(gpu.ok()) << gpu.status().ToString();
    if (!gpu.ok()) return nullptr;
    *cuda = gpu->get();
    auto gated = std::make_unique<GatedBackend>(std::move(gpu).value());
    *gate = gated.get();
    auto vocab = tokenizer::Tokenizer::FromGguf((*cpu)->file());
    EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
    if (!vocab.ok()) return nullptr;
    EngineConfig config;
    config.pool_bytes = 32 << 20;
    config.max_chunk = 64;
    auto engine = Engine::Create(std::move(gated), std::move(vocab).value(), config);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    return engine.ok() ? std::move(engine).value() : nullptr;
  };
  CudaModel* cuda_a = nullptr;
  CudaModel* cuda_b = nullptr;
  GatedBackend* gate_a = nullptr;
  GatedBackend* gate_b = nullptr;
  std::unique_ptr<Engine> a = make(&cuda_a, &gate_a);
  std::unique_ptr<Engine> b = make(&cuda_b, &gate_b);
  ASSERT_TRUE(a != nullptr && b != nullptr);

  // In a: three decoders and one long idle session to copy, each prefilled alone.
  std::vector<SessionId> decoders;
  SessionId idle;
  const size_t lengths[] = {50, 90, 20, 600};
  for (size_t i = 0; i < 4; ++i) {
    auto id = a->Open(streamd::testing::Greedy(i < 3 ? 60 : 1020));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE(a->Append(*id, streamd::testing::RandomTokens(lengths[i], 30 + i)).ok());
    ASSERT_TRUE(WaitPrefilled(*a, *id));
    if (i < 3) {
      decoders.push_back(*id);
    } else {
      idle = *id;
    }
  }
  for (SessionId id : decoders) {  // in Open order: the twin plans them in the same order
    auto st = a->Capture(id);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_TRUE(b->Restore(*st).ok());
  }
  const auto run = [&](Engine& e, GatedBackend& gate, streamd::testing::Collector& events) {
    std::map<SessionId, std::vector<int32_t>> tokens;
    auto blocker = e.Open(streamd::testing::Greedy());
    EXPECT_TRUE(blocker.ok()) << blocker.status().ToString();
    if (!blocker.ok()) return tokens;
    gate.Arm();
    EXPECT_TRUE(e.Append(*blocker, std::vector<int32_t>{1, 2}).ok());
    gate.WaitHeld();  // the scheduler is inside the blocker's step
    for (SessionId id : decoders) {
      EXPECT_TRUE(e.Generate(id, streamd::testing::UpTo(80), events.Sink()).ok());
    }
    gate.Release();
    for (SessionId id : decoders) {
      const GenerationEvent done = events.WaitDone(id);
      EXPECT_EQ(done.reason, FinishReason::kLength) << done.status.ToString();
      tokens[id] = events.Tokens(id);
    }
    return tokens;
  };

  auto first = a->Capture(idle);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::atomic<bool> stop{false};
  std::atomic<int> captures{0}, restores{0};
  std::thread copier([&] {
    while (!stop.load()) {
      auto st = a->Capture(idle);
      if (!st.ok()) {
        ADD_FAILURE() << "capture " << captures.load() << ": " << st.status().ToString();
        return;
      }
      st->saved_unix_ms = first->saved_unix_ms;
      if (!(*st == *first)) {
        ADD_FAILURE() << "capture " << captures.load() << " of the idle session differs";
        return;
      }
      ++captures;
      st->id = SessionId::Random();
      if (const Status s = a->Restore(*st); !s.ok()) {
        ADD_FAILURE() << "restore " << restores.load() << ": " << s.ToString();
        return;
      }
      auto again = a->Capture(st->id);
      if (!again.ok() || !(again->kv == first->kv)) {
        ADD_FAILURE() << "restored copy " << restores.load() << " does not read back whole";
        return;
      }
      (void)a->Close(st->id);
      ++restores;
    }
  });
  const auto tokens_a = run(*a, *gate_a, events_a);
  stop = true;
  copier.join();
  const auto tokens_b = run(*b, *gate_b, events_b);
  for (SessionId id : decoders) {
    ASSERT_EQ(tokens_a.count(id), 1u);
    ASSERT_EQ(tokens_b.count(id), 1u);
    EXPECT_EQ(tokens_a.at(id), tokens_b.at(id)) << "session " << id;
  }
  EXPECT_GT(captures.load(), 0);
  EXPECT_GT(restores.load(), 0);
  EXPECT_GE(cuda_a->graphs_captured(), 1) << "the decode steps did not run as graphs";
  EXPECT_EQ(cuda_a->graphs_captured(), cuda_b->graphs_captured());
  std::printf(
      "%d captures and %d restores of a %zu-token session during 80 decode steps of 3 "
      "sessions (%lld graphs captured)\n",
      captures.load(), restores.load(), lengths[3] - 1,
      static_cast<long long>(cuda_a->graphs_captured()));
}

}  // namespace
}  // namespace streamd::cuda
