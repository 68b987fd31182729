// Models whose weights are of the types converted at load (K-quants, Q5_0, Q5_1, IQ4_NL, IQ4_XS;
// kernels/cpu/repack_quant.h): a synthetic model written with such tensors loads, its matrices
// are the converted copies, and its logits match PlainReferenceLlama on the same model with every
// converted tensor replaced by its reference dequantization as F32 (DequantizeConvertedTensors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/plain_reference_llama.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "kernels/cpu/dequantize_reference.h"
#include "kernels/cpu/repack_quant.h"

namespace streamd {
namespace {

using gguf::TensorType;

struct TypeCase {
  TensorType weights;
  TensorType embedding;  // token_embd and the tied output head
};

std::string Name(TensorType t) { return gguf::TensorTypeName(static_cast<uint32_t>(t)); }

// The reference dequantizer's name for t, or nothing for a type the products read as stored.
std::optional<kernels::ConvertedQuant> ConvertedOf(TensorType t) {
  for (kernels::ConvertedQuant q : kernels::kConvertedQuants) {
    if (static_cast<uint32_t>(q) == static_cast<uint32_t>(t)) return q;
  }
  return std::nullopt;
}

SyntheticModelSpec Spec(const TypeCase& tc) {
  SyntheticModelSpec spec;
  spec.dim = 256;  // K-quant rows are whole 256-value blocks
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 512;
  spec.vocab_size = 320;
  spec.weight_type = tc.weights;
  spec.embedding_type = tc.embedding;
  spec.seed = 11 + static_cast<uint64_t>(tc.weights) * 64 + static_cast<uint64_t>(tc.embedding);
  return spec;
}

// max |a - b| / max |b|
double RelativeError(const std::vector<float>& a, const std::vector<double>& b) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return err / scale;
}

TEST(ConvertedWeightsTest, ReaderTraitsMatchTheKernelLayouts) {
  for (kernels::ConvertedQuant q : kernels::kConvertedQuants) {
    const gguf::TensorTypeTraits* traits = gguf::FindTensorTypeTraits(static_cast<uint32_t>(q));
    const kernels::QuantLayout layout = kernels::LayoutOf(q);
    ASSERT_NE(traits, nullptr) << layout.name;
    EXPECT_EQ(traits->name, layout.name);
    EXPECT_EQ(traits->block_size, layout.block_values) << layout.name;
    EXPECT_EQ(traits->type_size, layout.block_bytes) << layout.name;
  }
}

class ConvertedModelTest : public ::testing::TestWithParam<TypeCase> {};

TEST_P(ConvertedModelTest, LoadsAndMatchesTheDequantizedModel) {
  const TypeCase tc = GetParam();
  auto bytes = BuildSyntheticModel(Spec(tc));
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto twin_bytes = DequantizeConvertedTensors(*bytes);
  ASSERT_TRUE(twin_bytes.ok()) << twin_bytes.status().ToString();
  auto converted = LlamaModel::FromBytes(std::move(*bytes));
  ASSERT_TRUE(converted.ok()) << converted.status().ToString();
  auto twin = LlamaModel::FromBytes(std::move(*twin_bytes));
  ASSERT_TRUE(twin.ok()) << twin.status().ToString();

  // The products run the converted copies, in the formats repack_quant.h names, or the file's
  // rows of the types with a native kernel.
  const LlamaWeights& w = (*converted)->weights();
  const auto native = [](TensorType t) {
    return t == TensorType::kQ8_0 || t == TensorType::kQ5_0 || t == TensorType::kQ5_1 ||
           t == TensorType::kQ6_K;
  };
  EXPECT_EQ(w.converted_bytes > 0, !native(tc.weights) || !native(tc.embedding));
  const auto target = [](TensorType t) {
    switch (t) {
      case TensorType::kQ8_0:
        return kernels::cpu::WeightType::kQ8_0;  // run as stored
      case TensorType::kQ5_0:
        return kernels::cpu::WeightType::kQ5_0;  // native kernels
      case TensorType::kQ6_K:
        return kernels::cpu::WeightType::kQ6_K;
      case TensorType::kQ5_1:
        return kernels::cpu::WeightType::kQ5_1;
      default:
        return kernels::RepackTarget(
            static_cast<kernels::ConvertedQuant>(static_cast<uint32_t>(t)));
    }
  };
  EXPECT_EQ(w.layers[0].wq.type, target(tc.weights));
  ASSERT_TRUE(std::holds_alternative<kernels::cpu::WeightType>(w.token_embedding.type));
  EXPECT_EQ(std::get<kernels::cpu::WeightType>(w.token_embedding.type), target(tc.embedding));
  EXPECT_EQ(w.output.type, target(tc.embedding));
  EXPECT_EQ(w.output.data, w.token_embedding.data);  // tied: converted once

  // The forward pass (converted weights, 12-bit activations, f16 cache) against the plain
  // double-precision reference on the dequantized twin, 40 tokens, dense attention.
  LlamaModel& model = **converted;
  model.set_threads(2);
  const LlamaConfig& c = model.config();
  auto pool = BlockPool::Create({c.n_layers, c.n_kv_heads, c.head_dim}, 16, 16 << 20);
  ASSERT_TRUE(pool.ok());
  auto cache =
      SessionCache::Create(pool->get(), CacheSpec{CacheMode::kDense, 0, 0, 8}, c.context_length);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  PlainReferenceLlama exact(**twin, 0, c.context_length);
  PlainReferenceLlama repacked(model, 0, c.context_length);
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
  std::vector<float> logits(c.vocab_size);
  double worst_forward = 0.0, worst_repack = 0.0;
  for (int i = 0; i < 40; ++i) {
    const int32_t t = token(rng);
    const Status s = StepRunner(model).Run({&t, 1}, **cache, LogitsMode::kLast, logits.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::vector<double> ref = exact.Step(t);
    const std::vector<double> rep = repacked.Step(t);
    worst_forward = std::max(worst_forward, RelativeError(logits, ref));
    std::vector<float> rep_f(rep.begin(), rep.end());
    worst_repack = std::max(worst_repack, RelativeError(rep_f, ref));
  }
  std::printf(
      "%s weights, %s embeddings: converted copies %.2f MiB; worst relative logit error: "
      "forward pass %.2e, repack alone (reference on the converted weights) %.2e\n",
      Name(tc.weights).c_str(), Name(tc.embedding).c_str(),
      static_cast<double>(w.converted_bytes) / (1 << 20), worst_forward, worst_repack);
  // The repack alone: Q4_K -> Q4_1 rounds two f16 scales (~1e-4 of a weight), the Q8_0
  // re-quantization moves each weight by up to 1/254 of its block's maximum (rms ~0.4% of the
  // weights, kernels/cpu/repack_quant_test.cc), exact conversions not at all; over 2 layers of
  // 7 matrices and the tied head that measured 5e-8 .. 1.7e-2 here. The forward pass adds the
  // 12-bit activations and f16 K/V (3e-2 for Q4_1 weights in streaming_attention_test.cc). A
  // wrong bit layout or a misplaced row gives errors of order 1.
  EXPECT_LT(worst_repack, 4e-2);
  EXPECT_LT(worst_forward, 5e-2);
}

// Loaded from a file, the converted tensors' source pages are unmapped after conversion
// (llama_weights.cc, ReleaseSourcePages); loaded from memory, they are not touched. Both models
// must run the same bits, and the file's mapping must still read the file's bytes (the model
// fingerprint and the tokenizer read it after load).
TEST(ConvertedModelFileTest, ReleasedSourcePagesLeaveTheModelAndTheMappingIntact) {
  // Q5_K layers are converted (to Q5_1); the tied Q6_K table and head are read in place.
  SyntheticModelSpec spec = Spec({TensorType::kQ5_K, TensorType::kQ6_K});
  spec.dim = 1024;  // tensors of several pages, so that whole pages are released
  spec.ffn_dim = 2048;
  auto bytes = BuildSyntheticModel(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/converted_" +
                           std::to_string(::getpid()) + ".gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes->data()),
              static_cast<std::streamsize>(bytes->size()));
    ASSERT_TRUE(out.good());
  }
  const std::vector<uint8_t> original = *bytes;
  auto from_file = LlamaModel::Load(path);
  std::remove(path.c_str());  // the mapping keeps the inode
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  auto from_bytes = LlamaModel::FromBytes(std::move(*bytes));
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status().ToString();
  ASSERT_TRUE((*from_file)->file().is_file_mapping());
  ASSERT_FALSE((*from_bytes)->file().is_file_mapping());

  const std::span<const uint8_t> mapped = (*from_file)->file().bytes();
  ASSERT_EQ(mapped.size(), original.size());
  EXPECT_TRUE(std::equal(mapped.begin(), mapped.end(), original.begin()));

  std::vector<std::vector<float>> logits(2);
  int m = 0;
  for (LlamaModel* model : {from_file->get(), from_bytes->get()}) {
    model->set_threads(1);
    const LlamaConfig& c = model->config();
    auto pool = BlockPool::Create({c.n_layers, c.n_kv_heads, c.head_dim}, 16, 16 << 20);
    ASSERT_TRUE(pool.ok());
    auto cache =
        SessionCache::Create(pool->get(), CacheSpec{CacheMode::kDense, 0, 0, 8}, c.context_length);
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    std::vector<float> out(c.vocab_size);
    for (int32_t t : {3, 141, 59, 26, 5}) {
      const Status s = StepRunner(*model).Run({&t, 1}, **cache, LogitsMode::kLast, out.data());
      ASSERT_TRUE(s.ok()) << s.ToString();
      logits[m].insert(logits[m].end(), out.begin(), out.end());
    }
    ++m;
  }
  EXPECT_EQ(logits[0], logits[1]);
}

// Logits of `tokens` fed one at a time, then of a 20-token chunk (another token bucket), into
// fresh dense caches.
std::vector<float> LogitsOf(LlamaModel& model) {
  const LlamaConfig& c = model.config();
  auto pool = BlockPool::Create(model.CacheShape(), 16, 16 << 20);
  EXPECT_TRUE(pool.ok());
  std::vector<float> all, out(static_cast<size_t>(c.vocab_size));
  auto one =
      SessionCache::Create(pool->get(), CacheSpec{CacheMode::kDense, 0, 0, 32}, c.context_length);
  EXPECT_TRUE(one.ok());
  for (int32_t t : {3, 141, 59, 26, 5}) {
    EXPECT_TRUE(StepRunner(model).Run({&t, 1}, **one, LogitsMode::kLast, out.data()).ok());
    all.insert(all.end(), out.begin(), out.end());
  }
  std::vector<int32_t> chunk(20);
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<int32_t>(7 * i + 1);
  auto many =
      SessionCache::Create(pool->get(), CacheSpec{CacheMode::kDense, 0, 0, 32}, c.context_length);
  EXPECT_TRUE(many.ok());
  EXPECT_TRUE(StepRunner(model).Run(chunk, **many, LogitsMode::kLast, out.data()).ok());
  all.insert(all.end(), out.begin(), out.end());
  return all;
}

using Shape = std::tuple<kernels::cpu::WeightType, int64_t, int64_t>;

// A plan's tuning with every product shape of `model` at 8-bit activations in every token
// bucket, one entry per shape and bucket (ProductMatrices lists a shape once per matrix).
CpuTuning AllEightBit(const LlamaModel& model, std::set<Shape>* shapes_out = nullptr) {
  CpuTuning eight;
  std::set<Shape> shapes;
  for (const WeightMatrix* w : model.ProductMatrices()) {
    if (!shapes.insert({w->type, w->rows, w->cols}).second) continue;
    for (int b = 0; b < kTokenBuckets; ++b) {
      eight.isa.push_back({w->type, w->rows, w->cols, b, kernels::cpu::ActiveIsa(), 8});
    }
  }
  if (shapes_out != nullptr) *shapes_out = std::move(shapes);
  return eight;
}

// With every product at 8 bits (a plan's tuning), the converted rows of the layers are read by
// no product: they are freed (ReleaseUnreadConvertedRows), the logits stay bit for bit, and a
// tuning that would read them is refused instead of reading freed memory.
TEST(ConvertedModelFileTest, EightBitProductsNeedOnlyTheirPackedCopies) {
  if (!kernels::cpu::FastInt8Activations(kernels::cpu::WeightType::kQ8_0)) {
    GTEST_SKIP() << "this CPU has no fast 8-bit kernel (AVX-512 VNNI): the rows stay in use";
  }
  // Q5_K layers: converted to Q5_1 (Q5_0, Q5_1 and Q6_K ones would be read from the file's own
  // rows).
  auto bytes = BuildSyntheticModel(Spec({TensorType::kQ5_K, TensorType::kQ5_0}));
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto model = LlamaModel::FromBytes(std::move(*bytes));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  LlamaModel& m = **model;
  m.set_threads(2);
  const CpuTuning eight = AllEightBit(m);
  ASSERT_TRUE(m.ApplyTuning(eight).ok());
  const std::vector<float> before = LogitsOf(m);
  const uint64_t converted = m.weights().converted_bytes;

  const uint64_t freed = m.ReleaseUnreadConvertedRows();
  EXPECT_GT(freed, 0u);
  EXPECT_EQ(m.weights().converted_bytes, converted - freed);
  for (const LlamaLayerWeights& l : m.weights().layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      EXPECT_EQ(w->data, nullptr);
    }
  }
  EXPECT_NE(m.weights().token_embedding.data, nullptr);  // the lookup reads its rows
  EXPECT_EQ(LogitsOf(m), before);

