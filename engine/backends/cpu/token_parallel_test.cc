// Token-parallel decode (llama_token_parallel.cc) against the usual order, where each product's
// rows are cut across the threads, on synthetic models with fresh random weights, over f16 and
// int8 caches, batch sizes that do and do not divide among the threads, and sessions past
// eviction; each step is also checked to have taken the path it was meant to.
//  - 8-bit activations: the same logits bit for bit (the 8-bit kernel's arithmetic per token
//    does not depend on the other tokens of the call);
//  - 12-bit, f16 cache: the same up to the rounding any change of batch brings. Those kernels'
//    sums for a token depend on how many tokens share the call (measured on random Q4_1
//    matrices: up to 4e-4 of an output, relative), as they do when the engine batches sessions
//    differently. (Over an int8 cache such differences move values across a rounding step of
//    the cache now and then: the int8 paths are compared at 8 bits, bit for bit.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/kv_scales.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"

namespace streamd {
namespace {

struct Case {
  bool int8_cache = false;
  int activation_bits = 12;
  int sessions = 16;
  std::string architecture = "llama";  // a family of model_family.h
};

std::shared_ptr<const KvInt8Scales> RandomScales(const LlamaConfig& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(0.005f, 0.05f);
  const size_t n = static_cast<size_t>(c.n_layers) * c.n_kv_heads * c.head_dim;
  std::vector<float> k(n), v(n);
  for (float& x : k) x = d(rng);
  for (float& x : v) x = d(rng);
  auto s = KvInt8Scales::Make(c.n_layers, c.n_kv_heads, c.head_dim, std::move(k), std::move(v));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

// 8-bit activations for every product shape and bucket (MatMulRows8's portable reference where
// the CPU has no fast kernel: the same numbers either way).
void UseEightBitActivations(const LlamaModel& model, CpuTuning* t) {
  for (const WeightMatrix* w : model.ProductMatrices()) {
    const bool listed = std::any_of(t->isa.begin(), t->isa.end(), [&](const ShapeIsa& s) {
      return s.type == w->type && s.rows == w->rows && s.cols == w->cols;
    });
    const bool quantized = w->type == kernels::cpu::WeightType::kQ4_0 ||
                           w->type == kernels::cpu::WeightType::kQ4_1 ||
                           w->type == kernels::cpu::WeightType::kQ8_0;
    if (listed || !quantized) continue;
    for (int b = 0; b < kTokenBuckets; ++b) {
      t->isa.push_back({w->type, w->rows, w->cols, b, kernels::cpu::ActiveIsa(), 8});
    }
  }
}

// max |a - b| / max |b| over one row of logits.
double RelativeError(const float* a, const float* b, size_t n) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return err / scale;
}

void ExpectSameLogits(const Case& tc) {
  SCOPED_TRACE(::testing::Message()
               << "int8 cache " << tc.int8_cache << ", activations " << tc.activation_bits
               << " bits, " << tc.sessions << " sessions, " << tc.architecture);
  std::mt19937 rng(std::random_device{}());
  SyntheticModelSpec spec;
  spec.dim = 128;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 320;
  spec.weight_type = gguf::TensorType::kQ4_1;
  spec.embedding_type = gguf::TensorType::kQ8_0;
  spec.seed = rng();
  spec.architecture = tc.architecture;
  if (tc.architecture == "qwen3") spec.head_dim = 48;  // q_dim 192 != dim 128
  if (tc.architecture == "gemma3") {
    spec.head_dim = 64;  // q_dim 256 != dim 128
    spec.n_layers = 7;   // layers 0-4 and 6 local (sliding_window 16), layer 5 global
  }
  auto made = MakeSyntheticModel(spec);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  LlamaModel& model = **made;
  const LlamaConfig& c = model.config();
  if (tc.int8_cache) {
    ASSERT_TRUE(model.SetInt8KvCache(RandomScales(c, rng)).ok());
  }

  CpuTuning by_rows;
  by_rows.threads = 2;
  if (tc.activation_bits == 8) UseEightBitActivations(model, &by_rows);
  CpuTuning by_tokens = by_rows;
  by_tokens.decode_by_tokens_from = 2;

  auto pool = BlockPool::Create(model.CacheShape(), 8, 64 << 20);
  ASSERT_TRUE(pool.ok());
  const CacheSpec cache_spec{CacheMode::kSink, 4, 28, 64};
  // Twin sessions: a[i] runs every step by rows, b[i] by tokens, on the same inputs.
  std::vector<std::unique_ptr<SessionCache>> a, b;
  std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
  {
    const Status applied = model.ApplyTuning(by_rows);
    ASSERT_TRUE(applied.ok()) << applied.ToString();
  }
  for (int i = 0; i < tc.sessions; ++i) {
    for (auto* side : {&a, &b}) {
      auto cache = SessionCache::Create(pool->get(), cache_spec, c.context_length);
      ASSERT_TRUE(cache.ok());
      side->push_back(std::move(cache).value());
    }
    // Prompts of different lengths, some past eviction (S + W = 32).
    std::vector<int32_t> prompt(1 + rng() % 48);
    for (int32_t& t : prompt) t = token(rng);
    std::vector<float> last(c.vocab_size);
    for (size_t at = 0; at < prompt.size(); at += 64) {
      const size_t n = std::min<size_t>(64, prompt.size() - at);
      for (auto* side : {&a, &b}) {
        ASSERT_TRUE(StepRunner(model)
                        .Run({prompt.data() + at, n}, *side->back(), LogitsMode::kLast, last.data())
                        .ok());
      }
    }
  }
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  for (int step = 0; step < 12; ++step) {
    std::vector<int32_t> tokens(tc.sessions);
    for (int32_t& t : tokens) t = token(rng);
    std::vector<SequenceInput> sa, sb;
    for (int i = 0; i < tc.sessions; ++i) {
      sa.push_back({a[i].get(), 1, LogitsMode::kLast});
      sb.push_back({b[i].get(), 1, LogitsMode::kLast});
    }
    const size_t rows = static_cast<size_t>(tc.sessions);
    std::vector<float> la(rows * vocab), lb(rows * vocab);
    ASSERT_TRUE(model.ApplyTuning(by_rows).ok());
    const int64_t before = model.steps_by_tokens();
    ASSERT_TRUE(StepRunner(model).Run(tokens, sa, la.data()).ok());
    ASSERT_EQ(model.steps_by_tokens(), before) << "step " << step << " ran by tokens";
    ASSERT_TRUE(model.ApplyTuning(by_tokens).ok());
    ASSERT_TRUE(StepRunner(model).Run(tokens, sb, lb.data()).ok());
    ASSERT_EQ(model.steps_by_tokens(), before + 1) << "step " << step << " did not run by tokens";
    if (tc.activation_bits == 8) {
      ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0)
          << "step " << step << ": the logits differ";
    } else {
      for (size_t r = 0; r < rows; ++r) {
        ASSERT_LT(RelativeError(&lb[r * vocab], &la[r * vocab], vocab), 2e-3)
            << "step " << step << ", session " << r;
      }
    }
  }
}

TEST(TokenParallelTest, SameLogitsAsTheRowSplitWithF16Caches) {
  for (int sessions : {2, 5, 16}) ExpectSameLogits({false, 12, sessions});
}

TEST(TokenParallelTest, SameLogitsAsTheRowSplitWithInt8CachesAnd8BitActivations) {
  for (int sessions : {3, 16}) ExpectSameLogits({true, 8, sessions});
  ExpectSameLogits({false, 8, 7});
}

// The families' extras (biases, q/k norms, NEOX RoPE, Gemma's norms, GELU and local layers) run
// in the per-token steps both orders share.
TEST(TokenParallelTest, SameLogitsAsTheRowSplitForEveryFamily) {
  for (const char* family : {"qwen2", "qwen3", "gemma3"}) {
    ExpectSameLogits({false, 12, 5, family});
    ExpectSameLogits({true, 8, 3, family});
  }
}

TEST(TokenParallelTest, OnlyDecodeStepsFromTheThresholdRunByTokens) {
  SyntheticModelSpec spec;
  spec.seed = std::random_device{}();
  auto made = MakeSyntheticModel(spec);
  ASSERT_TRUE(made.ok());
  LlamaModel& model = **made;
  const LlamaConfig& c = model.config();
  CpuTuning t;
  t.threads = 2;
  t.decode_by_tokens_from = 4;
  ASSERT_TRUE(model.ApplyTuning(t).ok());
  auto pool = BlockPool::Create(model.CacheShape(), 8, 16 << 20);
  ASSERT_TRUE(pool.ok());
  std::vector<std::unique_ptr<SessionCache>> caches;
  for (int i = 0; i < 4; ++i) {
    auto cache = SessionCache::Create(pool->get(), {CacheMode::kSink, 4, 28, 64}, c.context_length);
    ASSERT_TRUE(cache.ok());
    caches.push_back(std::move(cache).value());
  }
  std::vector<float> logits(8 * static_cast<size_t>(c.vocab_size));
  const auto step = [&](int sessions, int32_t tokens_each) {
    std::vector<SequenceInput> seqs;
    for (int i = 0; i < sessions; ++i)
      seqs.push_back({caches[i].get(), tokens_each, LogitsMode::kLast});
    const std::vector<int32_t> tokens(static_cast<size_t>(sessions * tokens_each), 7);
    EXPECT_TRUE(StepRunner(model).Run(tokens, seqs, logits.data()).ok());
    return model.steps_by_tokens();
  };
  EXPECT_EQ(step(4, 2), 0) << "a prefill step (2 tokens per session) ran by tokens";
  EXPECT_EQ(step(3, 1), 0) << "3 sessions, below the threshold of 4, ran by tokens";
  EXPECT_EQ(step(4, 1), 1) << "4 sessions, the threshold, did not run by tokens";
  model.set_threads(1);
  EXPECT_EQ(step(4, 1), 1) << "one thread ran by tokens";
}

}  // namespace
}  // namespace streamd
