// K-quant files without a plan (engine/backends/cpu/k_quant_defaults.h): on the AVX-512 VNNI
// level their matrices take 8-bit activations from copies packed at load from the file's own
// rows, the Q4_K layers never converted; model.k_quant_activation_bits: 12 and other files keep
// the 12-bit products.
#include "engine/backends/cpu/k_quant_defaults.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/build_plan/plan_binding.h"
#include "tests/support/plan_test_util.h"

namespace streamd {
namespace {

using gguf::TensorType;
using plan_test::Logits;
using plan_test::RandomTokens;

// A Q4_K_M-like synthetic model (Q4_K layers, a tied Q6_K table and head; fresh random weights
// per run) written to a file, so that it loads through the mapping as a user's file does.
std::string WriteModel(const std::string& name, TensorType layers, TensorType embedding) {
  SyntheticModelSpec spec;
  spec.dim = 256;  // K-quant rows are whole 256-value blocks
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 512;
  spec.vocab_size = 320;
  spec.weight_type = layers;
  spec.embedding_type = embedding;
  spec.seed = std::random_device{}();
  auto bytes = BuildSyntheticModel(spec);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  const std::string path = testing::TempDir() + "/" + name + ".gguf";
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes->data()),
            static_cast<std::streamsize>(bytes->size()));
  return path;
}

bool AllEightBit(const WeightMatrix& m) {
  return std::all_of(m.int8_by_bucket.begin(), m.int8_by_bucket.end(), [](bool b) { return b; });
}
bool AnyEightBit(const WeightMatrix& m) {
  return std::any_of(m.int8_by_bucket.begin(), m.int8_by_bucket.end(), [](bool b) { return b; });
}

bool VnniLevelRuns() { return kernels::cpu::ActiveIsa() == kernels::cpu::Isa::kAvx512Vnni; }
std::string WhyKQuantsKeepTwelveBits() {
  return std::string("the AVX-512 VNNI level does not run here (") +
         kernels::cpu::IsaName(kernels::cpu::ActiveIsa()) + "): K-quant files keep 12 bits";
}

// max |a - b| / max |b|
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return err / scale;
}

TEST(KQuantDefaultsTest, KQuantLayersTakeEightBitsFromTheFilesOwnRows) {
  if (!VnniLevelRuns()) GTEST_SKIP() << WhyKQuantsKeepTwelveBits();
  const std::string path = WriteModel("k_quant_defaults", TensorType::kQ4_K, TensorType::kQ6_K);
  auto served = LoadCpuModel(path, "");
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  auto exact = LoadCpuModel(path, "", nullptr, nullptr, /*k_quant_activation_bits=*/12);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  // The same choices made the long way: converted at load, then tuned, then packed.
  auto tuned = LlamaModel::Load(path);
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  ASSERT_TRUE(
      (*tuned)->ApplyTuning(KQuantDefaultTuning((*tuned)->weights(), (*tuned)->tuning())).ok());
  std::filesystem::remove(path);  // the mappings keep the inode

  // 12 bits: the Q4_K layers converted to Q4_1, no 8-bit product anywhere.
  EXPECT_GT((*exact)->weights().converted_bytes, 0u);
  for (const WeightMatrix* m : (*exact)->ProductMatrices()) EXPECT_FALSE(AnyEightBit(*m));
  // 8 bits: every matrix from its copy alone, the Q4_K layers never converted, the Q6_K head's
  // rows still the file's (its lookups read them).
  EXPECT_EQ((*served)->weights().converted_bytes, 0u);
  EXPECT_GT((*served)->weights().vnni8_packed_bytes, 0u);
  for (const WeightMatrix* m : (*served)->ProductMatrices()) {
    EXPECT_TRUE(AllEightBit(*m) && ServedByVnni8CopyAlone(*m)) << m->rows << "x" << m->cols;
  }
  for (const LlamaLayerWeights& l : (*served)->weights().layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      EXPECT_EQ(w->data, nullptr);
      EXPECT_EQ(Int8RowsOf(*w).type, kernels::cpu::WeightType::kQ4_K);
    }
  }
  EXPECT_NE((*served)->weights().output.data, nullptr);

  const std::vector<int32_t> tokens = RandomTokens((*served)->config().vocab_size, 40);
  const std::vector<float> eight = Logits(**served, tokens);
  EXPECT_EQ(eight, Logits(**tuned, tokens));  // not converting changes no bit
  // 8-bit activations against 12: each product moves by up to 1/254 of a block's largest
  // activation per weight (kernels/cpu/matmul_quant8_test.cc; the plan tests' bound). A wrong
  // copy, or one product left on freed rows, gives errors of order 1.
  const double err = RelativeError(eight, Logits(**exact, tokens));
  std::printf("8-bit against 12-bit activations: worst relative logit error %.2e\n", err);
  EXPECT_LT(err, 2e-2);
}

// Q5_K is converted to Q5_1, whose 8-bit copy holds its values as bytes (1.5x the rows): it keeps
// 12 bits, and its conversion, while the Q6_K head beside it takes 8 bits.
TEST(KQuantDefaultsTest, CopiesThatWouldGrowTheModelAreNotMade) {
  if (!VnniLevelRuns()) GTEST_SKIP() << WhyKQuantsKeepTwelveBits();
  const std::string path = WriteModel("q5_k_defaults", TensorType::kQ5_K, TensorType::kQ6_K);
  auto served = LoadCpuModel(path, "");
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  std::filesystem::remove(path);
  const LlamaWeights& w = (*served)->weights();
  EXPECT_TRUE(AllEightBit(w.output) && ServedByVnni8CopyAlone(w.output));
  for (const LlamaLayerWeights& l : w.layers) {
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      EXPECT_EQ(m->type, kernels::cpu::WeightType::kQ5_1);
      EXPECT_FALSE(AnyEightBit(*m));
      EXPECT_NE(m->data, nullptr);
    }
  }
  EXPECT_EQ(w.vnni8_packed_bytes, kernels::cpu::Vnni8PackedBytes(kernels::cpu::WeightType::kQ6_K,
                                                                 w.output.rows, w.output.cols));
}

TEST(KQuantDefaultsTest, OtherFilesKeepTheirTwelveBitProducts) {
  const std::string path = WriteModel("legacy_defaults", TensorType::kQ4_1, TensorType::kQ8_0);
  auto served = LoadCpuModel(path, "");
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  auto exact = LoadCpuModel(path, "", nullptr, nullptr, 12);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  std::filesystem::remove(path);
  EXPECT_EQ((*served)->tuning(), (*exact)->tuning());
  EXPECT_EQ((*served)->weights().vnni8_packed_bytes, 0u);
  for (const WeightMatrix* m : (*served)->ProductMatrices()) EXPECT_FALSE(AnyEightBit(*m));
  const std::vector<int32_t> tokens = RandomTokens((*served)->config().vocab_size, 24);
  EXPECT_EQ(Logits(**served, tokens), Logits(**exact, tokens));
}

}  // namespace
}  // namespace streamd
