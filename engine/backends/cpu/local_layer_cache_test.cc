// Gemma 3's local layers in caches of their own (session_cache.h, "Local layers"): a session whose
// local layers keep only their native window reads, in every layer, the same keys as a session
// whose layers all share the sink + window cache, so the same streams give the same logits bit
// for bit. Several sessions of different shapes step together in one batch (prefill chunks and
// decode steps, so both of the CPU model's execution orders run), and part way through their
// caches are rewound, forked and restored from images taken on the other layout: an image of
// split caches restores into shared ones and back, and the logits stay the same.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/kv_image.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "tests/support/uniform_tokens.h"

namespace streamd {
namespace {

constexpr int32_t kBlock = 4;
const int32_t kSpan = SmallGemma3Shape().sliding_window;  // the local layers' native window

std::unique_ptr<LlamaModel> GemmaModel() {
  SyntheticModelSpec spec = SmallGemma3Shape();  // layers 0-4 and 6 local, a window of 13
  spec.context_length = 256;                     // a dense cache of 64 blocks
  spec.weight_type = gguf::TensorType::kQ4_1;
  spec.seed = std::random_device{}();
  auto model = MakeSyntheticModel(spec);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  (*model)->set_threads(2);
  return std::move(*model);
}

std::unique_ptr<BlockPool> Pool(const LlamaConfig& c, int32_t layers) {
  const KvShape shape{layers, c.n_kv_heads, c.head_dim};
  auto pool = BlockPool::Create(shape, kBlock, 400 * BlockPool::BlockBytes(shape, kBlock));
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(*pool);
}

// The same sessions twice: every layer in one pool, and the local layers in a pool of their own.
struct Layouts {
  std::shared_ptr<const LayerSplit> split;
  std::unique_ptr<BlockPool> shared, main, local;
  std::vector<std::unique_ptr<SessionCache>> shared_caches, split_caches;

  explicit Layouts(const LlamaModel& m)
      : split(std::make_shared<LayerSplit>(m.LocalLayerSplit())),
        shared(Pool(m.config(), m.config().n_layers)),
        main(Pool(m.config(), split->n_main)),
        local(Pool(m.config(), split->n_local)) {}

