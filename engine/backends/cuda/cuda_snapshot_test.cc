// Sessions moving between the CPU and CUDA backends (Engine::Capture / Restore, the snapshot
// format, BlockPool::ReadBlocks / WriteBlocks on device memory), against the CPU backend and
// against plain cudaMemcpy of the pool:
//   - block copies of a device pool are bit-exact, touch no other block and refuse bad ids,
//     also in a pool whose layers are larger than the largest pitch cudaMemcpy2D accepts;
//   - K/V images move CPU -> CUDA -> CUDA (another block size) -> CPU bit for bit, land where
//     the kernels read them, and decode on as on the CPU;
//   - a CPU session's snapshot continues on CUDA and back with the same greedy tokens, within
//     the backends' agreement (logits as in cuda_model_test.cc, tokens up to the first
//     near-tie).
// Copies while other sessions decode through CUDA graphs: cuda_snapshot_graphs_test.cc.
// Every test is skipped, with the reason, on a machine without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/backends/cuda/cuda_model.h"
#include "engine/cache/kv_image.h"
#include "engine/core/engine.h"
#include "engine/core/step_runner.h"
#include "engine/model/forwarding_backend.h"
#include "engine/snapshot/model_fingerprint.h"
#include "engine/snapshot/snapshot_format.h"
#include "tests/support/cuda_model_test_util.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/engine_test_util.h"

