// The gemma3 family on a real file, against llama.cpp's fixtures
// (tools/reference/make_gemma_fixtures.py, docs/REFERENCE.md) and streamd's plain reference model:
// Gemma 3 270M Q4_K_M ($STREAMD_GEMMA_MODEL, scripts/fetch-gemma-model.sh; `make test` fetches
// it). What sets the family apart (model_family.h): the scaled embedding, sandwich norms, a GELU
// FFN, per-head q/k norms, a 262144-token SentencePiece vocabulary, and five of every six layers
// local, seeing only their last 512 tokens with their own RoPE base. The dense pass runs 1024
// tokens so that its second half reaches past the local layers' window: a local layer that saw
// the whole cache, or rotated with the global base, fails it.
//  - tokenization: the same ids as llama.cpp for every case and the book's first 20000 bytes;
//  - dense pass over the book's first 1024 tokens against llama.cpp, and against the exact
//    weights (llama.cpp on an F32 dequantization with an f32 K/V cache: the fixture's `exact`);
//  - greedy continuations as in qwen_golden_test.cc;
//  - a sink + window cache past eviction against the plain reference model;
//  - a build plan's 8-bit activations against the exact weights.
// Without the variable every test skips, saying how to set it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backends/cpu/k_quant_defaults.h"
#include "engine/backends/cpu/llama_model.h"
#include "engine/cache/session_cache.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/golden_util.h"

namespace streamd::testing {
namespace {

constexpr char kEnv[] = "STREAMD_GEMMA_MODEL";
constexpr int64_t kDenseTokens = 1024;

std::string ModelPath() {
  const char* env = std::getenv(kEnv);
  return env == nullptr ? "" : env;
}

// Against llama.cpp on the file: its 8-bit activations put it 1.1% off the exact weights, and its
// top-8 logits up to ~3 from theirs (Gemma's norm weights reach 300: a few large activations per
// block coarsen the 8-bit steps of the rest). Measured at 12 bits: 96.0%, 98.9%, 0.9886, 2.9.
void ExpectCloseToLlamaCpp(const DenseComparison& r) {
  EXPECT_GE(r.agreement, 0.94);
  EXPECT_GE(r.clear_agreement, 0.98);
  EXPECT_NEAR(r.ppl_ratio, 1.0, 0.015);
  EXPECT_LT(r.worst_topk, 4.0);
}

// 8-bit activations against the exact weights. Gemma pays more than Qwen for 8 bits (+0.9% with
// every product at 8 bits, against +0.1%), for the reason above; llama.cpp pays about the same.
// Measured: 96.4%, 99.9% where clear, 1.0092, 3.0.
void ExpectEightBitsCloseToTheExactWeights(const DenseComparison& c) {
  EXPECT_GE(c.agreement, 0.95);
  EXPECT_GE(c.clear_agreement, 0.99);
  EXPECT_NEAR(c.ppl_ratio, 1.0, 0.015);
  EXPECT_LT(c.worst_topk, 4.0);
}

class GemmaGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ModelPath().empty()) {
      GTEST_SKIP() << kEnv << " is not set: run `make test`, or set " << kEnv
                   << "=$(scripts/fetch-gemma-model.sh)";
    }
    golden_ = Loaded(ModelPath());
    ASSERT_NE(golden_, nullptr);
    model_ = golden_->model.get();
  }
  // Dense for these texts: a window as long as the longest of them.
  static CacheSpec Dense() { return {CacheMode::kWindow, 0, kDenseTokens, 256}; }
  std::unique_ptr<SessionCache> Cache(CacheSpec spec) const { return golden_->Cache(spec); }

  // The book's first 1024 tokens (BOS first, as llama.cpp adds it for Gemma: the fixture's) in one
  // dense cache under `tuning`, scored against llama.cpp and the exact weights (DensePassUnder).
  void DensePass(const CpuTuning& tuning, const std::string& label, DenseComparison* llama,
                 DenseComparison* exact) {
    const nlohmann::json fx = ReadGoldenFixture("gemma3_270m_pride_1024.json");
    ASSERT_EQ(fx.at("tokens").size(), static_cast<size_t>(kDenseTokens));
    auto pair = DensePassUnder(*model_, tuning, *Cache(Dense()), fx, label);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    *llama = pair->llama;
    *exact = pair->exact;
  }

  GoldenModel* golden_ = nullptr;
  LlamaModel* model_ = nullptr;

 private:
  static GoldenModel* Loaded(const std::string& path) {
    static std::unique_ptr<GoldenModel> loaded;
    if (loaded == nullptr) {
      auto g = GoldenModel::Load(path, 256 << 20);
      EXPECT_TRUE(g.ok()) << path << ": " << g.status().ToString();
      if (!g.ok()) return nullptr;
      loaded = std::move(g).value();
    }
    return loaded.get();
  }
};

TEST_F(GemmaGoldenTest, LoadsAsGemma3) {
  const LlamaConfig& c = model_->config();
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_EQ(c.n_layers, 18);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.q_dim(), 1024);  // wider than dim 640
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / 16.0f);
  EXPECT_TRUE(c.tied_output);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(c.IsLocalLayer(l), l % 6 != 5) << "layer " << l;
  }
  EXPECT_NE(model_->weights().layers[0].post_ffn_norm, nullptr);
}

