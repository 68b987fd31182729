// Backend selection on any machine: names, auto's resolution, and `cuda` failing clearly
// where it cannot run (a build without CUDA, or no usable device) instead of falling back.
#include "engine/backends/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "engine/core/step_runner.h"

namespace streamd {
namespace {

TEST(BackendTest, NamesRoundTrip) {
  for (BackendKind k : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda}) {
    auto parsed = ParseBackendKind(BackendKindName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  auto bad = ParseBackendKind("gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "backend \"gpu\" is not one of auto, cpu, cuda");
}

TEST(BackendTest, CpuStaysCpuAndAutoExplainsItself) {
  EXPECT_EQ(ResolveBackend(BackendKind::kCpu), BackendKind::kCpu);
  EXPECT_EQ(ResolveBackend(BackendKind::kCuda), BackendKind::kCuda);
  std::string why;
  const BackendKind k = ResolveBackend(BackendKind::kAuto, &why);
  EXPECT_FALSE(why.empty());
  if (!CudaBackendBuilt()) {
    EXPECT_EQ(k, BackendKind::kCpu);
  }
}

SyntheticModelSpec Tiny() {
  SyntheticModelSpec spec;
  spec.dim = 128;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  return spec;
}

TEST(BackendTest, CpuBackendRunsTheModel) {
  auto backend = MakeSyntheticBackend(BackendKind::kCpu, Tiny());
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  EXPECT_EQ((*backend)->backend_name(), "cpu");
  const LlamaConfig& c = (*backend)->config();
  auto pool = (*backend)->CreatePool({c.n_layers, c.n_kv_heads, c.head_dim}, 16, 4 << 20);
  ASSERT_TRUE(pool.ok());
  EXPECT_TRUE((*pool)->host_accessible());
  auto cache = SessionCache::Create(pool->get(), {}, c.context_length);
  ASSERT_TRUE(cache.ok());
  std::vector<float> logits(c.vocab_size);
  const std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_TRUE(StepRunner(**backend).Run(tokens, **cache, LogitsMode::kLast, logits.data()).ok());
}

TEST(BackendTest, CpuBackendRefusesAPoolItCannotRead) {
  auto backend = MakeSyntheticBackend(BackendKind::kCpu, Tiny());
  ASSERT_TRUE(backend.ok());
  const LlamaConfig& c = (*backend)->config();
  // Storage that claims to be device memory (what the CUDA backend's pools are).
  class NotHost final : public PoolStorage {
   public:
    explicit NotHost(int64_t bytes) : v_(static_cast<size_t>(bytes) / 2) {}
    uint16_t* data() override { return v_.data(); }
    bool host_accessible() const override { return false; }

   private:
    std::vector<uint16_t> v_;
  };
  auto pool = BlockPool::Create({c.n_layers, c.n_kv_heads, c.head_dim}, 16, 4 << 20,
                                [](int64_t bytes) -> StatusOr<std::unique_ptr<PoolStorage>> {
                                  return std::unique_ptr<PoolStorage>(new NotHost(bytes));
                                });
  ASSERT_TRUE(pool.ok());
  auto cache = SessionCache::Create(pool->get(), {}, c.context_length);
  ASSERT_TRUE(cache.ok());
  std::vector<float> logits(c.vocab_size);
  const std::vector<int32_t> tokens = {1};
  const Status s = StepRunner(**backend).Run(tokens, **cache, LogitsMode::kLast, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ((*cache)->tokens_seen(), 0);
}

TEST(BackendTest, GreedyForwardIsTheArgmaxOfForward) {
  auto a = MakeSyntheticBackend(BackendKind::kCpu, Tiny());
  auto b = MakeSyntheticBackend(BackendKind::kCpu, Tiny());
  ASSERT_TRUE(a.ok() && b.ok());
  const LlamaConfig& c = (*a)->config();
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  auto pa = (*a)->CreatePool(shape, 16, 4 << 20);
  auto pb = (*b)->CreatePool(shape, 16, 4 << 20);
  ASSERT_TRUE(pa.ok() && pb.ok());
  auto ca = SessionCache::Create(pa->get(), {}, c.context_length);
  auto cb = SessionCache::Create(pb->get(), {}, c.context_length);
  ASSERT_TRUE(ca.ok() && cb.ok());
  std::vector<float> logits(c.vocab_size);
  std::vector<int32_t> ids(1, -1);
  const std::vector<int32_t> tokens = {5, 6, 7};
  const SequenceInput sa{ca->get(), 3, LogitsMode::kLast}, sb{cb->get(), 3, LogitsMode::kLast};
  ASSERT_TRUE(
      StepRunner(**a).Run(tokens, std::span<const SequenceInput>(&sa, 1), logits.data()).ok());
  ASSERT_TRUE(
      StepRunner(**b).RunGreedy(tokens, std::span<const SequenceInput>(&sb, 1), ids.data()).ok());
  EXPECT_EQ(ids[0], std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The CPU backend spreads per-sequence work over its threads: every index runs exactly once, and
// two indices run at the same time (each waits, up to 10 s, for the other to have started).
TEST(BackendTest, CpuRunsHostWorkOnItsThreadsOncePerIndex) {
  auto b = MakeSyntheticBackend(BackendKind::kCpu, Tiny());
  ASSERT_TRUE(b.ok());
  (*b)->set_threads(2);
  std::vector<std::atomic<int>> runs(1000);
  (*b)->RunOnHostThreads(static_cast<int64_t>(runs.size()),
                         [&](int64_t i) { runs[static_cast<size_t>(i)].fetch_add(1); });
  for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << "index " << i;
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  (*b)->RunOnHostThreads(2, [&](int64_t) {
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    if (started.load() == 2) met.fetch_add(1);
  });
  EXPECT_EQ(met.load(), 2) << "the two indices did not run concurrently";
}

TEST(BackendTest, CudaWithoutAUsableGpuIsAClearStartUpError) {
  if (CudaBackendBuilt() && ResolveBackend(BackendKind::kAuto) == BackendKind::kCuda) {
    GTEST_SKIP() << "a CUDA device is present: the GPU tests cover the cuda backend";
  }
  auto model = MakeSyntheticModel(Tiny());
  ASSERT_TRUE(model.ok());
  auto backend = MakeBackend(BackendKind::kCuda, std::move(model).value());
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("backend cuda"), std::string::npos)
      << backend.status().message();
  EXPECT_EQ(backend.status().code(),
            CudaBackendBuilt() ? StatusCode::kUnavailable : StatusCode::kFailedPrecondition);
  auto synthetic = MakeSyntheticBackend(BackendKind::kCuda, Tiny());
  EXPECT_FALSE(synthetic.ok());
}

}  // namespace
}  // namespace streamd
