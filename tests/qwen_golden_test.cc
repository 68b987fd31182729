// The qwen2 family on real files, against llama.cpp's fixtures
// (tools/reference/make_qwen_fixtures.py, docs/REFERENCE.md), the Hugging Face tokenizer's own
// test vectors and streamd's plain reference model. Two Qwen2.5-Coder-Instruct Q4_K_M files
// (scripts/fetch-qwen-model.sh; `make test` fetches both):
//  - Coder05B, $STREAMD_QWEN_MODEL: the 0.5B (AWQ) file the qwen2 work was developed on (Q5_0,
//    Q6_K and Q8_0 tensors read as stored, Q4_K repacked at load into Q4_1);
//  - Coder15B, $STREAMD_QWEN15_MODEL: a held-out 1.5B file (Q4_K and Q6_K, an untied Q6_K
//    output matrix, 28 layers) that nothing in streamd was written or tuned against. It runs the
//    same checks with the same bounds. Its first run failed one: perplexity 1.2% below
//    llama.cpp's, with a 1% bound. llama.cpp's own pass was the one off (1.2% from the exact
//    weights, streamd 0.005%), so the llama.cpp bound became 1.5% and the exact weights, checked
//    tightly, became the reference that decides.
// streamd's products quantize activations differently from llama.cpp's, so logits agree to a
// tolerance, not bits:
//  - tokenization: the same ids as llama.cpp for every case and the book's first 20000 bytes,
//    and the same ids as the Hugging Face tokenizer on llama.cpp's qwen2 test vectors (the
//    file's own vocabulary, tokens and merges, tokenizing them);
//  - dense pass over the book's first 512 tokens, against llama.cpp: argmax agreement >= 95%
//    (>= 99% where its top-2 gap is >= 0.5), perplexity within 1.5%, its top-8 logits within
//    0.5 (of logits around 20); against the exact weights (llama.cpp on an F32 dequantization):
//    argmax agreement >= 97% (99.5% where clear), perplexity within 0.5%, top-8 within 0.15;
//  - greedy continuations: the free-running continuation equals llama.cpp's up to its first
//    near-tie (gap < 0.5: logits differ by up to ~0.4, so a smaller gap may flip), and
//    teacher-forced our argmax is its argmax wherever gap >= 0.5;
//  - a sink + window cache past eviction: streamd's per-token NLL equals the plain reference's
//    (which rebuilds each token's cache explicitly) within 2% in perplexity;
//  - every product at a build plan's 8-bit activations (Q6_K's included), against the exact
//    weights: perplexity within 0.5% (measured +0.09% and +0.13%), argmax >= 95% (99% where
//    clear), top-8 within 0.5;
//  - the K-quant tensors at 8 bits as a daemon serves them without a plan: the dense pass's
//    bounds against llama.cpp, the 8-bit bounds against the exact weights.
// A file whose variable is unset skips every test, saying how to set it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "engine/backends/cpu/k_quant_defaults.h"
#include "engine/backends/cpu/llama_model.h"
#include "engine/cache/session_cache.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/golden_util.h"
#include "tests/support/vocab_test_vectors.h"

namespace streamd::testing {
namespace {

struct QwenFile {
  const char* name;     // the test name's suffix
  const char* env;      // the variable that names the file
  const char* fetch;    // the command that fetches it
  const char* fixture;  // prefix of its llama.cpp fixtures in tests/fixtures/
  int32_t n_layers;
};
void PrintTo(const QwenFile& f, std::ostream* os) { *os << f.name; }

constexpr QwenFile kFiles[] = {
    {"Coder05B", "STREAMD_QWEN_MODEL", "scripts/fetch-qwen-model.sh", "qwen25coder", 24},
    {"Coder15B", "STREAMD_QWEN15_MODEL", "scripts/fetch-qwen-model.sh 1.5b", "qwen25coder15b", 28},
};

std::string PathOf(const QwenFile& f) {
  const char* env = std::getenv(f.env);
  return env == nullptr ? "" : env;
}

// The bounds against llama.cpp on the file, which rounds activations to 8 bits before each
// quantized product and is itself 0.2% (0.5B) and 1.2% (1.5B) off the exact weights.
void ExpectCloseToLlamaCpp(const DenseComparison& r) {
  EXPECT_GE(r.agreement, 0.95);
  EXPECT_GE(r.clear_agreement, 0.99);
  EXPECT_NEAR(r.ppl_ratio, 1.0, 0.015);
  EXPECT_LT(r.worst_topk, 0.5);
}

// The bounds of 8-bit activations against the exact weights (measured +0.09% and +0.13% with
// every product at 8 bits).
void ExpectEightBitsCloseToTheExactWeights(const DenseComparison& c) {
  EXPECT_GE(c.agreement, 0.95);
  EXPECT_GE(c.clear_agreement, 0.99);
  EXPECT_NEAR(c.ppl_ratio, 1.0, 0.005);
  EXPECT_LT(c.worst_topk, 0.5);
}

class QwenGoldenTest : public ::testing::TestWithParam<QwenFile> {
 protected:
  void SetUp() override {
    if (PathOf(GetParam()).empty()) {
      GTEST_SKIP() << GetParam().env << " is not set: run `make test`, or set " << GetParam().env
                   << "=$(" << GetParam().fetch << ")";
    }
    golden_ = Loaded(PathOf(GetParam()));
    ASSERT_NE(golden_, nullptr);
    model_ = golden_->model.get();
  }
  std::string Fixture(const char* what) const {
    return std::string(GetParam().fixture) + "_" + what + ".json";
  }
  // Dense for these tests' texts: a window longer than any of them (a kDense cache would
  // reserve the model's whole 32768-token context).
  static CacheSpec Dense() { return {CacheMode::kWindow, 0, 1024, 256}; }
  std::unique_ptr<SessionCache> Cache(CacheSpec spec) const { return golden_->Cache(spec); }

