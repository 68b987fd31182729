// The sink + window cache in the forward pass, on synthetic models (random weights):
//  - against PlainReferenceLlama, which for every token rebuilds the cache explicitly (the
//    visible sinks, then the token's window) with positions 0 .. S + W - 1 and recomputes
//    attention: same logits, for sessions of more than 10 W tokens, W not a multiple of the
//    block size;
//  - prefilling in chunks of any size equals feeding token by token, across eviction;
//  - sessions in one batch do not see each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/plain_reference_llama.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "tests/support/uniform_tokens.h"

namespace streamd {
namespace {

using testing::UniformTokens;

struct Fixture {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<BlockPool> pool;
};

Fixture MakeFixture(gguf::TensorType weights, int32_t block_size, uint64_t seed) {
  SyntheticModelSpec spec;
  spec.weight_type = weights;
  spec.seed = seed;
  Fixture f;
  auto m = MakeSyntheticModel(spec);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  f.model = std::move(m).value();
  f.model->set_threads(2);
  const LlamaConfig& c = f.model->config();
  auto p = BlockPool::Create({c.n_layers, c.n_kv_heads, c.head_dim}, block_size, 64 << 20);
  EXPECT_TRUE(p.ok());
  f.pool = std::move(p).value();
  return f;
}

// max |a - b| / max |b|
double RelativeError(const float* a, const float* b, int64_t n) {
  double err = 0.0, scale = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return err / scale;
}

// Streams `tokens` through one session in random chunks; returns every token's logits.
std::vector<float> Stream(Fixture& f, CacheSpec spec, const std::vector<int32_t>& tokens,
                          uint64_t chunk_seed) {
  const int32_t vocab = f.model->config().vocab_size;
  auto cache = SessionCache::Create(f.pool.get(), spec, f.model->config().context_length);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  std::vector<float> logits(tokens.size() * vocab);
  std::mt19937 rng(chunk_seed);
  std::uniform_int_distribution<int32_t> chunk(1, spec.max_chunk);
  for (size_t i = 0; i < tokens.size();) {
    const size_t n = std::min<size_t>(chunk_seed == 0 ? 1 : chunk(rng), tokens.size() - i);
    Status s = StepRunner(*f.model).Run({tokens.data() + i, n}, **cache, LogitsMode::kAll,
                                        &logits[i * vocab]);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_LE((*cache)->blocks_held(), (*cache)->bound_blocks());  // at rest: the bound
    i += n;
  }
  return logits;
}

struct RefCase {
  CacheMode mode;
  int32_t sinks, window, block, chunk;
  gguf::TensorType weights;
};

class StreamingReferenceTest : public ::testing::TestWithParam<RefCase> {};

TEST_P(StreamingReferenceTest, MatchesExplicitlyRebuiltCache) {
  const RefCase rc = GetParam();
  Fixture f = MakeFixture(rc.weights, rc.block, 7 + rc.window);
  const CacheSpec spec{rc.mode, rc.sinks, rc.window, rc.chunk};
  const int32_t vocab = f.model->config().vocab_size;
  const int64_t n = 10LL * rc.window + 17;
  const std::vector<int32_t> tokens = UniformTokens(n, vocab, 99 + rc.window);
  const std::vector<float> streamed = Stream(f, spec, tokens, /*chunk_seed=*/5);
  const CacheSpec eff = SessionCache::Effective(spec, f.model->config().context_length);
  PlainReferenceLlama reference(*f.model, eff.sinks, eff.window);
  double worst = 0.0;
  std::vector<float> ref(vocab);
  for (int64_t p = 0; p < n; ++p) {
    const std::vector<double> r = reference.Step(tokens[p]);
    std::copy(r.begin(), r.end(), ref.begin());
    worst = std::max(worst, RelativeError(&streamed[p * vocab], ref.data(), vocab));
  }
  std::printf("worst relative logit error over %lld tokens: %.2e\n", static_cast<long long>(n),
              worst);
  // f32 weights: only f32 rounding and the f16 rounding of rotated (engine) vs un-rotated
  // (reference) keys differ. Q4_1 weights: the engine also quantizes activations.
  EXPECT_LT(worst, rc.weights == gguf::TensorType::kF32 ? 2e-3 : 3e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Caches, StreamingReferenceTest,
    ::testing::Values(RefCase{CacheMode::kSink, 4, 37, 16, 23, gguf::TensorType::kF32},
                      RefCase{CacheMode::kSink, 4, 37, 7, 1, gguf::TensorType::kF32},
                      RefCase{CacheMode::kSink, 3, 21, 1, 9, gguf::TensorType::kF32},
                      RefCase{CacheMode::kWindow, 0, 29, 16, 40, gguf::TensorType::kF32},
                      RefCase{CacheMode::kSink, 4, 45, 16, 16, gguf::TensorType::kQ4_1}));

class ChunkedPrefillTest : public ::testing::TestWithParam<gguf::TensorType> {};

TEST_P(ChunkedPrefillTest, EqualsTokenByTokenAcrossEviction) {
  Fixture f = MakeFixture(GetParam(), 16, 3);
  const int32_t vocab = f.model->config().vocab_size;
  const std::vector<int32_t> tokens = UniformTokens(300, vocab, 11);
  const CacheSpec one{CacheMode::kSink, 4, 50, 1};
  const std::vector<float> reference = Stream(f, one, tokens, /*chunk_seed=*/0);
  for (int32_t max_chunk : {7, 64, 300}) {
    const CacheSpec spec{CacheMode::kSink, 4, 50, max_chunk};
    const std::vector<float> chunked = Stream(f, spec, tokens, /*chunk_seed=*/max_chunk);
    // Chunks and single tokens take different kernels (f32 sums in another order). Float weights
    // differ by that rounding (and the f16 K/V roundings it flips). Quantized weights also
    // quantize activations to 12 bits, and a rounding-level change in a layer's input can move a
    // value by one step (2^-12 of its block's maximum) in the next: measured ~5e-4 here, where a
    // wrong position or cache entry gives errors of order 1e-1.
    const bool quantized = GetParam() != gguf::TensorType::kF32 &&
                           GetParam() != gguf::TensorType::kF16 &&
                           GetParam() != gguf::TensorType::kBF16;
    EXPECT_LT(RelativeError(chunked.data(), reference.data(), chunked.size()),
              quantized ? 2e-3 : 1e-4)
        << "max chunk " << max_chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, ChunkedPrefillTest,
                         ::testing::Values(gguf::TensorType::kF32, gguf::TensorType::kF16,
                                           gguf::TensorType::kQ8_0, gguf::TensorType::kQ4_0,
                                           gguf::TensorType::kQ4_1));

// 16 sessions of different lengths and phases in one batch per step (some prefilling in
// chunks, some decoding, some idle) compute the same logits as each session alone.
TEST(StreamingTest, SessionsInOneBatchAreIndependent) {
  constexpr int kSessions = 16;
  Fixture f = MakeFixture(gguf::TensorType::kF32, 16, 4);
  const int32_t vocab = f.model->config().vocab_size;
  const int ctx = f.model->config().context_length;
  const CacheSpec spec{CacheMode::kSink, 4, 30, 32};
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> alone;
  for (int i = 0; i < kSessions; ++i) {
    tokens.push_back(UniformTokens(10 + 13 * i, vocab, 50 + i));
    alone.push_back(Stream(f, {CacheMode::kSink, 4, 30, 1}, tokens.back(), 0));
  }
  std::vector<std::unique_ptr<SessionCache>> caches;
  for (int i = 0; i < kSessions; ++i) {
    auto c = SessionCache::Create(f.pool.get(), spec, ctx);
    ASSERT_TRUE(c.ok());
    caches.push_back(std::move(c).value());
  }
  std::vector<size_t> next(kSessions, 0);
  std::mt19937 rng(8);
  std::vector<float> logits(kSessions * 32 * vocab);
  double worst = 0.0;
  for (int step = 0; step < 1000; ++step) {
    std::vector<int32_t> batch;
    std::vector<SequenceInput> seqs;
    std::vector<int> who;
    for (int i = 0; i < kSessions; ++i) {
      if (next[i] == tokens[i].size() || rng() % 4 == 0) continue;  // done, or idle this step
      // Session i starts after step i (phases differ); then chunks of 1 (decode) to 32.
      if (step < i) continue;
      const size_t n = std::min<size_t>(1 + rng() % (i % 2 ? 1 : 32), tokens[i].size() - next[i]);
      batch.insert(batch.end(), tokens[i].begin() + next[i], tokens[i].begin() + next[i] + n);
      seqs.push_back({caches[i].get(), static_cast<int32_t>(n), LogitsMode::kAll});
      who.push_back(i);
    }
    if (seqs.empty()) {
      bool all_done = true;
      for (int i = 0; i < kSessions; ++i) all_done = all_done && next[i] == tokens[i].size();
      if (all_done) break;
      continue;
    }
    ASSERT_TRUE(StepRunner(*f.model).Run(batch, seqs, logits.data()).ok());
    size_t row = 0;
    for (size_t k = 0; k < seqs.size(); ++k) {
      const int i = who[k];
      for (int32_t j = 0; j < seqs[k].n_tokens; ++j, ++row) {
        worst = std::max(
            worst, RelativeError(&logits[row * vocab], &alone[i][(next[i] + j) * vocab], vocab));
      }
      next[i] += seqs[k].n_tokens;
    }
  }
  for (int i = 0; i < kSessions; ++i) EXPECT_EQ(next[i], tokens[i].size());
  EXPECT_LT(worst, 1e-4);
}

TEST(StreamingTest, RejectsBadBatchesWithoutAppending) {
  Fixture f = MakeFixture(gguf::TensorType::kF32, 16, 5);
  auto cache = SessionCache::Create(f.pool.get(), {CacheMode::kSink, 4, 30, 8}, 4096);
  ASSERT_TRUE(cache.ok());
  std::vector<float> logits(f.model->config().vocab_size * 9);
  const int32_t oov = f.model->config().vocab_size;
  Status s = StepRunner(*f.model).Run({&oov, 1}, **cache, LogitsMode::kLast, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary [0, 256)"), std::string::npos);
  std::vector<int32_t> nine(9, 1);
  s = StepRunner(*f.model).Run(nine, **cache, LogitsMode::kLast, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("chunk limit of 8"), std::string::npos);
  EXPECT_EQ(StepRunner(*f.model).Run({}, **cache, LogitsMode::kLast, logits.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*cache)->tokens_seen(), 0);
}

}  // namespace
}  // namespace streamd