TEST_F(GemmaGoldenTest, TokenizesAsLlamaCpp) {
  std::ifstream book(std::string(STREAMD_SHARED_DATA) + "/pride-and-prejudice.txt",
                     std::ios::binary);
  ASSERT_TRUE(book.good());
  const std::string book_bytes((std::istreambuf_iterator<char>(book)), {});
  EXPECT_GE(ExpectTokenizesAsFixture(ModelPath(), ReadGoldenFixture("gemma3_270m_tokenize.json"),
                                     book_bytes),
            20);
}

// The book's first 1024 tokens in one dense cache, against llama.cpp on the file and against the
// exact weights (the fixture's `exact`).
TEST_F(GemmaGoldenTest, DensePassMatchesLlamaCpp) {
  DenseComparison r, exact;
  ASSERT_NO_FATAL_FAILURE(DensePass(model_->tuning(), "", &r, &exact));
  ExpectCloseToLlamaCpp(r);
  // The exact weights decide, tightly. Measured: 99.7%, 100%, 0.9993, 0.17. A local layer that
  // sees the whole cache takes llama.cpp's own perplexity from 9.29 to 46.7 (make_gemma_fixtures
  // on a copy of the file with a 4096-token window).
  EXPECT_GE(exact.agreement, 0.99);
  EXPECT_GE(exact.clear_agreement, 0.995);
  EXPECT_NEAR(exact.ppl_ratio, 1.0, 0.003);
  EXPECT_LT(exact.worst_topk, 0.3);
}

// What a build plan's 8-bit activations do to this file: every product at 8 bits from its
// PackForVnni8 copy, the same tokens. A plan's eval gate measures the cut on its own text and
// refuses it past its limit (1% by default).
TEST_F(GemmaGoldenTest, EightBitActivationsStayCloseToTheExactWeights) {
  if (!kernels::cpu::FastInt8Activations(kernels::cpu::WeightType::kQ6_K)) {
    GTEST_SKIP() << "no fast 8-bit kernel on this CPU (AVX-512 VNNI): a plan keeps 12 bits";
  }
  DenseComparison r, exact;
  ASSERT_NO_FATAL_FAILURE(
      DensePass(EightBitEverywhere(*model_, model_->tuning()), "8-bit activations, ", &r, &exact));
  ExpectEightBitsCloseToTheExactWeights(exact);
}

// What a daemon without a plan serves on this CPU (engine/backends/cpu/k_quant_defaults.h): the
// K-quant tensors at 8-bit activations, the rest at 12 bits: the dense pass's bounds against
// llama.cpp, the 8-bit ones against the exact weights (measured +0.22%: the cost of the default).
TEST_F(GemmaGoldenTest, ServedWithoutAPlanMatchesLlamaCppAndTheExactWeights) {
  const CpuTuning served = KQuantDefaultTuning(model_->weights(), model_->tuning());
  if (served == model_->tuning()) {
    GTEST_SKIP() << "the AVX-512 VNNI level does not run here ("
                 << kernels::cpu::IsaName(kernels::cpu::ActiveIsa())
                 << "): without a plan the K-quant tensors keep 12 bits, DensePassMatchesLlamaCpp";
  }
  DenseComparison r, exact;
  ASSERT_NO_FATAL_FAILURE(DensePass(served, "served without a plan, ", &r, &exact));
  ExpectCloseToLlamaCpp(r);
  ExpectEightBitsCloseToTheExactWeights(exact);
}

TEST_F(GemmaGoldenTest, GreedyContinuationsMatchLlamaCpp) {
  constexpr double kClearGap = 0.5;
  const nlohmann::json fx = ReadGoldenFixture("gemma3_270m_greedy.json");
  int checked = 0;
  for (const nlohmann::json& c : fx.at("cases")) {
    const GreedyCase greedy(c);
    size_t same = 0;
    ASSERT_NO_FATAL_FAILURE(
        FreeRunGreedy(*model_, *Cache(Dense()), greedy, kClearGap, greedy.name, &same));
    ASSERT_NO_FATAL_FAILURE(
        TeacherForceGreedy(*model_, *Cache(Dense()), greedy, kClearGap, greedy.name, &checked));
  }
  EXPECT_GE(checked, 30);  // of the fixture's 48 steps
}

// A sink + window cache past eviction against the plain reference, which rebuilds each token's
// cache as StreamingLLM defines it (its 262144 x 640 head in double: ~0.3 s per token).
TEST_F(GemmaGoldenTest, StreamingPerplexityMatchesPlainReference) {
  const nlohmann::json fx = ReadGoldenFixture("gemma3_270m_pride_1024.json");
  std::vector<int32_t> tokens = fx.at("tokens").get<std::vector<int32_t>>();
  tokens.resize(32);
  const CacheSpec spec{CacheMode::kSink, 4, 12, 8};  // evicting from token 16 on
  auto r = CompareWithPlainReference(*golden_, tokens, spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf(
      "sink S=%d W=%d over %lld tokens: perplexity %.4f vs plain reference %.4f "
      "(%.5f), argmax agreement %lld/%lld\n",
      r->effective.sinks, r->effective.window, static_cast<long long>(tokens.size()), r->ppl,
      r->ref_ppl, r->ppl / r->ref_ppl, static_cast<long long>(r->agree),
      static_cast<long long>(r->scored));
  EXPECT_NEAR(r->ppl / r->ref_ppl, 1.0, 0.02);
  EXPECT_GE(r->agree, r->scored * 9 / 10);
}

}  // namespace
}  // namespace streamd::testing
