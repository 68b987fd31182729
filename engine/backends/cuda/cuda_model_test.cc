// The CUDA backend against the CPU backend, whole model: logits of ragged prefill batches,
// mixed prefill + decode batches and long decode runs past the window (ring wrap-around),
// on a synthetic model with SmolLM2-135M's shape (no file needed), on a small f32 model where
// the CPU does exact f32 math, and on the real default model when STREAMD_MODEL is set. Also:
// the engine serving from the CUDA backend, graph replay equal to eager launches, and bad
// input. Every test is skipped, with the reason, on a machine without a usable GPU.
#include "engine/backends/cuda/cuda_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/core/engine.h"
#include "engine/core/step_runner.h"
#include "tests/support/cuda_model_test_util.h"
#include "tests/support/cuda_test_util.h"

namespace streamd::cuda {
namespace {

// Both backends fed the same batches; each keeps its own pool and caches.
struct Twin {
  std::unique_ptr<LlamaModel> cpu;
  std::unique_ptr<CudaModel> gpu;
  std::unique_ptr<BlockPool> cpu_pool, gpu_pool;
  std::vector<std::unique_ptr<SessionCache>> cpu_caches, gpu_caches;
  double worst = 0;  // largest per-row relative L2 error seen
};

void MakeTwin(std::unique_ptr<LlamaModel> cpu, int32_t sessions, CacheSpec spec, Twin* twin,
              const CudaModelOptions& options = {}) {
  twin->cpu = std::move(cpu);
  twin->cpu->set_threads(2);
  auto gpu = CudaModel::FromCpuModel(*twin->cpu, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  twin->gpu = std::move(gpu).value();
  const LlamaConfig& c = twin->cpu->config();
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  const int64_t bytes =
      static_cast<int64_t>(sessions) *
      SessionCache::PeakBlocks(SessionCache::Effective(spec, c.context_length), 16) *
      BlockPool::BlockBytes(shape, 16);
  auto cpu_pool = twin->cpu->CreatePool(shape, 16, bytes);
  auto gpu_pool = twin->gpu->CreatePool(shape, 16, bytes);
  ASSERT_TRUE(cpu_pool.ok() && gpu_pool.ok()) << gpu_pool.status().ToString();
  twin->cpu_pool = std::move(cpu_pool).value();
  twin->gpu_pool = std::move(gpu_pool).value();
  for (int32_t s = 0; s < sessions; ++s) {
    auto a = SessionCache::Create(twin->cpu_pool.get(), spec, c.context_length);
    auto b = SessionCache::Create(twin->gpu_pool.get(), spec, c.context_length);
    ASSERT_TRUE(a.ok() && b.ok());
    twin->cpu_caches.push_back(std::move(a).value());
    twin->gpu_caches.push_back(std::move(b).value());
  }
}

// One batch: session s appends tokens[s] (may be empty: not in the batch). Compares every
// logits row; returns the CPU rows' argmax per session in the batch (the next decode input).
std::vector<int32_t> Step(Twin& t, const std::vector<std::vector<int32_t>>& tokens,
                          double tolerance) {
  std::vector<int32_t> flat;
  std::vector<SequenceInput> cpu_seqs, gpu_seqs;
  for (size_t s = 0; s < tokens.size(); ++s) {
    if (tokens[s].empty()) continue;
    flat.insert(flat.end(), tokens[s].begin(), tokens[s].end());
    const int32_t n = static_cast<int32_t>(tokens[s].size());
    cpu_seqs.push_back({t.cpu_caches[s].get(), n, LogitsMode::kLast});
    gpu_seqs.push_back({t.gpu_caches[s].get(), n, LogitsMode::kLast});
  }
  const int32_t vocab = t.cpu->config().vocab_size;
  std::vector<float> a(cpu_seqs.size() * static_cast<size_t>(vocab));
  std::vector<float> b(a.size(), NAN);
  Status sa = StepRunner(*t.cpu).Run(flat, cpu_seqs, a.data());
  Status sb = StepRunner(*t.gpu).Run(flat, gpu_seqs, b.data());
  EXPECT_TRUE(sa.ok()) << sa.ToString();
  EXPECT_TRUE(sb.ok()) << sb.ToString();
  std::vector<int32_t> next;
  for (size_t r = 0; r < cpu_seqs.size(); ++r) {
    const float* x = &a[r * vocab];
    const float* y = &b[r * vocab];
    const double rel = RelativeL2(y, x, vocab);
    t.worst = std::max(t.worst, rel);
    EXPECT_LT(rel, tolerance) << "row " << r;
    next.push_back(static_cast<int32_t>(std::max_element(x, x + vocab) - x));
  }
  return next;
}

// Ragged prefill, then a mixed batch, then decode of every session well past S + W.
void RunScenario(Twin& t, double tolerance, int32_t decode_steps) {
  const int32_t vocab = t.cpu->config().vocab_size;
  std::mt19937 rng(7);
  std::vector<int32_t> last = Step(t,
                                   {RandomTokens(rng, 1, vocab), RandomTokens(rng, 17, vocab),
                                    RandomTokens(rng, 64, vocab), RandomTokens(rng, 40, vocab)},
                                   tolerance);
  last = Step(t, {{last[0]}, RandomTokens(rng, 30, vocab), {last[2]}, {last[3]}}, tolerance);
  for (int32_t step = 0; step < decode_steps; ++step) {
    last = Step(t, {{last[0]}, {last[1]}, {last[2]}, {last[3]}}, tolerance);
  }
  ASSERT_GT(t.gpu_caches[2]->tokens_evicted(), 0);  // the ring wrapped
}

CacheSpec SmallWindow() { return {CacheMode::kSink, 4, 60, 64}; }

TEST(CudaModelTest, SyntheticSmolLm2ShapeMatchesCpuBackend) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  auto cpu = MakeSyntheticModel(SmolLm2Shape());
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  Twin t;
  MakeTwin(std::move(cpu).value(), 4, SmallWindow(), &t);
  if (HasFatalFailure()) return;
  // The CPU multiplies Q4_1 weights by 8-bit-quantized activations; the GPU by f16: the
  // logits agree to the precision of those activations, not to f32.
  RunScenario(t, 5e-2, 120);
  std::printf("worst relative L2 error of a logits row: %.3g\n", t.worst);
}

TEST(CudaModelTest, F32ModelMatchesCpuBackendClosely) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  SyntheticModelSpec spec;
  spec.n_layers = 4;
  spec.dim = 256;
  spec.n_heads = 4;  // head_dim 64
  spec.n_kv_heads = 2;
  spec.ffn_dim = 512;
  spec.vocab_size = 1000;
  spec.weight_type = gguf::TensorType::kF32;
  spec.embedding_type = gguf::TensorType::kF32;
  auto cpu = MakeSyntheticModel(spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  Twin t;
  MakeTwin(std::move(cpu).value(), 4, SmallWindow(), &t);
  if (HasFatalFailure()) return;
  RunScenario(t, 1e-2, 100);  // f16 weights and activations vs f32: ~1e-3
  std::printf("worst relative L2 error of a logits row: %.3g\n", t.worst);
}

TEST(CudaModelTest, DefaultModelMatchesCpuBackend) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const char* path = std::getenv("STREAMD_MODEL");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "STREAMD_MODEL is not set (the synthetic SmolLM2-shaped test covers the shape)";
  }
  auto cpu = LlamaModel::Load(path);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  Twin t;
  MakeTwin(std::move(cpu).value(), 4, SmallWindow(), &t);
  if (HasFatalFailure()) return;
  RunScenario(t, 5e-2, 80);
  std::printf("worst relative L2 error of a logits row: %.3g\n", t.worst);
}