  const Status back = m.ApplyTuning(CpuTuning{});
  EXPECT_EQ(back.code(), StatusCode::kFailedPrecondition) << back.ToString();
  EXPECT_TRUE(m.ApplyTuning(eight).ok());
  EXPECT_EQ(LogitsOf(m), before);
}

// Loaded with a plan whose 8-bit copies serve the layers alone (Prepacked::served_by_vnni8), a
// model does not convert those matrices at all: the same end state as converting them and
// freeing them once the plan is applied, without holding both at load. The logits are the same
// bit for bit, and without the plan's copies the tuning is refused (no rows to pack them from).
TEST(ConvertedModelFileTest, MatricesAPlanServesAloneAreNotConvertedAtLoad) {
  if (!kernels::cpu::FastInt8Activations(kernels::cpu::WeightType::kQ8_0)) {
    GTEST_SKIP() << "this CPU has no fast 8-bit kernel (AVX-512 VNNI): no plan serves the layers "
                    "from their 8-bit copies alone";
  }
  auto bytes = BuildSyntheticModel(Spec({TensorType::kQ5_K, TensorType::kQ5_0}));
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const std::vector<uint8_t> file_bytes = *bytes;
  auto converted = LlamaModel::FromBytes(std::move(*bytes));
  ASSERT_TRUE(converted.ok()) << converted.status().ToString();
  LlamaModel& a = **converted;
  a.set_threads(2);
  std::set<Shape> shapes;
  const CpuTuning eight = AllEightBit(a, &shapes);
  ASSERT_TRUE(a.ApplyTuning(eight).ok());
  const std::vector<float> logits = LogitsOf(a);
  const std::vector<uint8_t> copies = Vnni8CopiesBlob(a.weights());
  ASSERT_FALSE(copies.empty());
  const uint64_t freed = a.ReleaseUnreadConvertedRows();
  ASSERT_GT(freed, 0u);

  auto file = gguf::GgufFile::FromBuffer(file_bytes.data(), file_bytes.size());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  LlamaModel::Prepacked prepacked;
  prepacked.served_by_vnni8 = [&](kernels::cpu::WeightType type, int64_t rows, int64_t cols) {
    return shapes.count({type, rows, cols}) > 0 && kernels::cpu::Vnni8Packable(type, rows, cols);
  };
  auto planned = LlamaModel::FromFile(std::move(*file), &prepacked);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  LlamaModel& b = **planned;
  b.set_threads(2);
  EXPECT_EQ(b.weights().converted_bytes, a.weights().converted_bytes);  // a's, after its release
  EXPECT_EQ(b.weights().total_bytes, a.weights().total_bytes);
  int rowless = 0;
  for (const LlamaLayerWeights& l : b.weights().layers) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      rowless += w->data == nullptr;
    }
  }
  EXPECT_GT(rowless, 0);

  const Status without = b.ApplyTuning(eight);
  EXPECT_EQ(without.code(), StatusCode::kFailedPrecondition) << without.ToString();
  ASSERT_TRUE(b.ApplyTuning(eight, copies).ok());
  EXPECT_EQ(LogitsOf(b), logits);
}

