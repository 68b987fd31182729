// The model families of model_family.h (qwen2: q/k/v biases and NEOX RoPE; qwen3: per-head q/k
// RMSNorm, NEOX RoPE and a head wider than dim / n_heads; llama with Llama 3.x rope_freqs) on
// synthetic models with random weights: streamd's forward pass, streamed in random chunks
// through sink + window, window-only and dense caches (past eviction), equals PlainReferenceLlama,
// which rebuilds each token's cache explicitly from the family's definition. Also: the loader
// asks for each family's tensors, and an unknown architecture's error lists the supported ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/plain_reference_llama.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model_family.h"
#include "tests/support/uniform_tokens.h"

namespace streamd {
namespace {

using testing::UniformTokens;

SyntheticModelSpec FamilySpec(const std::string& family, gguf::TensorType weights, uint64_t seed) {
  SyntheticModelSpec spec;
  spec.weight_type = weights;
  spec.seed = seed;
  if (family == "llama3") {
    // Llama 3.x scaling: high frequencies kept, low ones divided by up to 8 (as its converter
    // writes them), so a reference that ignored the factors would rotate differently.
    const int32_t half = spec.dim / spec.n_heads / 2;
    for (int32_t i = 0; i < half; ++i) spec.rope_freq_factors.push_back(1.0f + 7.0f * i / half);
    return spec;
  }
  if (family == "gemma3") {
    // A native window of 13 is cut by every cache window below, and cuts some of them.
    SyntheticModelSpec gemma = SmallGemma3Shape();
    gemma.weight_type = weights;
    gemma.seed = seed;
    return gemma;
  }
  spec.architecture = family;
  spec.rope_base = 1000000.0f;                // Qwen's
  if (family == "qwen3") spec.head_dim = 24;  // q_dim 96 != dim 64, as Qwen3 0.6B's 2048 != 1024
  return spec;
}

// max |a - b| / max |b|
double RelativeError(const float* a, const std::vector<double>& b) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return err / scale;
}

struct FamilyCase {
  std::string family;
  CacheMode mode;
  int32_t sinks, window, block, chunk;
  gguf::TensorType weights;
};

std::string CaseName(const ::testing::TestParamInfo<FamilyCase>& info) {
  const FamilyCase& c = info.param;
  const char* mode = c.mode == CacheMode::kSink     ? "sink"
                     : c.mode == CacheMode::kWindow ? "window"
                                                    : "dense";
  return c.family + "_" + mode + "_" + std::to_string(c.window) + "_" +
         (c.weights == gguf::TensorType::kF32 ? "f32" : "q4_1");
}

class FamilyForwardTest : public ::testing::TestWithParam<FamilyCase> {};

constexpr gguf::TensorType kF32 = gguf::TensorType::kF32;
constexpr gguf::TensorType kQ4_1 = gguf::TensorType::kQ4_1;

TEST_P(FamilyForwardTest, StreamedForwardEqualsPlainReference) {
  const FamilyCase fc = GetParam();
  auto model = MakeSyntheticModel(FamilySpec(fc.family, fc.weights, 11 + fc.window));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  LlamaModel& m = **model;
  m.set_threads(2);
  const LlamaConfig& c = m.config();
  auto pool = BlockPool::Create({c.n_layers, c.n_kv_heads, c.head_dim}, fc.block, 64 << 20);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const CacheSpec spec{fc.mode, fc.sinks, fc.window, fc.chunk};
  auto cache = SessionCache::Create(pool->get(), spec, c.context_length);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();

  // Dense caches see 200 tokens; the others 6 windows and more, so eviction runs for long.
  const int64_t n = fc.mode == CacheMode::kDense ? 200 : 6LL * fc.window + 13;
  const std::vector<int32_t> tokens = UniformTokens(n, c.vocab_size, 5 + fc.window);
  std::vector<float> logits(n * c.vocab_size);
  std::mt19937 rng(fc.window);
  std::uniform_int_distribution<int32_t> chunk(1, fc.chunk);
  for (int64_t i = 0; i < n;) {
    const int64_t len = std::min<int64_t>(chunk(rng), n - i);
    Status s = StepRunner(m).Run({tokens.data() + i, static_cast<size_t>(len)}, **cache,
                                 LogitsMode::kAll, &logits[i * c.vocab_size]);
    ASSERT_TRUE(s.ok()) << s.ToString();
    i += len;
  }

  const CacheSpec eff = SessionCache::Effective(spec, c.context_length);
  PlainReferenceLlama reference(m, eff.sinks, eff.window);
  double worst = 0.0;
  for (int64_t p = 0; p < n; ++p) {
    worst = std::max(worst, RelativeError(&logits[p * c.vocab_size], reference.Step(tokens[p])));
  }
  std::printf("%s: worst relative logit error over %lld tokens: %.2e\n", fc.family.c_str(),
              static_cast<long long>(n), worst);
  // As in streaming_attention_test.cc: f32 weights leave f32 and f16-cache rounding only; Q4_1
  // weights add the engine's quantized activations. A wrong pair layout, bias, norm or position
  // gives errors of order 1e-1.
  EXPECT_LT(worst, fc.weights == gguf::TensorType::kF32 ? 2e-3 : 3e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Families, FamilyForwardTest,
    ::testing::Values(FamilyCase{"qwen2", CacheMode::kSink, 4, 37, 16, 23, kF32},
                      FamilyCase{"qwen2", CacheMode::kWindow, 0, 29, 7, 40, kF32},
                      FamilyCase{"qwen2", CacheMode::kDense, 0, 0, 16, 64, kF32},
                      FamilyCase{"qwen2", CacheMode::kSink, 3, 21, 1, 9, kQ4_1},
                      FamilyCase{"qwen3", CacheMode::kSink, 4, 37, 16, 23, kF32},
                      FamilyCase{"qwen3", CacheMode::kWindow, 0, 31, 3, 1, kF32},
                      FamilyCase{"qwen3", CacheMode::kSink, 4, 45, 16, 16, kQ4_1},
                      FamilyCase{"llama3", CacheMode::kSink, 4, 37, 16, 23, kF32},
                      // Local layers' span under the cache window (37), over it (9: the sinks
                      // stay in a local layer's view until p > S + 12), and dense.
                      FamilyCase{"gemma3", CacheMode::kSink, 4, 37, 16, 23, kF32},
                      FamilyCase{"gemma3", CacheMode::kSink, 4, 9, 4, 5, kF32},
                      FamilyCase{"gemma3", CacheMode::kWindow, 0, 29, 7, 40, kF32},
                      FamilyCase{"gemma3", CacheMode::kDense, 0, 0, 16, 64, kF32},
                      FamilyCase{"gemma3", CacheMode::kSink, 4, 45, 16, 16, kQ4_1}),
    CaseName);

TEST(ModelFamilyTest, DescribesEachSupportedArchitecture) {
  EXPECT_EQ(SupportedArchitectures(), "llama, qwen2, qwen3, gemma3");
  ASSERT_NE(FindModelFamily("qwen2"), nullptr);
  EXPECT_EQ(FindModelFamily("qwen2")->rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(FindModelFamily("qwen2")->qkv_bias);
  EXPECT_TRUE(FindModelFamily("qwen3")->qk_norm);
  EXPECT_EQ(FindModelFamily("llama")->rope_style, RopeStyle::kNormal);
  const ModelFamily* gemma = FindModelFamily("gemma3");
  ASSERT_NE(gemma, nullptr);
  EXPECT_TRUE(gemma->qk_norm && gemma->sandwich_norms && gemma->embedding_scaled);
  EXPECT_EQ(gemma->ffn_activation, FfnActivation::kGeluTanh);
  EXPECT_EQ(gemma->local_period, 6);
  EXPECT_EQ(FindModelFamily("gemma2"), nullptr);
}

// A qwen2 file without its biases, or a qwen3 one without its norms, fails by the tensor's name.
TEST(ModelFamilyTest, LoaderAsksForTheFamilysTensors) {
  for (const auto& [family, missing] :
       {std::pair<std::string, std::string>{"qwen2", "blk.0.attn_q.bias"},
        std::pair<std::string, std::string>{"qwen3", "blk.0.attn_q_norm.weight"},
        std::pair<std::string, std::string>{"gemma3", "blk.0.post_ffw_norm.weight"}}) {
    auto bytes = BuildSyntheticModel(FamilySpec(family, gguf::TensorType::kF32, 1));
    ASSERT_TRUE(bytes.ok());
    auto file = gguf::GgufFile::FromBuffer(bytes->data(), bytes->size());
    ASSERT_TRUE(file.ok());
    gguf::GgufWriter w;
    w.SetAlignment(static_cast<uint32_t>((*file)->alignment()));
    for (const auto& [key, value] : (*file)->metadata()) {
      if (key != "general.alignment") w.Add(key, value);
    }
    for (const gguf::TensorInfo& t : (*file)->tensors()) {
      if (t.name == missing) continue;
      ASSERT_TRUE(
          w.AddTensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.size_bytes))
              .ok());
    }
    auto model = LlamaModel::FromBytes(w.Serialize());
    ASSERT_FALSE(model.ok()) << family;
    EXPECT_NE(model.status().message().find("'" + missing + "' is missing"), std::string::npos)
        << model.status().ToString();
  }
}

TEST(ModelFamilyTest, UnknownArchitectureListsTheSupportedOnes) {
  auto bytes = BuildSyntheticModel(FamilySpec("qwen2", gguf::TensorType::kF32, 1));
  ASSERT_TRUE(bytes.ok());
  auto file = gguf::GgufFile::FromBuffer(bytes->data(), bytes->size());
  ASSERT_TRUE(file.ok());
  gguf::GgufWriter w;
  w.SetAlignment(static_cast<uint32_t>((*file)->alignment()));
  for (const auto& [key, value] : (*file)->metadata()) {
    if (key == "general.alignment") continue;
    w.Add(key, key == "general.architecture" ? gguf::MakeString("gemma2") : value);
  }
  auto model = LlamaModel::FromBytes(w.Serialize());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(model.status().message(),
            "architecture \"gemma2\" is not supported (supported: llama, qwen2, qwen3, gemma3)");
}

}  // namespace
}  // namespace streamd
