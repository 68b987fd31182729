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

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "engine/model/llama_model.h"
#include "tests/test_env.h"

namespace streamd {
namespace {

nlohmann::json ReadFixture(const std::string& name) {
  std::ifstream in(std::string(STREAMD_FIXTURES) + "/" + name);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  return nlohmann::json::parse(in);
}

class ModelGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = streamd::testing::ModelPathOrFail();
    if (path.empty()) return;
    auto m = LlamaModel::Load(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    const LlamaConfig& c = model_->config();
    auto p = BlockPool::Create({c.n_layers, c.n_kv_heads, c.head_dim}, 16, 512 << 20);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(p).value().release();
  }
  // A dense cache for up to `max_chunk` tokens per forward pass.
  static std::unique_ptr<SessionCache> Dense(int32_t max_chunk) {
    auto c = SessionCache::Create(pool_, {CacheMode::kDense, 0, 0, max_chunk},
                                  model_->config().context_length);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(c).value();
  }
  static void TearDownTestSuite() {
    delete pool_;
    delete model_;
    model_ = nullptr;
    pool_ = nullptr;
  }
  static LlamaModel* model_;
  static BlockPool* pool_;
};
LlamaModel* ModelGoldenTest::model_ = nullptr;
BlockPool* ModelGoldenTest::pool_ = nullptr;

double LogSoftmaxAt(const float* logits, int64_t n, int32_t target) {
  double max = logits[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - max);
  return logits[target] - max - std::log(sum);
}

struct TeacherForced {
  double agreement;
  double ppl;
};

// Runs the fixture's 2048 tokens in chunks of 256 through a dense cache.
TeacherForced RunTeacherForced(LlamaModel& model, const nlohmann::json& fx,
                               std::unique_ptr<SessionCache> cache) {
  const std::vector<int32_t> tokens = fx.at("tokens").get<std::vector<int32_t>>();
  const std::vector<int32_t> ref_argmax = fx.at("argmax").get<std::vector<int32_t>>();
  EXPECT_EQ(tokens.size(), 2048u);
  EXPECT_EQ(ref_argmax.size(), 2047u);
  const int32_t vocab = model.config().vocab_size;
  constexpr size_t kChunk = 256;
  std::vector<float> logits(kChunk * vocab);
  int64_t agree = 0;
  double nll = 0.0;
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    const size_t len = std::min(kChunk, tokens.size() - begin);
    EXPECT_TRUE(StepRunner(model)
                    .Run({tokens.data() + begin, len}, *cache, LogitsMode::kAll, logits.data())
                    .ok());
    for (size_t j = 0; j < len && begin + j + 1 < tokens.size(); ++j) {
      const size_t pos = begin + j;
      const float* row = &logits[j * vocab];
      agree += (std::max_element(row, row + vocab) - row) == ref_argmax[pos];
      nll -= LogSoftmaxAt(row, vocab, tokens[pos + 1]);
    }
  }
  return {static_cast<double>(agree) / 2047.0, std::exp(nll / 2047.0)};
}

TEST_F(ModelGoldenTest, TeacherForcedMatchesExactWeightsReference) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadFixture("smollm2_pride_2048_f32.json");
  const TeacherForced r = RunTeacherForced(*model_, fx, Dense(256));
  const double ref_ppl = fx.at("ppl").get<double>();
  std::printf("exact-weights reference: argmax agreement %.4f, perplexity %.4f vs %.4f (%.5f)\n",
              r.agreement, r.ppl, ref_ppl, r.ppl / ref_ppl);
  EXPECT_GE(r.agreement, 0.98);
  EXPECT_NEAR(r.ppl / ref_ppl, 1.0, 0.01);
}

TEST_F(ModelGoldenTest, TeacherForcedMatchesLlamaCppOnQ4_1) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadFixture("smollm2_pride_2048.json");
  const TeacherForced r = RunTeacherForced(*model_, fx, Dense(256));
  const double ref_ppl = fx.at("ppl").get<double>();
  std::printf("llama.cpp Q4_1: argmax agreement %.4f, perplexity %.4f vs %.4f (%.5f)\n",
              r.agreement, r.ppl, ref_ppl, r.ppl / ref_ppl);
  EXPECT_GE(r.agreement, 0.95);
  EXPECT_NEAR(r.ppl / ref_ppl, 1.0, 0.01);
}

// The exact-weights reference's greedy continuations, teacher-forced: at every step whose
// reference top-2 logit gap is >= 0.05 (below that, f16 K/V rounding alone may decide) our
// argmax is the reference's.
TEST_F(ModelGoldenTest, GreedyContinuationsMatchExactWeightsReference) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadFixture("smollm2_greedy_f32.json");
  const int32_t vocab = model_->config().vocab_size;
  std::vector<float> logits(vocab);
  int checked = 0;
  for (const nlohmann::json& c : fx.at("cases")) {
    const std::vector<int32_t> prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> expected = c.at("generated_ids").get<std::vector<int32_t>>();
    const std::vector<double> gap = c.at("argmax_gap").get<std::vector<double>>();
    std::unique_ptr<SessionCache> cache = Dense(static_cast<int32_t>(prompt.size()));
    ASSERT_TRUE(StepRunner(*model_).Run(prompt, *cache, LogitsMode::kLast, logits.data()).ok());
    for (size_t i = 0; i < expected.size(); ++i) {
      const int32_t ours =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (gap[i] >= 0.05) {
        EXPECT_EQ(ours, expected[i]) << "case " << c.value("name", "?") << " step " << i;
        ++checked;
      }
      const int32_t next = expected[i];
      ASSERT_TRUE(
          StepRunner(*model_).Run({&next, 1}, *cache, LogitsMode::kLast, logits.data()).ok());
    }
  }
  EXPECT_GE(checked, 80);
}

// Prefill in chunks of any size computes the same logits as token-by-token decode.
TEST_F(ModelGoldenTest, ChunkedPrefillEqualsTokenByToken) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadFixture("smollm2_pride_2048.json");
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
    std::vector<float> chunked(tokens.size() * vocab);
    for (size_t i = 0; i < tokens.size(); i += chunk) {
      const size_t len = std::min(chunk, tokens.size() - i);
      ASSERT_TRUE(StepRunner(*model_)
                      .Run({&tokens[i], len}, *b, LogitsMode::kAll, &chunked[i * vocab])
                      .ok());
    }
    double max_err = 0.0, scale = 0.0;
    for (size_t i = 0; i < chunked.size(); ++i) {
      max_err = std::max(max_err, static_cast<double>(std::fabs(chunked[i] - one_by_one[i])));
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
}  // namespace streamd