  // The book's first 512 tokens (the fixture's) in one dense cache under `tuning`, scored against
  // llama.cpp and the exact weights (DensePassUnder).
  void DensePass(const CpuTuning& tuning, const std::string& label, DenseComparison* llama,
                 DenseComparison* exact) {
    const nlohmann::json fx = ReadGoldenFixture(Fixture("pride_512"));
    ASSERT_EQ(fx.at("tokens").size(), 512u);
    auto pair = DensePassUnder(*model_, tuning, *Cache(Dense()), fx, label);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    *llama = pair->llama;
    *exact = pair->exact;
  }

  GoldenModel* golden_ = nullptr;
  LlamaModel* model_ = nullptr;

 private:
  // One model loaded at a time, kept for the next test of the same file (ctest runs each test in
  // its own process; running the binary by hand runs them all in one).
  static GoldenModel* Loaded(const std::string& path) {
    static std::string loaded_path;
    static std::unique_ptr<GoldenModel> loaded;
    if (loaded_path != path) {
      loaded.reset();
      auto g = GoldenModel::Load(path, 256 << 20);
      EXPECT_TRUE(g.ok()) << path << ": " << g.status().ToString();
      if (!g.ok()) return nullptr;
      loaded = std::move(g).value();
      loaded_path = path;
    }
    return loaded.get();
  }
};

TEST_P(QwenGoldenTest, LoadsAsQwen2) {
  const LlamaConfig& c = model_->config();
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_EQ(c.family.rope_style, RopeStyle::kNeox);
  EXPECT_NE(model_->weights().layers[0].q_bias, nullptr);
  EXPECT_EQ(c.n_layers, GetParam().n_layers);
  EXPECT_EQ(c.n_kv_heads, 2);
  // Both files carry an output matrix of their own, so the embedding table is read by rows from
  // the file (embedding_bytes; 0 when it is the output head).
  EXPECT_GT(model_->weights().embedding_bytes, 0u);
}

// llama.cpp's qwen2 test vectors hold the Hugging Face tokenizer's ids; the file's own
// vocabulary must give them. (Qwen2.5 files add special tokens to the qwen2 vocabulary; the
// vectors parse no special tokens, so the regular tokens and merges decide.)
TEST_P(QwenGoldenTest, TokenizesAsHuggingFace) {
  const std::string dir = tokenizer::testing::VocabDirOrFail();
  ASSERT_FALSE(dir.empty());
  auto file = gguf::GgufFile::Open(PathOf(GetParam()));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tok = tokenizer::Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::vector<tokenizer::testing::GoldenCase> cases;
  std::string error;
  const std::string vectors = dir + "/ggml-vocab-qwen2.gguf";
  ASSERT_TRUE(tokenizer::testing::ReadCases(vectors + ".inp", vectors + ".out", &cases, &error))
      << error;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto ids = (*tok)->Encode(cases[i].text, false, false);
    ASSERT_TRUE(ids.ok()) << "case " << i << ": " << ids.status().ToString();
    EXPECT_EQ(*ids, cases[i].ids) << "case " << i << " of " << vectors << ".inp";
  }
  EXPECT_GE(cases.size(), 40u);
}

TEST_P(QwenGoldenTest, TokenizesAsLlamaCpp) {
  std::ifstream book(std::string(STREAMD_SHARED_DATA) + "/pride-and-prejudice.txt",
                     std::ios::binary);
  ASSERT_TRUE(book.good());
  const std::string book_bytes((std::istreambuf_iterator<char>(book)), {});
  EXPECT_GE(ExpectTokenizesAsFixture(PathOf(GetParam()), ReadGoldenFixture(Fixture("tokenize")),
                                     book_bytes),
            20);
}

// The book's first 512 tokens in one dense cache, against llama.cpp on the file (which rounds
// activations to 8 bits before each quantized product) and against llama.cpp on the file's exact
// F32 dequantization with an f32 K/V cache (the fixture's `exact`: the function the weights
// define). The perplexity bound against llama.cpp is the looser one because llama.cpp itself is
// off the exact weights: by 0.2% on the 0.5B, by 1.2% on the held-out 1.5B, where streamd is
// within 0.04% of them on both.
TEST_P(QwenGoldenTest, DensePassMatchesLlamaCpp) {
  DenseComparison r, exact;
  ASSERT_NO_FATAL_FAILURE(DensePass(model_->tuning(), "", &r, &exact));
  ExpectCloseToLlamaCpp(r);
  EXPECT_GE(exact.agreement, 0.97);
  EXPECT_GE(exact.clear_agreement, 0.995);
  EXPECT_NEAR(exact.ppl_ratio, 1.0, 0.005);
  EXPECT_LT(exact.worst_topk, 0.15);
}

// What a build plan's 8-bit activations do to a real file: every product (the Q4_K tensors' Q4_1
// rows, Q5_0, Q8_0 and Q6_K read as stored) at 8 bits from its PackForVnni8 copy, the same 512
// tokens against the exact weights. The eval gate takes this cut only within its limit (1%
// perplexity by default, docs/BUILD.md); the real weights must stay well inside it, or a plan
// would keep 12 bits for nothing.
TEST_P(QwenGoldenTest, EightBitActivationsStayCloseToTheExactWeights) {
  if (!kernels::cpu::FastInt8Activations(kernels::cpu::WeightType::kQ6_K)) {
    GTEST_SKIP() << "no fast 8-bit kernel on this CPU (AVX-512 VNNI): a plan keeps 12 bits";
  }
  int q6k = 0;
  const CpuTuning eight = EightBitEverywhere(*model_, model_->tuning(), &q6k);
  EXPECT_GT(q6k, 0);  // both files have Q6_K matrices: the new product runs
  DenseComparison r, exact;
  ASSERT_NO_FATAL_FAILURE(DensePass(eight, "8-bit activations, ", &r, &exact));
  ExpectEightBitsCloseToTheExactWeights(exact);
}

// What a daemon without a plan serves on this CPU (engine/backends/cpu/k_quant_defaults.h): the
// K-quant tensors (Q4_K from its own records, Q6_K) at 8-bit activations, the 0.5B's Q5_0 and Q8_0
// ones at 12 bits. The same 512 tokens, with the dense pass's bounds against llama.cpp and the
// 8-bit ones against the exact weights: served this way, the file must still be what both say.
TEST_P(QwenGoldenTest, ServedWithoutAPlanMatchesLlamaCppAndTheExactWeights) {
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

TEST_P(QwenGoldenTest, GreedyContinuationsMatchLlamaCpp) {
  constexpr double kClearGap = 0.5;
  const nlohmann::json fx = ReadGoldenFixture(Fixture("greedy"));
  int checked = 0;
  for (const nlohmann::json& c : fx.at("cases")) {
    const GreedyCase greedy(c);
    // Free-running: our own picks fed back, up to the reference's first near-tie.
    size_t same = 0;
    ASSERT_NO_FATAL_FAILURE(
        FreeRunGreedy(*model_, *Cache(Dense()), greedy, kClearGap, greedy.name, &same));
    // Teacher-forced: the reference's picks fed back, every clear step compared.
    ASSERT_NO_FATAL_FAILURE(
        TeacherForceGreedy(*model_, *Cache(Dense()), greedy, kClearGap, greedy.name, &checked));
  }
  EXPECT_GE(checked, 40);  // of the fixture's 48 steps
}

// A sink + window cache, past eviction, against the plain reference model that rebuilds each
// token's cache as StreamingLLM defines it: per-token NLL over a short text (the plain model
// takes ~0.5 s per token: every sum in double, one thread).
TEST_P(QwenGoldenTest, StreamingPerplexityMatchesPlainReference) {
  const nlohmann::json fx = ReadGoldenFixture(Fixture("pride_512"));
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

INSTANTIATE_TEST_SUITE_P(Qwen25, QwenGoldenTest, ::testing::ValuesIn(kFiles),
                         [](const ::testing::TestParamInfo<QwenFile>& file) {
                           return std::string(file.param.name);
                         });

}  // namespace
}  // namespace streamd::testing
