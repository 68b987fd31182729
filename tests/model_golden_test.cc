// The CPU engine against llama.cpp on the default model (fixtures made by
// tools/reference/make_fixtures.py and make_exact_fixture.py, see docs/REFERENCE.md).
// Perplexity is computed on one sequence with dense attention, every token after the first
// scored: ppl = exp(mean_{i=1..2047} -log p(t_i | t_0..t_{i-1})) over the book's first 2048
// tokens. Two references:
//  - exact weights: llama.cpp on the F32 dequantization of the same Q4_1 weights (f32 KV):
//    the function the weights define. Argmax agreement >= 98%, perplexity within 1%.
//  - llama.cpp on the Q4_1 file itself, whose CPU path rounds activations to 8 bits (it agrees
//    with the exact function at only 97.1% of positions): perplexity within 1%, argmax
//    agreement reported and held above 95%.
//  - Greedy continuations of the exact-weights reference, teacher-forced: our argmax equals
//    its argmax at every step whose top-2 gap is not a near-tie.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "tests/support/golden_util.h"
#include "tests/test_env.h"

namespace streamd::testing {
namespace {

class ModelGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = ModelPathOrFail();
    if (path.empty()) return;
    auto g = GoldenModel::Load(path, 512 << 20);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    golden_ = std::move(g).value().release();
    model_ = golden_->model.get();
  }
  // A dense cache for up to `max_chunk` tokens per forward pass.
  static std::unique_ptr<SessionCache> Dense(int32_t max_chunk) {
    return golden_->Cache({CacheMode::kDense, 0, 0, max_chunk});
  }
  static void TearDownTestSuite() {
    delete golden_;
    golden_ = nullptr;
    model_ = nullptr;
  }
  static GoldenModel* golden_;
  static LlamaModel* model_;
};
GoldenModel* ModelGoldenTest::golden_ = nullptr;
LlamaModel* ModelGoldenTest::model_ = nullptr;

// The fixture's 2048 tokens in chunks of 256 through a dense cache, each chunk scored as it
// comes (all 2048 rows of logits would take 384 MiB); prints and checks argmax agreement and
// perplexity against the fixture's.
void ExpectTeacherForcedMatches(LlamaModel& model, std::unique_ptr<SessionCache> cache,
                                const char* fixture, const char* label, double min_agreement) {
  const nlohmann::json fx = ReadGoldenFixture(fixture);
  const std::vector<int32_t> tokens = fx.at("tokens").get<std::vector<int32_t>>();
  EXPECT_EQ(tokens.size(), 2048u);
  EXPECT_EQ(fx.at("argmax").size(), 2047u);
  DenseScorer scorer(fx, tokens, model.config().vocab_size, /*clear_gap=*/0.0);
  const Status s = RunChunked(
      model, tokens, *cache, 256,
      [&](const float* rows, size_t first, size_t count) { scorer.Add(rows, first, count); });
  EXPECT_TRUE(s.ok()) << s.ToString();
  const DenseComparison r = scorer.Result();
  std::printf("%s: argmax agreement %.4f, perplexity %.4f vs %.4f (%.5f)\n", label, r.agreement,
              r.ppl, r.ref_ppl, r.ppl_ratio);
  EXPECT_GE(r.agreement, min_agreement);
  EXPECT_NEAR(r.ppl_ratio, 1.0, 0.01);
}

TEST_F(ModelGoldenTest, TeacherForcedMatchesExactWeightsReference) {
  ASSERT_NE(model_, nullptr);
  ExpectTeacherForcedMatches(*model_, Dense(256), "smollm2_pride_2048_f32.json",
                             "exact-weights reference", 0.98);
}

TEST_F(ModelGoldenTest, TeacherForcedMatchesLlamaCppOnQ4_1) {
  ASSERT_NE(model_, nullptr);
  ExpectTeacherForcedMatches(*model_, Dense(256), "smollm2_pride_2048.json", "llama.cpp Q4_1",
                             0.95);
}

// The exact-weights reference's greedy continuations, teacher-forced: at every step whose
// reference top-2 logit gap is >= 0.05 (below that, f16 K/V rounding alone may decide) our
// argmax is the reference's.
TEST_F(ModelGoldenTest, GreedyContinuationsMatchExactWeightsReference) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadGoldenFixture("smollm2_greedy_f32.json");
  int checked = 0;
  for (const nlohmann::json& c : fx.at("cases")) {
    const GreedyCase greedy(c);
    std::unique_ptr<SessionCache> cache = Dense(static_cast<int32_t>(greedy.prompt.size()));
    ASSERT_NO_FATAL_FAILURE(
        TeacherForceGreedy(*model_, *cache, greedy, 0.05, "case " + greedy.name, &checked));
  }
  EXPECT_GE(checked, 80);
}

// Prefill in chunks of any size computes the same logits as token-by-token decode.
TEST_F(ModelGoldenTest, ChunkedPrefillEqualsTokenByToken) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadGoldenFixture("smollm2_pride_2048.json");
  std::vector<int32_t> tokens = fx.at("tokens").get<std::vector<int32_t>>();
  tokens.resize(97);
  const int32_t vocab = model_->config().vocab_size;

  std::vector<float> one_by_one(tokens.size() * vocab);
  std::unique_ptr<SessionCache> a = Dense(1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_TRUE(StepRunner(*model_)
                    .Run({&tokens[i], 1}, *a, LogitsMode::kLast, &one_by_one[i * vocab])
                    .ok());
  }
  for (size_t chunk : {3u, 16u, 41u, 97u}) {
    std::unique_ptr<SessionCache> b = Dense(static_cast<int32_t>(chunk));
    auto chunked = RunChunkedAll(*model_, tokens, *b, chunk);
    ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
    double max_err = 0.0, scale = 0.0;
    for (size_t i = 0; i < chunked->size(); ++i) {
      max_err = std::max(max_err, static_cast<double>(std::fabs((*chunked)[i] - one_by_one[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(one_by_one[i])));
    }
    // Not bit-identical: the tiled and one-token kernels sum in different orders, and such
    // last-bit differences can flip an f16 rounding of a cached K/V value (2^-11 relative)
    // that 30 layers then carry; a wrong position or mask would be O(1).
    std::printf("chunk %zu: max logit difference %.3g of max |logit| %.3g\n", chunk, max_err,
                scale);
    EXPECT_LT(max_err / scale, 1e-2) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace streamd::testing