namespace streamd::cuda {
namespace {

std::vector<uint16_t> RandomBits(std::mt19937& rng, size_t n) {
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = static_cast<uint16_t>(rng());  // NaN and inf patterns included
  return v;
}

// Layer `layer` of block `block`, read straight from device memory with cudaMemcpy (not through
// the pool's copies): the bytes the kernels see. [block_elems] f16 bits.
std::vector<uint16_t> DeviceBlock(BlockPool& pool, int32_t layer, int64_t block) {
  const kernels::KvPoolLayout& l = pool.layout();
  std::vector<uint16_t> out(static_cast<size_t>(l.block_elems()));
  const cudaError_t e = cudaMemcpy(out.data(), pool.layer_data(layer) + block * l.block_elems(),
                                   out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return out;
}

// Whether layer `layer` of block i of a ReadBlocks/WriteBlocks buffer ([ids][n_layers]
// [block_elems]) equals `block`.
bool StagedEquals(const std::vector<uint16_t>& staged, const kernels::KvPoolLayout& l, size_t i,
                  int32_t layer, const std::vector<uint16_t>& block) {
  const size_t at = (i * static_cast<size_t>(l.n_layers) + static_cast<size_t>(layer)) *
                    static_cast<size_t>(l.block_elems());
  return std::equal(block.begin(), block.end(), staged.begin() + static_cast<std::ptrdiff_t>(at));
}

// ReadBlocks/WriteBlocks on device memory: whole blocks of every layer in [ids][layers]
// [block_elems] order, bit for bit, at the addresses the kernels read, nothing else written,
// and a list with an id outside the pool refused before anything is copied.
TEST(CudaSnapshotTest, DevicePoolBlockCopiesAreExactAndTouchNothingElse) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  auto cpu = MakeSyntheticModel(SmallSpec(3));
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  auto gpu = CudaModel::FromCpuModel(**cpu);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const KvShape shape{3, 1, 64};
  auto pool_or = (*gpu)->CreatePool(shape, 7, 40 * BlockPool::BlockBytes(shape, 7));
  ASSERT_TRUE(pool_or.ok()) << pool_or.status().ToString();
  BlockPool& pool = **pool_or;
  ASSERT_EQ(pool.total_blocks(), 40);
  const kernels::KvPoolLayout& l = pool.layout();
  const size_t per_block = static_cast<size_t>(l.n_layers * l.block_elems());
  std::mt19937 rng(11);

  std::vector<int32_t> all(40);
  std::iota(all.begin(), all.end(), 0);
  const std::vector<uint16_t> first = RandomBits(rng, all.size() * per_block);
  ASSERT_TRUE(pool.WriteBlocks(all, first.data()).ok());
  for (int32_t b : {0, 13, 39}) {
    for (int32_t layer = 0; layer < l.n_layers; ++layer) {
      EXPECT_TRUE(StagedEquals(first, l, b, layer, DeviceBlock(pool, layer, b)))
          << "block " << b << " layer " << layer << " is not where the kernels read it";
    }
  }

  // Four blocks rewritten, listed out of the pool's order.
  const std::vector<int32_t> ids = {33, 0, 17, 5};
  const std::vector<uint16_t> second = RandomBits(rng, ids.size() * per_block);
  ASSERT_TRUE(pool.WriteBlocks(ids, second.data()).ok());
  std::vector<uint16_t> got(ids.size() * per_block);
  ASSERT_TRUE(pool.ReadBlocks(ids, got.data()).ok());
  EXPECT_TRUE(got == second);
  std::vector<uint16_t> everything(all.size() * per_block);
  ASSERT_TRUE(pool.ReadBlocks(all, everything.data()).ok());
  for (int32_t b = 0; b < 40; ++b) {
    const auto at = std::find(ids.begin(), ids.end(), b);
    const uint16_t* want = at == ids.end()
                               ? &first[b * per_block]
                               : &second[static_cast<size_t>(at - ids.begin()) * per_block];
    EXPECT_TRUE(std::equal(want, want + per_block, everything.begin() + b * per_block))
        << "block " << b << (at == ids.end() ? " (not written)" : " (written)");
  }
  const std::vector<int32_t> twice = {17, 17};  // one block twice in a list
  std::vector<uint16_t> two(2 * per_block);
  ASSERT_TRUE(pool.ReadBlocks(twice, two.data()).ok());
  EXPECT_TRUE(std::equal(two.begin(), two.begin() + per_block, second.begin() + 2 * per_block));
  EXPECT_TRUE(std::equal(two.begin() + per_block, two.end(), second.begin() + 2 * per_block));

  // Ids outside the pool: INVALID_ARGUMENT, and nothing of the list is written.
  EXPECT_EQ(pool.ReadBlocks(std::vector<int32_t>{40}, got.data()).code(),
            StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad = {5, -1};
  EXPECT_EQ(pool.WriteBlocks(bad, first.data()).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(pool.ReadBlocks(std::vector<int32_t>{5}, got.data()).ok());
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + per_block, second.begin() + 3 * per_block))
      << "a refused list wrote its first block";
}

// A pool whose layers are larger than the largest pitch cudaMemcpy2D accepts
// (cudaDevAttrMaxPitch, 2^31 - 1 bytes on current GPUs), as any pool sized to the device is:
// the copies still move exactly the named blocks, the pool's last block included. Needs about
// twice the max pitch of device memory (4.3 GB).
TEST(CudaSnapshotTest, DevicePoolBlockCopiesPastTheLargest2dPitch) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  int max_pitch = 0;
  ASSERT_CUDA_OK(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, 0));
  auto cpu = MakeSyntheticModel(SmallSpec(2));
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  auto gpu = CudaModel::FromCpuModel(**cpu);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const KvShape shape{2, 1, 64};
  const int64_t block_bytes = BlockPool::BlockBytes(shape, 16);
  const int64_t layer_block_bytes = block_bytes / shape.n_layers;
  const int64_t bytes = (max_pitch / layer_block_bytes + 2) * block_bytes;
  size_t free_b = 0, total_b = 0;
  ASSERT_CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  if (static_cast<double>(bytes) > 0.9 * static_cast<double>(free_b)) {
    GTEST_SKIP() << "needs " << bytes << " bytes of device memory, " << free_b << " are free";
  }
  auto pool_or = (*gpu)->CreatePool(shape, 16, bytes);
  ASSERT_TRUE(pool_or.ok()) << pool_or.status().ToString();
  BlockPool& pool = **pool_or;
  const kernels::KvPoolLayout& l = pool.layout();
  ASSERT_GT(l.layer_elems() * 2, max_pitch) << "the layer pitch must be over the 2D-copy limit";
  const int32_t last = pool.total_blocks() - 1;
  const std::vector<int32_t> ids = {last, 0, last / 2};
  std::mt19937 rng(12);
  const size_t per_block = static_cast<size_t>(l.n_layers * l.block_elems());
  const std::vector<uint16_t> data = RandomBits(rng, ids.size() * per_block);
  const Status written = pool.WriteBlocks(ids, data.data());
  ASSERT_TRUE(written.ok()) << written.ToString();
  std::vector<uint16_t> got(data.size());
  const Status read = pool.ReadBlocks(ids, got.data());
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(StagedEquals(data, l, 0, 1, DeviceBlock(pool, 1, last)));
  EXPECT_TRUE(StagedEquals(data, l, 2, 0, DeviceBlock(pool, 0, last / 2)));
  const std::vector<uint16_t> zeros(static_cast<size_t>(l.block_elems()), 0);
  EXPECT_EQ(DeviceBlock(pool, 1, last - 1), zeros) << "the block before the last was written";
  EXPECT_EQ(DeviceBlock(pool, 0, 1), zeros) << "the block after the first was written";
}