  std::unique_ptr<SessionCache> Shared(const CacheSpec& spec, int32_t context) const {
    auto cache = SessionCache::Create(shared.get(), spec, context);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return std::move(*cache);
  }
  std::unique_ptr<SessionCache> Split(const CacheSpec& spec, int32_t context) const {
    auto cache = SessionCache::Create(main.get(), spec, context, {local.get(), kSpan, split});
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return std::move(*cache);
  }
};

// `to`, a fresh cache, restored from `from`'s image (the other layout).
void RestoreFrom(const SessionCache& from, SessionCache& to) {
  auto image = ReadCacheKv(from);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  ASSERT_TRUE(to.Restore(from.tokens_seen(), from.cached_ids()).ok());
  const Status written = WriteCacheKv(to, *image);
  ASSERT_TRUE(written.ok()) << written.ToString();
}

TEST(LocalLayerCacheTest, SplitCachesGiveTheSharedCachesLogitsBitForBit) {
  std::unique_ptr<LlamaModel> model = GemmaModel();
  const LlamaConfig& c = model->config();
  ASSERT_EQ(model->LocalLayerSplit().n_local, 6);
  Layouts L(*model);
  // A window past the span (the local layers keep 13 of 37), one under it (they keep the
  // session's own spec), a window-only cache and a dense one (a window of 13).
  const std::vector<CacheSpec> specs = {{CacheMode::kSink, 4, 37, 8},
                                        {CacheMode::kSink, 4, 9, 8},
                                        {CacheMode::kWindow, 0, 29, 8},
                                        {CacheMode::kDense, 0, 0, 8}};
  for (const CacheSpec& spec : specs) {
    L.shared_caches.push_back(L.Shared(spec, c.context_length));
    L.split_caches.push_back(L.Split(spec, c.context_length));
  }
  EXPECT_LT(L.split_caches[0]->local()->bound_blocks(), L.shared_caches[0]->bound_blocks());

  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> chunk(1, 8);
  const std::vector<int32_t> vocab = testing::UniformTokens(4000, c.vocab_size, seed);
  size_t next_token = 0;
  StepRunner runner(*model);
  std::vector<float> shared_logits, split_logits;
  int64_t compared = 0;
  for (int round = 0; round < 60; ++round) {
    // Every third round a decode step of every session (token-parallel where the model runs
    // it); the others prefill chunks of random lengths.
    std::vector<int32_t> tokens;
    std::vector<SequenceInput> shared_seqs, split_seqs;
    for (size_t s = 0; s < specs.size(); ++s) {
      const int32_t n = round % 3 == 2 ? 1 : chunk(rng);
      // The dense cache stops at 200 tokens, well past its local layers' window.
      if (s == 3 && L.shared_caches[s]->tokens_seen() + n > 200) continue;
      for (int32_t i = 0; i < n; ++i) tokens.push_back(vocab[next_token++ % vocab.size()]);
      shared_seqs.push_back({L.shared_caches[s].get(), n, LogitsMode::kAll});
      split_seqs.push_back({L.split_caches[s].get(), n, LogitsMode::kAll});
    }
    const size_t rows = tokens.size() * static_cast<size_t>(c.vocab_size);
    shared_logits.assign(rows, 0.0f);
    split_logits.assign(rows, 1.0f);
    ASSERT_TRUE(runner.Run(tokens, shared_seqs, shared_logits.data()).ok());
    const Status ran = runner.Run(tokens, split_seqs, split_logits.data());
    ASSERT_TRUE(ran.ok()) << ran.ToString();
    ASSERT_EQ(std::memcmp(shared_logits.data(), split_logits.data(), rows * sizeof(float)), 0)
        << "round " << round;
    compared += static_cast<int64_t>(tokens.size());

    if (round == 20) {
      // Rewind each session as far as both layouts allow, at most 5 tokens.
      for (size_t s = 0; s < specs.size(); ++s) {
        SessionCache& split = *L.split_caches[s];
        const int64_t n = std::min<int64_t>(5, split.MaxRewind());
        ASSERT_TRUE(L.shared_caches[s]->CanRewind(n));
        ASSERT_TRUE(split.Rewind(n).ok());
        ASSERT_TRUE(L.shared_caches[s]->Rewind(n).ok());
      }
    }
    if (round == 30) {
      // Fork: the forks carry on and the parents go (their blocks stay shared meanwhile).
      for (size_t s = 0; s < specs.size(); ++s) {
        auto shared_fork = L.shared_caches[s]->Fork();
        auto split_fork = L.split_caches[s]->Fork();
        ASSERT_TRUE(shared_fork.ok() && split_fork.ok());
        EXPECT_GT((*split_fork)->local()->shared_blocks(), 0);
        L.shared_caches[s] = std::move(*shared_fork);
        L.split_caches[s] = std::move(*split_fork);
      }
    }
    if (round == 40) {
      // Each layout restored from the other's image.
      for (size_t s = 0; s < specs.size(); ++s) {
        std::unique_ptr<SessionCache> shared = L.Shared(specs[s], c.context_length);
        std::unique_ptr<SessionCache> split = L.Split(specs[s], c.context_length);
        RestoreFrom(*L.split_caches[s], *shared);
        RestoreFrom(*L.shared_caches[s], *split);
        L.shared_caches[s] = std::move(shared);
        L.split_caches[s] = std::move(split);
      }
    }
  }
  std::printf("%lld tokens' logits equal bit for bit; the local layers held %d blocks, shared %d\n",
              static_cast<long long>(compared), L.local->used_blocks(), L.shared->used_blocks());
  EXPECT_GT(L.split_caches[0]->tokens_evicted(), 0);
  L.shared_caches.clear();
  L.split_caches.clear();
  EXPECT_EQ(L.main->used_blocks(), 0);
  EXPECT_EQ(L.local->used_blocks(), 0);
}

}  // namespace
}  // namespace streamd