// A synthetic model of one type, loaded, with its file's bytes and its twin: the same model with
// every converted tensor replaced by its reference dequantization as F32.
struct ModelAndTwin {
  std::vector<uint8_t> file;
  std::unique_ptr<LlamaModel> model, twin;
};
StatusOr<ModelAndTwin> LoadWithTwin(TensorType type) {
  STREAMD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, BuildSyntheticModel(Spec({type, type})));
  ModelAndTwin m;
  m.file = bytes;
  STREAMD_ASSIGN_OR_RETURN(std::vector<uint8_t> twin_bytes, DequantizeConvertedTensors(m.file));
  STREAMD_ASSIGN_OR_RETURN(m.twin, LlamaModel::FromBytes(std::move(twin_bytes)));
  STREAMD_ASSIGN_OR_RETURN(m.model, LlamaModel::FromBytes(std::move(bytes)));
  m.model->set_threads(2);
  return m;
}

// The bytes of the product matrices' 8-bit copies and of their rows (what the 12-bit products
// read).
std::pair<uint64_t, uint64_t> CopiesAndRowsBytes(const LlamaModel& model) {
  uint64_t copies = 0, rows = 0;
  for (const WeightMatrix* w : model.ProductMatrices()) {
    copies += kernels::cpu::Vnni8PackedBytes(Int8RowsOf(*w).type, w->rows, w->cols);
    rows += w->row_bytes * static_cast<uint64_t>(w->rows);
  }
  return {copies, rows};
}

