// The CPU engine against llama.cpp on the default model (fixtures made by
// tools/reference/make_fixtures.py, see docs/REFERENCE.md):
//  - teacher-forced argmax agreement >= 98% over the first 2048 tokens of the book;
//  - perplexity over those tokens within 1% of llama.cpp's. Perplexity is computed on one
//    sequence with dense attention: every token after the first is scored,
//    ppl = exp(mean_{i=1..2047} -log p(t_i | t_0..t_{i-1}));
//  - greedy continuations equal llama.cpp's.
#include <cmath>
#include <fstream>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static LlamaModel* model_;
};
LlamaModel* ModelGoldenTest::model_ = nullptr;

double LogSoftmaxAt(const float* logits, int64_t n, int32_t target) {
  double max = logits[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - max);
  return logits[target] - max - std::log(sum);
}

TEST_F(ModelGoldenTest, TeacherForcedArgmaxAndPerplexityMatchLlamaCpp) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadFixture("smollm2_pride_2048.json");
  const std::vector<int32_t> tokens = fx.at("tokens").get<std::vector<int32_t>>();
  const std::vector<int32_t> ref_argmax = fx.at("argmax").get<std::vector<int32_t>>();
  const double ref_ppl = fx.at("ppl").get<double>();
  ASSERT_EQ(tokens.size(), 2048u);
  ASSERT_EQ(ref_argmax.size(), 2047u);

  const int32_t vocab = model_->config().vocab_size;
  DenseKvCache cache(model_->config(), 2048);
  constexpr size_t kChunk = 256;
  std::vector<float> logits(kChunk * vocab);
  int64_t agree = 0;
  double nll = 0.0;
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    const size_t len = std::min(kChunk, tokens.size() - begin);
    ASSERT_TRUE(model_->Forward({tokens.data() + begin, len}, cache, LogitsMode::kAll,
                                logits.data()).ok());
    for (size_t j = 0; j < len; ++j) {
      const size_t pos = begin + j;
      if (pos + 1 >= tokens.size()) break;
      const float* row = &logits[j * vocab];
      const int32_t argmax = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      agree += argmax == ref_argmax[pos];
      nll -= LogSoftmaxAt(row, vocab, tokens[pos + 1]);
    }
  }
  const double agreement = static_cast<double>(agree) / 2047.0;
  const double ppl = std::exp(nll / 2047.0);
  RecordProperty("argmax_agreement", std::to_string(agreement));
  RecordProperty("perplexity", std::to_string(ppl));
  std::printf("argmax agreement %.4f, perplexity %.4f (llama.cpp %.4f, ratio %.5f)\n", agreement,
              ppl, ref_ppl, ppl / ref_ppl);
  EXPECT_GE(agreement, 0.98);
  EXPECT_NEAR(ppl / ref_ppl, 1.0, 0.01);
}

TEST_F(ModelGoldenTest, GreedyContinuationsMatchLlamaCpp) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadFixture("smollm2_greedy.json");
  const int32_t vocab = model_->config().vocab_size;
  std::vector<float> logits(vocab);
  for (const nlohmann::json& c : fx.at("cases")) {
    const std::vector<int32_t> prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> expected = c.at("generated_ids").get<std::vector<int32_t>>();
    DenseKvCache cache(model_->config(), static_cast<int32_t>(prompt.size() + expected.size()));
    ASSERT_TRUE(model_->Forward(prompt, cache, LogitsMode::kLast, logits.data()).ok());
    std::vector<int32_t> got;
    for (size_t i = 0; i < expected.size(); ++i) {
      int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                       logits.begin());
      got.push_back(t);
      ASSERT_TRUE(model_->Forward({&t, 1}, cache, LogitsMode::kLast, logits.data()).ok());
    }
    EXPECT_EQ(got, expected) << "case " << c.value("name", "?");
  }
}

// Prefill in chunks of any size computes the same logits as token-by-token decode.
TEST_F(ModelGoldenTest, ChunkedPrefillEqualsTokenByToken) {
  ASSERT_NE(model_, nullptr);
  const nlohmann::json fx = ReadFixture("smollm2_pride_2048.json");
  std::vector<int32_t> tokens = fx.at("tokens").get<std::vector<int32_t>>();
  tokens.resize(97);
  const int32_t vocab = model_->config().vocab_size;

  std::vector<float> one_by_one(tokens.size() * vocab);
  DenseKvCache a(model_->config(), 128);
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_TRUE(model_->Forward({&tokens[i], 1}, a, LogitsMode::kLast, &one_by_one[i * vocab]).ok());
  }
  for (size_t chunk : {3u, 16u, 41u, 97u}) {
    DenseKvCache b(model_->config(), 128);
    std::vector<float> chunked(tokens.size() * vocab);
    for (size_t i = 0; i < tokens.size(); i += chunk) {
      const size_t len = std::min(chunk, tokens.size() - i);
      ASSERT_TRUE(
          model_->Forward({&tokens[i], len}, b, LogitsMode::kAll, &chunked[i * vocab]).ok());
    }
    double max_err = 0.0;
    for (size_t i = 0; i < chunked.size(); ++i) {
      max_err = std::max(max_err, static_cast<double>(std::fabs(chunked[i] - one_by_one[i])));
    }
    EXPECT_LT(max_err, 1e-3) << "chunk " << chunk;
  }
}

TEST_F(ModelGoldenTest, RejectsBadBatches) {
  ASSERT_NE(model_, nullptr);
  DenseKvCache cache(model_->config(), 4);
  std::vector<float> logits(model_->config().vocab_size);
  const int32_t oov = model_->config().vocab_size;
  Status s = model_->Forward({&oov, 1}, cache, LogitsMode::kLast, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("49152"), std::string::npos) << s.message();
  std::vector<int32_t> five(5, 1);
  s = model_->Forward(five, cache, LogitsMode::kLast, logits.data());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(model_->Forward({}, cache, LogitsMode::kLast, logits.data()).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace streamd