// Also: a greedy step's device argmax equals the host argmax of a full step's logits, and the
// rows it leaves on the device (CopyGreedyStepLogits) equal them.
TEST(CudaModelTest, GraphReplayEqualsEagerLaunches) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  auto a = MakeSyntheticModel(SmolLm2Shape());
  auto b = MakeSyntheticModel(SmolLm2Shape());
  ASSERT_TRUE(a.ok() && b.ok());
  Twin graphs, eager;
  MakeTwin(std::move(a).value(), 4, SmallWindow(), &graphs, {0, true});
  MakeTwin(std::move(b).value(), 4, SmallWindow(), &eager, {0, false});
  if (HasFatalFailure()) return;
  const int32_t vocab = graphs.cpu->config().vocab_size;
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = RandomTokens(rng, 20, vocab);
  std::vector<float> la(4 * static_cast<size_t>(vocab)), lb(la.size());
  for (int32_t step = 0; step < 91; ++step) {
    std::vector<SequenceInput> sa, sb;
    std::vector<int32_t> toks;
    for (int32_t s = 0; s < 4; ++s) {
      sa.push_back({graphs.gpu_caches[s].get(), 1, LogitsMode::kLast});
      sb.push_back({eager.gpu_caches[s].get(), 1, LogitsMode::kLast});
      toks.push_back(prompt[(step + s) % prompt.size()]);
    }
    ASSERT_TRUE(StepRunner(*eager.gpu).Run(toks, sb, lb.data()).ok());
    if (step % 2 == 0) {
      ASSERT_TRUE(StepRunner(*graphs.gpu).Run(toks, sa, la.data()).ok());
      ASSERT_EQ(la, lb) << "step " << step;
    } else {  // greedy ids picked on the device = argmax of the same logits on the host
      std::vector<int32_t> ids(4, -1);
      ASSERT_TRUE(StepRunner(*graphs.gpu).RunGreedy(toks, sa, ids.data()).ok());
      std::vector<float> kept(vocab);
      for (int32_t s = 0; s < 4; ++s) {
        const float* row = &lb[static_cast<size_t>(s) * vocab];
        EXPECT_EQ(ids[s], std::max_element(row, row + vocab) - row) << "step " << step;
        // The step's rows stay on the device until the next one, for the engine to fetch.
        ASSERT_TRUE(graphs.gpu->CopyGreedyStepLogits(s, kept.data()).ok());
        EXPECT_TRUE(std::equal(kept.begin(), kept.end(), row)) << "step " << step;
      }
      EXPECT_FALSE(graphs.gpu->CopyGreedyStepLogits(4, kept.data()).ok()) << "past the rows";
    }
  }
  std::vector<float> kept(vocab);
  EXPECT_FALSE(graphs.gpu->CopyGreedyStepLogits(0, kept.data()).ok())
      << "a full-logits step (the last, step 90) leaves no greedy rows";
  EXPECT_GE(graphs.gpu->graphs_captured(), 1);
  EXPECT_EQ(eager.gpu->graphs_captured(), 0);
}