// The largest relative logit error of `model` against the plain double-precision reference on
// `twin` over 40 single-token steps of random tokens (rng seed `seed`) into a dense cache.
double WorstStepError(LlamaModel& model, const LlamaModel& twin, uint64_t seed) {
  const LlamaConfig& c = model.config();
  auto pool = BlockPool::Create(model.CacheShape(), 16, 16 << 20);
  EXPECT_TRUE(pool.ok());
  auto cache =
      SessionCache::Create(pool->get(), CacheSpec{CacheMode::kDense, 0, 0, 8}, c.context_length);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  PlainReferenceLlama exact(twin, 0, c.context_length);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  double worst = 0.0;
  for (int i = 0; i < 40; ++i) {
    const int32_t t = token(rng);
    EXPECT_TRUE(StepRunner(model).Run({&t, 1}, **cache, LogitsMode::kLast, logits.data()).ok());
    worst = std::max(worst, RelativeError(logits, exact.Step(t)));
  }
  return worst;
}

// Q6_K products at 8-bit activations (a plan's choice, read from PackForVnni8 copies that keep
// each 16-value group's scale): the forward pass stays close to the exact model, the plain
// double-precision reference on the dequantized twin, the plan's blob of copies serves the
// same logits as copies packed from the rows, and weight_bytes counts the copies a decode step
// reads.
TEST(ConvertedModelFileTest, Q6_KAtEightBitsTracksTheExactModel) {
  if (!kernels::cpu::FastInt8Activations(kernels::cpu::WeightType::kQ6_K)) {
    GTEST_SKIP() << "this CPU has no fast 8-bit kernel (AVX-512 VNNI): a plan keeps Q6_K at 12 "
                    "bits";
  }
  auto loaded = LoadWithTwin(TensorType::kQ6_K);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::vector<uint8_t>& file_bytes = loaded->file;
  LlamaModel& model = *loaded->model;
  for (const WeightMatrix* w : model.ProductMatrices()) {
    ASSERT_EQ(w->type, kernels::cpu::WeightType::kQ6_K);  // read as stored, head included
  }
  const CpuTuning eight = AllEightBit(model);
  EXPECT_EQ(model.weight_bytes(), model.weights().total_bytes);
  ASSERT_TRUE(model.ApplyTuning(eight).ok());
  // A decode step now reads the copies (3392 bytes per 16 rows and super-block, the rows' 3360),
  // and weight_bytes, which rooflines divide by, says so.
  const auto [copies_bytes, rows_bytes] = CopiesAndRowsBytes(model);
  EXPECT_EQ(copies_bytes * 3360, rows_bytes * 3392);
  // The rest: the norms' weights, read as before.
  EXPECT_EQ(model.weight_bytes(), model.weights().total_bytes - rows_bytes + copies_bytes);

  const double worst = WorstStepError(model, *loaded->twin, 7);
  std::printf("Q6_K at 8-bit activations: worst relative logit error %.2e over 40 tokens\n", worst);
  // 8-bit activations move each product by up to 1/254 of a block's largest activation per weight
  // (kernels/cpu/matmul_quant8_test.cc): 5.0e-3 here, where the 12-bit forward pass of a Q6_K
  // model measures 1.4e-4 (LoadsAndMatchesTheDequantizedModel). Both groups scaled by the first
  // group's scale gave 1.0 here: errors of order 1.
  EXPECT_LT(worst, 2e-2);

  // The plan's path: a model loaded again, given the blob of copies, runs the same bits.
  const std::vector<float> logits_packed_here = LogitsOf(model);
  const std::vector<uint8_t> copies = Vnni8CopiesBlob(model.weights());
  ASSERT_FALSE(copies.empty());
  auto again = LlamaModel::FromBytes(std::vector<uint8_t>(file_bytes));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  (*again)->set_threads(2);
  ASSERT_TRUE((*again)->ApplyTuning(eight, copies).ok());
  EXPECT_EQ(LogitsOf(**again), logits_packed_here);
}

