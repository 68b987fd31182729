// A cache read out as a KvImage and restored into another pool of another block size continues
// as the original: the next tokens' logits agree (the summation order over keys follows the
// blocks, so the two agree to float rounding, not bit for bit), across eviction and with the
// chunk that restored sessions resume with.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/kv_image.h"
#include "engine/core/step_runner.h"

namespace streamd {
namespace {

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

TEST(RestoredCacheTest, ContinuesAsTheOriginalInAnyBlockSize) {
  SyntheticModelSpec spec;
  spec.weight_type = gguf::TensorType::kQ8_0;
  auto model_or = MakeSyntheticModel(spec);
  ASSERT_TRUE(model_or.ok()) << model_or.status().ToString();
  LlamaModel& model = **model_or;
  model.set_threads(2);
  const LlamaConfig& c = model.config();
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  std::random_device rd;
  const uint32_t seed = rd();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
  const int32_t vocab = c.vocab_size;
  for (const CacheSpec cs :
       {CacheSpec{CacheMode::kSink, 4, 60, 32}, CacheSpec{CacheMode::kDense, 0, 0, 32}}) {
    SCOPED_TRACE(CacheModeName(cs.mode));
    auto pool_a = BlockPool::Create(shape, 16, 16 << 20);
    auto pool_b = BlockPool::Create(shape, 7, 16 << 20);
    ASSERT_TRUE(pool_a.ok() && pool_b.ok());
    (void)(*pool_b)->Allocate();  // different block numbering too
    auto a = SessionCache::Create(pool_a->get(), cs, c.context_length);
    ASSERT_TRUE(a.ok());
    std::vector<int32_t> history(cs.mode == CacheMode::kDense ? 150 : 400);
    for (int32_t& t : history) t = token(rng);
    std::vector<float> logits(static_cast<size_t>(vocab) * 32);
    for (size_t i = 0; i < history.size(); i += 32) {
      const size_t n = std::min<size_t>(32, history.size() - i);
      ASSERT_TRUE(StepRunner(model)
                      .Run({history.data() + i, n}, **a, LogitsMode::kLast, logits.data())
                      .ok());
    }
    auto image = ReadCacheKv(**a);
    ASSERT_TRUE(image.ok());
    auto b = SessionCache::Create(pool_b->get(), (*a)->spec(), c.context_length);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE((*b)->Restore((*a)->tokens_seen(), (*a)->cached_ids()).ok());
    ASSERT_TRUE(WriteCacheKv(**b, *image).ok());
    // The next 20 tokens, one chunk of 20 then single tokens, on both caches.
    std::vector<int32_t> next(40);
    for (int32_t& t : next) t = token(rng);
    std::vector<float> la(static_cast<size_t>(vocab) * 20), lb(la.size());
    ASSERT_TRUE(StepRunner(model).Run({next.data(), 20}, **a, LogitsMode::kAll, la.data()).ok());
    ASSERT_TRUE(StepRunner(model).Run({next.data(), 20}, **b, LogitsMode::kAll, lb.data()).ok());
    for (size_t i = 20; i < next.size(); ++i) {
      std::vector<float> ra(vocab), rb(vocab);
      ASSERT_TRUE(StepRunner(model).Run({&next[i], 1}, **a, LogitsMode::kLast, ra.data()).ok());
      ASSERT_TRUE(StepRunner(model).Run({&next[i], 1}, **b, LogitsMode::kLast, rb.data()).ok());
      la.insert(la.end(), ra.begin(), ra.end());
      lb.insert(lb.end(), rb.begin(), rb.end());
    }
    double err = 0;
    for (size_t i = 0; i < la.size(); ++i) err = std::max(err, double{std::fabs(la[i] - lb[i])});
    EXPECT_LE(err, 1e-4 * MaxAbs(la)) << "max |a - b| = " << err;
    EXPECT_EQ((*a)->cached_ids(), (*b)->cached_ids());
  }
}

}  // namespace
}  // namespace streamd