TEST(CudaModelTest, EngineServesFromTheCudaBackend) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  SyntheticModelSpec spec;
  spec.with_vocab = true;
  spec.vocab_size = 300;
  spec.dim = 128;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  spec.ffn_dim = 256;
  // Declared before the engine: its scheduler thread may call the sinks until it is joined.
  std::mutex mu;
  std::condition_variable cv;
  std::map<SessionId, GenerationEvent> done;
  std::map<SessionId, int> counts;
  std::vector<SessionId> ids;
  auto cpu = MakeSyntheticModel(spec);
  ASSERT_TRUE(cpu.ok());
  auto vocab = tokenizer::Tokenizer::FromGguf((*cpu)->file());
  ASSERT_TRUE(vocab.ok());
  auto gpu = CudaModel::FromCpuModel(**cpu);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EngineConfig config;
  config.pool_bytes = 16 << 20;
  config.max_chunk = 64;
  auto engine = Engine::Create(std::move(gpu).value(), std::move(vocab).value(), config);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_EQ((*engine)->model().backend_name(), "cuda");
  for (int i = 0; i < 3; ++i) {
    SessionOptions o;
    o.window = 40;
    o.sampling.temperature = 0.0f;
    auto id = (*engine)->Open(o);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
    ASSERT_TRUE((*engine)->Append(*id, std::vector<int32_t>(10 + 7 * i, 65 + i)).ok());
    GenerateOptions g;
    g.max_tokens = 60;  // past S + W: the ring wraps on the device
    g.ignore_end_of_generation = true;
    ASSERT_TRUE((*engine)
                    ->Generate(*id, g,
                               [&](GenerationEvent&& e) {
                                 std::lock_guard<std::mutex> lock(mu);
                                 if (e.kind == GenerationEvent::Kind::kToken) {
                                   ++counts[e.session];
                                 } else {
                                   done[e.session] = e;
                                   cv.notify_all();
                                 }
                               })
                    .ok());
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done.size() == 3; }));
  for (SessionId id : ids) {
    EXPECT_EQ(done[id].reason, FinishReason::kLength) << done[id].status.ToString();
    EXPECT_EQ(counts[id], 60);
  }
}

TEST(CudaModelTest, BadInputGetsClearErrors) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  SyntheticModelSpec spec;
  spec.dim = 128;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  auto cpu = MakeSyntheticModel(spec);
  ASSERT_TRUE(cpu.ok());
  auto gpu = CudaModel::FromCpuModel(**cpu);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const LlamaConfig& c = (*gpu)->config();
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  // A pool larger than the device: RESOURCE_EXHAUSTED naming the device and the numbers.
  auto huge = (*gpu)->CreatePool(shape, 16, int64_t{1} << 40);  // 1 TiB: within the block limit
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find((*gpu)->device().name), std::string::npos)
      << huge.status().message();
  // A host pool, and a token outside the vocabulary: INVALID_ARGUMENT, nothing committed.
  auto host_pool = (*cpu)->CreatePool(shape, 16, 1 << 20);
  ASSERT_TRUE(host_pool.ok());
  auto host_cache = SessionCache::Create(host_pool->get(), {}, c.context_length);
  ASSERT_TRUE(host_cache.ok());
  std::vector<float> logits(c.vocab_size);
  const std::vector<int32_t> one = {1};
  EXPECT_EQ(StepRunner(**gpu).Run(one, **host_cache, LogitsMode::kLast, logits.data()).code(),
            StatusCode::kInvalidArgument);
  auto pool = (*gpu)->CreatePool(shape, 16, 1 << 20);
  ASSERT_TRUE(pool.ok());
  auto cache = SessionCache::Create(pool->get(), {}, c.context_length);
  ASSERT_TRUE(cache.ok());
  const std::vector<int32_t> oov = {c.vocab_size};
  EXPECT_EQ(StepRunner(**gpu).Run(oov, **cache, LogitsMode::kLast, logits.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*cache)->tokens_seen(), 0);
  EXPECT_TRUE(StepRunner(**gpu).Run(one, **cache, LogitsMode::kLast, logits.data()).ok());
}

}  // namespace
}  // namespace streamd::cuda