// Q4_K tensors at 8-bit activations: their 12-bit products read the Q4_1 conversion, but their
// 8-bit copies are packed from the file's own Q4_K rows (4.625 bits per weight where the Q4_1
// conversion's records took 5; WeightMatrix::int8_source), which weight_bytes counts. The
// forward pass stays close to the exact model, needs no converted row once the plan runs (the
// logits stay bit for bit after they are freed), and a plan's blob of copies serves the same
// logits.
TEST(ConvertedModelFileTest, Q4_KAtEightBitsReadsItsOwnRecords) {
  if (!kernels::cpu::FastInt8Activations(kernels::cpu::WeightType::kQ4_K)) {
    GTEST_SKIP() << "this CPU has no fast 8-bit kernel (AVX-512 VNNI): a plan keeps Q4_K's "
                    "conversion at 12 bits";
  }
  auto loaded = LoadWithTwin(TensorType::kQ4_K);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::vector<uint8_t>& file_bytes = loaded->file;
  LlamaModel& model = *loaded->model;
  for (const WeightMatrix* w : model.ProductMatrices()) {
    ASSERT_EQ(w->type, kernels::cpu::WeightType::kQ4_1);  // the conversion, head included
    ASSERT_EQ(Int8RowsOf(*w).type, kernels::cpu::WeightType::kQ4_K);
    ASSERT_NE(w->int8_source.data, nullptr);
  }
  const CpuTuning eight = AllEightBit(model);
  ASSERT_TRUE(model.ApplyTuning(eight).ok());
  // Per 16 rows and 256 values the copy holds 2368 bytes: 148 a row, where the Q4_1 rows hold
  // 160 (and their records took as much).
  const auto [copies_bytes, rows_bytes] = CopiesAndRowsBytes(model);
  EXPECT_EQ(copies_bytes * 160, rows_bytes * 148);
  EXPECT_EQ(model.weight_bytes(), model.weights().total_bytes - rows_bytes + copies_bytes);

  const double worst = WorstStepError(model, *loaded->twin, 5);
  std::printf("Q4_K at 8-bit activations: worst relative logit error %.2e over 40 tokens\n", worst);
  // The 8-bit activations' bound, as for Q6_K above; the mins' sign flipped in both the kernel and
  // its reference: 19.
  EXPECT_LT(worst, 2e-2);

  const std::vector<float> before = LogitsOf(model);
  const std::vector<uint8_t> copies = Vnni8CopiesBlob(model.weights());
  ASSERT_EQ(copies.size(), copies_bytes);
  // The layers' converted rows are read by no product now.
  EXPECT_GT(model.ReleaseUnreadConvertedRows(), 0u);
  EXPECT_EQ(LogitsOf(model), before);
  auto again = LlamaModel::FromBytes(std::vector<uint8_t>(file_bytes));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  (*again)->set_threads(2);
  ASSERT_TRUE((*again)->ApplyTuning(eight, copies).ok());
  EXPECT_EQ(LogitsOf(**again), before);
}