// A cache of `spec` in `pool` that has seen `tokens_seen` tokens and holds `ids` with the K/V
// of `image` (SessionCache::Restore, then WriteCacheKv).
StatusOr<std::unique_ptr<SessionCache>> RestoredCache(BlockPool* pool, const CacheSpec& spec,
                                                      int32_t context, int64_t tokens_seen,
                                                      std::span<const int32_t> ids,
                                                      const KvImage& image) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SessionCache> cache,
                           SessionCache::Create(pool, spec, context));
  STREAMD_RETURN_IF_ERROR(cache->Restore(tokens_seen, ids));
  STREAMD_RETURN_IF_ERROR(WriteCacheKv(*cache, image));
  return cache;
}

// Every cached position's K and V of the last layer, read straight from device memory at the
// block and slot the cache's table names for it, equal the image's.
void ExpectDeviceHolds(const SessionCache& cache, const KvImage& image) {
  BlockPool& pool = *cache.pool();
  const kernels::KvPoolLayout& l = pool.layout();
  const kernels::SinkWindowTable table = cache.table();
  const CachedSpan span = cache.cached_span();
  const int32_t layer = l.n_layers - 1;
  std::vector<uint16_t> row(static_cast<size_t>(l.head_dim));
  for (int64_t i = 0; i < span.size(); ++i) {
    int32_t block = 0, slot = 0;
    table.Locate(span.Position(i), &block, &slot);
    for (int32_t kv = 0; kv < 2; ++kv) {
      for (int32_t h = 0; h < l.n_kv_heads; ++h) {
        ASSERT_CUDA_OK(cudaMemcpy(row.data(), pool.layer_data(layer) + l.Offset(block, kv, h, slot),
                                  row.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        ASSERT_TRUE(
            std::equal(row.begin(), row.end(), image.data.begin() + image.Offset(layer, kv, h, i)))
            << "cache index " << i << " (position " << span.Position(i) << "), kv " << kv
            << ", head " << h << ", block " << block << " slot " << slot;
      }
    }
  }
}

// ReadCacheKv / WriteCacheKv across backends: K/V the CPU backend computed (a sink session past
// its window, so its window starts at a later logical block, and a dense one) go into a CUDA
// pool, from there into a CUDA pool of another block size and back into a CPU pool, bit for
// bit; each device copy sits where the kernels read it; and both CUDA caches decode on from it
// as the CPU does from the original (f32 model: relative L2 < 1e-2, as in cuda_model_test.cc).
TEST(CudaSnapshotTest, KvImagesMoveBetweenCpuAndCudaPoolsBitForBit) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  SyntheticModelSpec spec;
  spec.n_layers = 4;
  spec.dim = 256;
  spec.n_heads = 4;  // head_dim 64
  spec.n_kv_heads = 2;
  spec.ffn_dim = 512;
  spec.vocab_size = 1000;
  auto cpu = MakeSyntheticModel(spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  (*cpu)->set_threads(2);
  auto gpu = CudaModel::FromCpuModel(**cpu);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const LlamaConfig& c = (*cpu)->config();
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  std::mt19937 rng(5);
  for (const auto& [asked, prompt] : {std::pair{CacheSpec{CacheMode::kSink, 4, 37, 64}, 150},
                                      std::pair{CacheSpec{CacheMode::kDense, 0, 90, 64}, 70}}) {
    SCOPED_TRACE(std::string(CacheModeName(asked.mode)));
    const CacheSpec cs = SessionCache::Effective(asked, c.context_length);
    const auto budget = [&](int32_t b) {
      return (SessionCache::PeakBlocks(cs, b) + 4) * BlockPool::BlockBytes(shape, b);
    };
    auto cpu16 = (*cpu)->CreatePool(shape, 16, budget(16));
    auto gpu16 = (*gpu)->CreatePool(shape, 16, budget(16));
    auto gpu7 = (*gpu)->CreatePool(shape, 7, budget(7));
    auto cpu5 = (*cpu)->CreatePool(shape, 5, budget(5));
    ASSERT_TRUE(cpu16.ok() && gpu16.ok() && gpu7.ok() && cpu5.ok());
    // Other block numbers in each pool than in the one before it.
    (void)(*gpu16)->Allocate();
    for (int i = 0; i < 3; ++i) (void)(*gpu7)->Allocate();
    (void)(*cpu5)->Allocate();

    auto source = SessionCache::Create(cpu16->get(), cs, c.context_length);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    Prefill(**cpu, **source, RandomTokens(rng, prompt, c.vocab_size));
    if (HasFatalFailure()) return;
    if (cs.mode == CacheMode::kSink) {
      ASSERT_GT((*source)->table().first_window_block, 0) << "the window has not slid";
    }
    auto image = ReadCacheKv(**source);
    ASSERT_TRUE(image.ok()) << image.status().ToString();
    const int64_t seen = (*source)->tokens_seen();
    const std::vector<int32_t> ids = (*source)->cached_ids();

    auto on16 = RestoredCache(gpu16->get(), cs, c.context_length, seen, ids, *image);
    ASSERT_TRUE(on16.ok()) << on16.status().ToString();
    auto from16 = ReadCacheKv(**on16);
    ASSERT_TRUE(from16.ok()) << from16.status().ToString();
    EXPECT_TRUE(*from16 == *image) << "CPU -> CUDA changed the K/V";
    auto on7 = RestoredCache(gpu7->get(), cs, c.context_length, seen, ids, *from16);
    ASSERT_TRUE(on7.ok()) << on7.status().ToString();
    auto from7 = ReadCacheKv(**on7);
    ASSERT_TRUE(from7.ok()) << from7.status().ToString();
    EXPECT_TRUE(*from7 == *image) << "CUDA (B = 16) -> CUDA (B = 7) changed the K/V";
    auto on5 = RestoredCache(cpu5->get(), cs, c.context_length, seen, ids, *from7);
    ASSERT_TRUE(on5.ok()) << on5.status().ToString();
    auto from5 = ReadCacheKv(**on5);
    ASSERT_TRUE(from5.ok()) << from5.status().ToString();
    EXPECT_TRUE(*from5 == *image) << "CUDA -> CPU (B = 5) changed the K/V";
    ExpectDeviceHolds(**on16, *image);
    ExpectDeviceHolds(**on7, *image);
    if (HasFatalFailure()) return;

    const size_t vocab = static_cast<size_t>(c.vocab_size);
    std::vector<float> want(vocab), got16(vocab, NAN), got7(vocab, NAN);
    for (int32_t step = 0; step < 3; ++step) {
      const std::vector<int32_t> next = RandomTokens(rng, 1, c.vocab_size);
      ASSERT_TRUE(StepRunner(**cpu).Run(next, **source, LogitsMode::kLast, want.data()).ok());
      ASSERT_TRUE(StepRunner(**gpu).Run(next, **on16, LogitsMode::kLast, got16.data()).ok());
      ASSERT_TRUE(StepRunner(**gpu).Run(next, **on7, LogitsMode::kLast, got7.data()).ok());
      EXPECT_LT(RelativeL2(got16.data(), want.data(), c.vocab_size), 1e-2) << "step " << step;
      EXPECT_LT(RelativeL2(got7.data(), want.data(), c.vocab_size), 1e-2) << "step " << step;
    }
  }
}

// The model of the snapshot tests: the real default model when STREAMD_MODEL is set, else the
// synthetic one of SmolLM2-135M's shape, with a vocabulary so that it can serve an engine.
StatusOr<std::unique_ptr<LlamaModel>> SnapshotModel() {
  const char* path = std::getenv("STREAMD_MODEL");
  if (path != nullptr && *path != '\0') return LlamaModel::Load(path);
  SyntheticModelSpec spec = SmolLm2Shape();
  spec.with_vocab = true;
  return MakeSyntheticModel(spec);
}

// An engine on `model` with the vocabulary of `vocab_of` (64 MiB pool, chunks of 64).
std::unique_ptr<Engine> EngineOn(std::unique_ptr<ModelBackend> model, const LlamaModel& vocab_of) {
  auto vocab = tokenizer::Tokenizer::FromGguf(vocab_of.file());
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  if (!vocab.ok()) return nullptr;
  EngineConfig config;
  config.pool_bytes = 64 << 20;
  config.max_chunk = 64;
  config.threads = 4;
  auto engine = Engine::Create(std::move(model), std::move(vocab).value(), config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// The next n greedy tokens of a session (one generation).
std::vector<int32_t> GenerateGreedy(Engine& engine, streamd::testing::Collector& events,
                                    SessionId id, int32_t n) {
  const size_t before = events.Tokens(id).size();
  const Status started = engine.Generate(id, streamd::testing::UpTo(n), events.Sink());
  EXPECT_TRUE(started.ok()) << started.ToString();
  if (!started.ok()) return {};
  const GenerationEvent done = events.WaitDone(id);
  EXPECT_EQ(done.reason, FinishReason::kLength) << done.status.ToString();
  const std::vector<int32_t> all = events.Tokens(id);
  return {all.begin() + static_cast<std::ptrdiff_t>(before), all.end()};
}

// A state through the snapshot format (encoded, decoded), which must give it back unchanged.
SessionState ThroughSnapshot(const SessionState& st, const SnapshotContext& context) {
  const std::vector<uint8_t> bytes = EncodeSnapshot(st, context);
  auto decoded = DecodeSnapshot(bytes, context);
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  if (!decoded.ok()) return st;
  EXPECT_TRUE(*decoded == st) << "the snapshot format changed the state";
  return std::move(decoded).value();
}

// A capture right after a restore returns the state it was given (but for the capture time):
// the K/V went into the engine's pool and came out bit for bit.
void ExpectCapturedAsRestored(Engine& engine, const SessionState& st) {
  auto back = engine.Capture(st.id);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  back->saved_unix_ms = st.saved_unix_ms;
  EXPECT_TRUE(back->kv == st.kv) << "the K/V changed on the way through the "
                                 << engine.model().backend_name() << " pool";
  EXPECT_TRUE(*back == st) << "the state changed on the way through the "
                           << engine.model().backend_name() << " engine";
}

// Both backends outside any engine, each with a pool: the reference the continuations are
// judged by.
struct Reference {
  LlamaModel* cpu = nullptr;
  CudaModel* gpu = nullptr;
  BlockPool* cpu_pool = nullptr;
  BlockPool* gpu_pool = nullptr;
};

// The greedy continuations of one state on the two engines, judged by the agreement rule of the
// CPU-vs-CUDA tests (cuda_model_test.cc) extended to free-running tokens. The state is restored
// into a cache of each backend of `ref` and both are fed the CPU continuation, so row j of each
// holds that backend's logits for token j in the same context:
//   - the rows agree within `tolerance` (relative L2), as in cuda_model_test.cc's comparisons;
//   - token j is a near-tie when the CPU row's best logit leads its second by at most twice the
//     largest difference between the two rows (only then can the backends order the top two
//     differently); before the first near-tie the continuations are identical, after it they
//     may part;
//   - while they have not parted, the CUDA engine's token is exactly the argmax of the CUDA row
//     (same kernels, same K/V bits, same context), and the CPU engine's that of the CPU row
//     unless it is a near-tie.
void ExpectSameContinuation(const Reference& ref, const SessionState& st,
                            const std::vector<int32_t>& cpu_tokens,
                            const std::vector<int32_t>& gpu_tokens, double tolerance,
                            const char* what) {
  ASSERT_EQ(cpu_tokens.size(), gpu_tokens.size()) << what;
  ASSERT_FALSE(st.pending.empty()) << what;
  const LlamaConfig& c = ref.cpu->config();
  const CacheSpec spec{st.mode, st.sinks, st.window, 64};
  auto a =
      RestoredCache(ref.cpu_pool, spec, c.context_length, st.tokens_seen, st.cached_tokens, st.kv);
  auto b =
      RestoredCache(ref.gpu_pool, spec, c.context_length, st.tokens_seen, st.cached_tokens, st.kv);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const int32_t vocab = c.vocab_size;
  std::vector<float> x(static_cast<size_t>(vocab)), y(static_cast<size_t>(vocab));
  std::vector<int32_t> input = st.pending;  // first what the session holds back, then its tokens
  size_t near_tie = cpu_tokens.size();      // index of the first near-tie
  double worst = 0, tie_margin = 0, tie_bound = 0;
  bool parted = false;
  for (size_t j = 0; j < cpu_tokens.size(); ++j) {
    ASSERT_TRUE(StepRunner(*ref.cpu).Run(input, **a, LogitsMode::kLast, x.data()).ok());
    ASSERT_TRUE(StepRunner(*ref.gpu).Run(input, **b, LogitsMode::kLast, y.data()).ok());
    const double rel = RelativeL2(y.data(), x.data(), vocab);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, tolerance) << what << ": logits of token " << j;
    const int32_t best = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
    const int32_t gpu_best = static_cast<int32_t>(std::max_element(y.begin(), y.end()) - y.begin());
    double second = -INFINITY, err = 0;
    for (int32_t i = 0; i < vocab; ++i) {
      if (i != best) second = std::max(second, static_cast<double>(x[i]));
      err = std::max(err, std::fabs(static_cast<double>(x[i]) - y[i]));
    }
    const bool tie = x[best] - second <= 2 * err;
    if (tie && near_tie == cpu_tokens.size()) {
      near_tie = j;
      tie_margin = x[best] - second;
      tie_bound = 2 * err;
    }
    if (!tie) {
      EXPECT_EQ(cpu_tokens[j], best)
          << what << ": the CPU engine's token " << j << " is not the argmax of the CPU row";
    }
    if (!parted) {
      EXPECT_EQ(gpu_tokens[j], gpu_best) << what << ": the CUDA engine's token " << j
                                         << " is not the argmax of the CUDA row of its context";
    }
    if (j < near_tie) {
      EXPECT_EQ(gpu_tokens[j], cpu_tokens[j])
          << what << ": token " << j << " differs before any near-tie";
    }
    parted = parted || gpu_tokens[j] != cpu_tokens[j];
    input = {cpu_tokens[j]};
  }
  if (near_tie < cpu_tokens.size()) {
    std::printf(
        "%s: %zu greedy tokens; identical before the first near-tie, token %zu (lead %.3g"
        " <= %.3g); %s; worst relative L2 of a logits row %.3g\n",
        what, cpu_tokens.size(), near_tie, tie_margin, tie_bound,
        parted ? "parted after it" : "identical after it too", worst);
  } else {
    std::printf("%s: %zu greedy tokens, no near-tie, %s; worst relative L2 of a logits row %.3g\n",
                what, cpu_tokens.size(), parted ? "PARTED" : "identical", worst);
  }
}

// A session prefilled and started on the CPU backend, captured and sent through the snapshot
// format, restored into an engine on the CUDA backend and continued there; then captured on
// CUDA and restored into the CPU engine in place of the original. Each move is bit-exact (a
// capture right after a restore gives back the state), and after each the two engines' greedy
// continuations of the state agree by ExpectSameContinuation's rule. The real default model
// when STREAMD_MODEL is set, else the synthetic one of its shape.
TEST(CudaSnapshotTest, CpuSnapshotContinuesOnCudaAndBack) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  // Before the engines: their scheduler threads may call the sinks until they are joined.
  streamd::testing::Collector cpu_events, gpu_events;
  auto engine_model = SnapshotModel();
  auto ref_model = SnapshotModel();
  ASSERT_TRUE(engine_model.ok()) << engine_model.status().ToString();
  ASSERT_TRUE(ref_model.ok()) << ref_model.status().ToString();
  LlamaModel& ref_cpu = **ref_model;
  ref_cpu.set_threads(4);
  const LlamaConfig c = ref_cpu.config();
  auto engine_gpu = CudaModel::FromCpuModel(**engine_model);
  ASSERT_TRUE(engine_gpu.ok()) << engine_gpu.status().ToString();
  auto ref_gpu = CudaModel::FromCpuModel(ref_cpu);
  ASSERT_TRUE(ref_gpu.ok()) << ref_gpu.status().ToString();
  SnapshotContext context;
  context.model_fingerprint = ModelFingerprint(ref_cpu.file());
  context.model_name = c.name;
  context.n_layers = c.n_layers;
  context.n_kv_heads = c.n_kv_heads;
  context.head_dim = c.head_dim;
  context.block_size = 16;
  context.streamd_version = "cuda_model_test";
  std::unique_ptr<Engine> cpu = EngineOn(std::move(engine_model).value(), ref_cpu);
  std::unique_ptr<Engine> gpu = EngineOn(std::move(engine_gpu).value(), ref_cpu);
  ASSERT_TRUE(cpu != nullptr && gpu != nullptr);
  ASSERT_EQ(cpu->model().backend_name(), "cpu");
  ASSERT_EQ(gpu->model().backend_name(), "cuda");
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  auto cpu_pool = ref_cpu.CreatePool(shape, 16, 16 << 20);
  auto gpu_pool = (*ref_gpu)->CreatePool(shape, 16, 16 << 20);
  ASSERT_TRUE(cpu_pool.ok() && gpu_pool.ok());
  const Reference ref{&ref_cpu, ref_gpu->get(), cpu_pool->get(), gpu_pool->get()};

  auto id = cpu->Open(streamd::testing::Greedy(60));  // S + W = 64, far below the prompt
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::mt19937 rng(17);
  std::vector<int32_t> prompt(150);
  for (int32_t& t : prompt) t = 300 + static_cast<int32_t>(rng() % 1000);
  ASSERT_TRUE(cpu->Append(*id, prompt).ok());
  GenerateGreedy(*cpu, cpu_events, *id, 8);

  // CPU -> CUDA.
  auto from_cpu = cpu->Capture(*id);
  ASSERT_TRUE(from_cpu.ok()) << from_cpu.status().ToString();
  EXPECT_EQ(from_cpu->pending.size(), 1u) << "an idle session keeps its last token pending";
  EXPECT_GT(from_cpu->tokens_seen, 64) << "the window must have slid";
  const SessionState moved = ThroughSnapshot(*from_cpu, context);
  const Status restored = gpu->Restore(moved);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  ExpectCapturedAsRestored(*gpu, moved);
  const std::vector<int32_t> c1 = GenerateGreedy(*cpu, cpu_events, *id, 40);
  const std::vector<int32_t> g1 = GenerateGreedy(*gpu, gpu_events, *id, 40);
  ExpectSameContinuation(ref, moved, c1, g1, 5e-2, "CPU -> CUDA");

  // CUDA -> CPU: the CUDA session, 40 tokens on, replaces the CPU one.
  auto from_gpu = gpu->Capture(*id);
  ASSERT_TRUE(from_gpu.ok()) << from_gpu.status().ToString();
  EXPECT_EQ(from_gpu->tokens_seen + static_cast<int64_t>(from_gpu->pending.size()),
            moved.tokens_seen + static_cast<int64_t>(moved.pending.size()) + 40);
  const SessionState back = ThroughSnapshot(*from_gpu, context);
  ASSERT_TRUE(cpu->Close(*id).ok());
  const Status restored_back = cpu->Restore(back);
  ASSERT_TRUE(restored_back.ok()) << restored_back.ToString();
  ExpectCapturedAsRestored(*cpu, back);
  const std::vector<int32_t> c2 = GenerateGreedy(*cpu, cpu_events, *id, 30);
  const std::vector<int32_t> g2 = GenerateGreedy(*gpu, gpu_events, *id, 30);
  ExpectSameContinuation(ref, back, c2, g2, 5e-2, "CUDA -> CPU");
}

// A backend that can hold the scheduler inside its next step: the test lines up work meanwhile,
// which the following step then takes all at once.

}  // namespace
}  // namespace streamd::cuda