// Logits of a few single-token steps into a fresh dense cache.
std::vector<float> StepLogits(LlamaModel& model, std::span<const int32_t> tokens) {
  const LlamaConfig& c = model.config();
  auto pool = BlockPool::Create(model.CacheShape(), 16, 16 << 20);
  EXPECT_TRUE(pool.ok());
  auto cache =
      SessionCache::Create(pool->get(), CacheSpec{CacheMode::kDense, 0, 0, 32}, c.context_length);
  EXPECT_TRUE(cache.ok());
  std::vector<float> all, out(static_cast<size_t>(c.vocab_size));
  for (int32_t t : tokens) {
    EXPECT_TRUE(StepRunner(model).Run({&t, 1}, **cache, LogitsMode::kLast, out.data()).ok());
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

// An untied embedding table is never converted: it stays in the file's type, in place in the
// mapping, and each row the lookup reads is the reference dequantization of the file's row. The
// model then runs bit for bit as its twin whose table is that dequantization stored as F32.
TEST(UntiedEmbeddingTest, StaysInTheFileTypeForEveryType) {
  std::vector<TensorType> types = {TensorType::kF32, TensorType::kF16, TensorType::kQ4_0,
                                   TensorType::kQ4_1, TensorType::kQ8_0};
  for (kernels::ConvertedQuant q : kernels::kConvertedQuants) {
    types.push_back(static_cast<TensorType>(static_cast<uint32_t>(q)));
  }
  for (TensorType type : types) {
    SCOPED_TRACE(Name(type));
    SyntheticModelSpec spec = Spec({TensorType::kQ8_0, type});
    spec.output_type = TensorType::kQ8_0;
    auto bytes = BuildSyntheticModel(spec);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto twin_bytes = DequantizeConvertedTensors(*bytes);
    ASSERT_TRUE(twin_bytes.ok()) << twin_bytes.status().ToString();
    auto model = LlamaModel::FromBytes(std::move(*bytes));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    auto twin = LlamaModel::FromBytes(std::move(*twin_bytes));
    ASSERT_TRUE(twin.ok()) << twin.status().ToString();

    const LlamaWeights& w = (*model)->weights();
    const gguf::TensorInfo* t = (*model)->file().FindTensor("token_embd.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(w.converted_bytes, 0u);  // Q8_0 layers and head: nothing converted
    EXPECT_EQ(w.token_embedding.data, t->data);
    EXPECT_EQ(w.token_embedding.row_bytes, static_cast<size_t>(t->row_bytes()));
    EXPECT_EQ(w.embedding_bytes, static_cast<uint64_t>(t->size_bytes));
    EXPECT_NE(w.output.data, w.token_embedding.data);

    const int64_t dim = w.token_embedding.cols;
    std::vector<float> row(static_cast<size_t>(dim)), want(static_cast<size_t>(dim));
    const std::optional<kernels::ConvertedQuant> q = ConvertedOf(type);
    for (int64_t r = 0; r < w.token_embedding.rows; ++r) {
      w.token_embedding.DequantizeRow(r, row.data());
      const uint8_t* src = t->data + r * t->row_bytes();
      if (q) {  // Q5_0 included: read by DequantizeRow's native decoding, checked against this
        kernels::DequantizeReference(*q, src, dim / kernels::LayoutOf(*q).block_values,
                                     want.data());
      } else {
        ASSERT_TRUE(std::holds_alternative<kernels::cpu::WeightType>(w.token_embedding.type));
        kernels::cpu::DequantizeRow(std::get<kernels::cpu::WeightType>(w.token_embedding.type), src,
                                    dim, want.data());
      }
      ASSERT_EQ(row, want) << "row " << r;
    }
    const int32_t tokens[] = {3, 141, 59, 26, 5, 319};
    EXPECT_EQ(StepLogits(**model, tokens), StepLogits(**twin, tokens));
  }
}

// Loaded from a file, the untied table's rows are read with pread (GgufFile::CopyOut), not through
// the mapping; from memory, in place. Both give the same rows and logits.
TEST(UntiedEmbeddingTest, RowsReadFromTheFileEqualTheMappedOnes) {
  SyntheticModelSpec spec = Spec({TensorType::kQ8_0, TensorType::kQ6_K});
  spec.output_type = TensorType::kQ5_0;
  auto bytes = BuildSyntheticModel(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/untied_" +
                           std::to_string(::getpid()) + ".gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes->data()),
              static_cast<std::streamsize>(bytes->size()));
    ASSERT_TRUE(out.good());
  }
  auto from_file = LlamaModel::Load(path);
  std::remove(path.c_str());  // the open file keeps the inode
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  auto from_bytes = LlamaModel::FromBytes(std::move(*bytes));
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status().ToString();
  const EmbeddingTable& f = (*from_file)->weights().token_embedding;
  const EmbeddingTable& b = (*from_bytes)->weights().token_embedding;
  EXPECT_EQ(f.file, &(*from_file)->file());
  EXPECT_EQ(b.file, nullptr);
  std::vector<float> rf(static_cast<size_t>(f.cols)), rb(rf.size());
  for (int64_t r = 0; r < f.rows; ++r) {
    f.DequantizeRow(r, rf.data());
    b.DequantizeRow(r, rb.data());
    ASSERT_EQ(rf, rb) << "row " << r;
  }
  const int32_t tokens[] = {0, 319, 77, 5};
  EXPECT_EQ(StepLogits(**from_file, tokens), StepLogits(**from_bytes, tokens));
  // Ranges outside the file are refused, not read.
  const gguf::GgufFile& file = (*from_file)->file();
  uint8_t sink[8];
  EXPECT_TRUE(file.CopyOut(file.bytes().data(), sizeof sink, sink));
  EXPECT_FALSE(file.CopyOut(file.bytes().data() + file.bytes().size() - 4, sizeof sink, sink));
}

// The same on the real file: Qwen2.5-Coder-0.5B-Instruct Q4_K_M's untied Q5_0 table is read in
// place. Its rows are checked against the reference dequantization of bytes read from the file
// with pread (not through the model's mapping).
TEST(UntiedEmbeddingTest, RealQwenTableIsReadInPlace) {
  const char* path = std::getenv("STREAMD_QWEN_MODEL");
  if (path == nullptr || *path == 0) {
    GTEST_SKIP() << "STREAMD_QWEN_MODEL is not set: run `make test`, or set "
                    "STREAMD_QWEN_MODEL=$(scripts/fetch-qwen-model.sh)";
  }
  auto model = LlamaModel::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const LlamaWeights& w = (*model)->weights();
  const gguf::GgufFile& file = (*model)->file();
  const gguf::TensorInfo* t = file.FindTensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, TensorType::kQ5_0);
  ASSERT_TRUE(std::holds_alternative<kernels::cpu::WeightType>(w.token_embedding.type));
  EXPECT_EQ(std::get<kernels::cpu::WeightType>(w.token_embedding.type),
            kernels::cpu::WeightType::kQ5_0);
  EXPECT_EQ(w.token_embedding.data, t->data);
  const int64_t dim = w.token_embedding.cols;
  const size_t offset = static_cast<size_t>(t->data - file.bytes().data());
  std::FILE* f = std::fopen(path, "rb");
  ASSERT_NE(f, nullptr);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pick(0, w.token_embedding.rows - 1);
  std::vector<uint8_t> src(static_cast<size_t>(t->row_bytes()));
  std::vector<float> row(static_cast<size_t>(dim)), want(static_cast<size_t>(dim));
  for (int i = 0; i < 200; ++i) {
    const int64_t r = i == 0 ? 0 : i == 1 ? w.token_embedding.rows - 1 : pick(rng);
    ASSERT_EQ(std::fseek(f, static_cast<long>(offset + r * src.size()), SEEK_SET), 0);
    ASSERT_EQ(std::fread(src.data(), 1, src.size(), f), src.size());
    kernels::DequantizeReference(kernels::ConvertedQuant::kQ5_0, src.data(), dim / 32, want.data());
    w.token_embedding.DequantizeRow(r, row.data());
    ASSERT_EQ(row, want) << "row " << r;
  }
  std::fclose(f);
}

INSTANTIATE_TEST_SUITE_P(
    Types, ConvertedModelTest,
    ::testing::Values(
        // Q4_K_M's mix: Q4_K and Q6_K matrices; the embeddings people ship as Q5_0, Q6_K or Q8_0.
        TypeCase{TensorType::kQ4_K, TensorType::kQ6_K},
        TypeCase{TensorType::kQ6_K, TensorType::kQ5_0},
        TypeCase{TensorType::kQ5_K, TensorType::kQ8_0},
        TypeCase{TensorType::kQ3_K, TensorType::kQ2_K},
        TypeCase{TensorType::kQ2_K, TensorType::kQ4_K},
        TypeCase{TensorType::kQ5_1, TensorType::kQ5_K},
        TypeCase{TensorType::kQ5_0, TensorType::kIQ4_NL},
        TypeCase{TensorType::kIQ4_XS, TensorType::kQ5_1}),
    [](const ::testing::TestParamInfo<TypeCase>& p) {
      return Name(p.param.weights) + "_" + Name(p.param.embedding);
    });

}  // namespace
}  // namespace streamd
