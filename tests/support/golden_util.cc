#include "tests/support/golden_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <span>
#include <tuple>

#include "engine/backends/cpu/plain_reference_llama.h"
#include "engine/core/step_runner.h"
#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"
#include "tools/perplexity.h"

namespace streamd::testing {

nlohmann::json ReadGoldenFixture(const std::string& name) {
  std::ifstream in(std::string(STREAMD_FIXTURES) + "/" + name);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  return nlohmann::json::parse(in);
}

int ExpectTokenizesAsFixture(const std::string& model_path, const nlohmann::json& fixture,
                             const std::string& book) {
  auto file = gguf::GgufFile::Open(model_path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return 0;
  auto tok = tokenizer::Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  if (!tok.ok()) return 0;
  int cases = 0;
  for (const nlohmann::json& c : fixture.at("cases")) {
    const std::string text = c.contains("bytes") ? book.substr(0, c.at("bytes").get<size_t>())
                                                 : c.at("text").get<std::string>();
    auto ids = (*tok)->Encode(text, false, c.at("parse_special").get<bool>());
    EXPECT_TRUE(ids.ok()) << ids.status().ToString();
    if (!ids.ok()) continue;
    EXPECT_EQ(*ids, c.at("ids").get<std::vector<int32_t>>()) << c.at("name");
    ++cases;
  }
  return cases;
}

CpuTuning EightBitEverywhere(const LlamaModel& model, const CpuTuning& base, int* q6k_shapes) {
  CpuTuning eight = base;
  std::set<std::tuple<kernels::cpu::WeightType, int64_t, int64_t>> shapes;
  for (const WeightMatrix* w : model.ProductMatrices()) {
    if (!shapes.insert({w->type, w->rows, w->cols}).second) continue;
    if (q6k_shapes != nullptr) *q6k_shapes += w->type == kernels::cpu::WeightType::kQ6_K;
    for (int b = 0; b < kTokenBuckets; ++b) {
      eight.isa.push_back({w->type, w->rows, w->cols, b, kernels::cpu::ActiveIsa(), 8});
    }
  }
  return eight;
}

void PrintDenseComparison(const char* against, const DenseComparison& c) {
  std::printf(
      "%s: argmax agreement %.4f (%.4f where gap >= 0.5), perplexity %.4f vs %.4f (%.5f), "
      "worst top-8 logit error %.3f\n",
      against, c.agreement, c.clear_agreement, c.ppl, c.ref_ppl, c.ppl_ratio, c.worst_topk);
}

int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

StatusOr<std::unique_ptr<GoldenModel>> GoldenModel::Load(const std::string& path,
                                                         int64_t pool_bytes) {
  auto golden = std::make_unique<GoldenModel>();
  STREAMD_ASSIGN_OR_RETURN(golden->model, LlamaModel::Load(path));
  const LlamaConfig& c = golden->model->config();
  STREAMD_ASSIGN_OR_RETURN(
      golden->pool, BlockPool::Create({c.n_layers, c.n_kv_heads, c.head_dim}, 16, pool_bytes));
  return golden;
}

std::unique_ptr<SessionCache> GoldenModel::Cache(const CacheSpec& spec) const {
  auto c = SessionCache::Create(pool.get(), spec, model->config().context_length);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

Status RunChunked(LlamaModel& model, const std::vector<int32_t>& tokens, SessionCache& cache,
                  size_t chunk, const std::function<void(const float*, size_t, size_t)>& rows) {
  const int32_t vocab = model.config().vocab_size;
  std::vector<float> logits(chunk * vocab);
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const size_t len = std::min(chunk, tokens.size() - begin);
    STREAMD_RETURN_IF_ERROR(StepRunner(model).Run({tokens.data() + begin, len}, cache,
                                                  LogitsMode::kAll, logits.data()));
    rows(logits.data(), begin, len);
  }
  return OkStatus();
}

StatusOr<std::vector<float>> RunChunkedAll(LlamaModel& model, const std::vector<int32_t>& tokens,
                                           SessionCache& cache, size_t chunk) {
  const size_t vocab = model.config().vocab_size;
  std::vector<float> all(tokens.size() * vocab);
  STREAMD_RETURN_IF_ERROR(
      RunChunked(model, tokens, cache, chunk, [&](const float* rows, size_t first, size_t count) {
        std::copy(rows, rows + count * vocab, &all[first * vocab]);
      }));
  return all;
}

StatusOr<DensePair> DensePassUnder(LlamaModel& model, const CpuTuning& tuning, SessionCache& cache,
                                   const nlohmann::json& fx, const std::string& label) {
  const std::vector<int32_t> tokens = fx.at("tokens").get<std::vector<int32_t>>();
  const CpuTuning original = model.tuning();
  STREAMD_RETURN_IF_ERROR(model.ApplyTuning(tuning));
  auto logits = RunChunkedAll(model, tokens, cache, 256);
  STREAMD_RETURN_IF_ERROR(model.ApplyTuning(original));
  if (!logits.ok()) return logits.status();
  DensePair out;
  const int32_t vocab = model.config().vocab_size;
  for (auto [ref, c, against] :
       {std::tuple{&fx, &out.llama, "against llama.cpp Q4_K_M"},
        std::tuple{&fx.at("exact"), &out.exact, "against the exact weights"}}) {
    DenseScorer scorer(*ref, tokens, vocab, /*clear_gap=*/0.5);
    scorer.Add(logits->data(), 0, tokens.size());
    *c = scorer.Result();
    PrintDenseComparison((label + against).c_str(), *c);
  }
  return out;
}

DenseScorer::DenseScorer(const nlohmann::json& ref, const std::vector<int32_t>& tokens,
                         int32_t vocab, double clear_gap)
    : ref_(ref),
      tokens_(tokens),
      vocab_(vocab),
      clear_gap_(clear_gap),
      ref_argmax_(ref.at("argmax").get<std::vector<int32_t>>()),
      gap_(ref.at("argmax_gap").get<std::vector<double>>()) {}

void DenseScorer::Add(const float* rows, size_t first, size_t count) {
  for (size_t j = 0; j < count && first + j + 1 < tokens_.size(); ++j) {
    const size_t pos = first + j;
    const float* row = rows + j * vocab_;
    const bool same = Argmax(row, vocab_) == ref_argmax_[pos];
    agree_ += same;
    if (gap_[pos] >= clear_gap_) {
      ++clear_;
      clear_agree_ += same;
    }
    nll_ += tools::TokenNll(row, vocab_, tokens_[pos + 1]);
  }
  if (!ref_.contains("topk")) return;
  std::vector<int32_t> order(vocab_);
  for (const nlohmann::json& t : ref_.at("topk")) {
    const size_t pos = t.at("position").get<size_t>();
    if (pos < first || pos >= first + count) continue;
    const std::vector<int32_t> ids = t.at("ids").get<std::vector<int32_t>>();
    const std::vector<double> ref_logits = t.at("logits").get<std::vector<double>>();
    const float* row = rows + (pos - first) * vocab_;
    for (size_t j = 0; j < ids.size(); ++j) {
      topk_.worst_topk = std::max(topk_.worst_topk, std::fabs(row[ids[j]] - ref_logits[j]));
    }
    // Our top-k ids as a set equal the reference's (an order swap inside is a near-tie).
    for (int32_t v = 0; v < vocab_; ++v) order[v] = v;
    std::partial_sort(order.begin(), order.begin() + static_cast<int64_t>(ids.size()), order.end(),
                      [row](int32_t a, int32_t c) { return row[a] > row[c]; });
    std::vector<int32_t> ours(order.begin(), order.begin() + static_cast<int64_t>(ids.size()));
    std::vector<int32_t> theirs = ids;
    std::sort(ours.begin(), ours.end());
    std::sort(theirs.begin(), theirs.end());
    topk_.topk_sets_equal += ours == theirs;
    ++topk_.topk_rows;
  }
}

DenseComparison DenseScorer::Result() const {
  const double scored = static_cast<double>(tokens_.size() - 1);
  DenseComparison r = topk_;
  r.agreement = agree_ / scored;
  r.clear_agreement = clear_agree_ / static_cast<double>(clear_);
  r.ppl = std::exp(nll_ / scored);
  r.ref_ppl = ref_.at("ppl").get<double>();
  r.ppl_ratio = r.ppl / r.ref_ppl;
  return r;
}

GreedyCase::GreedyCase(const nlohmann::json& c)
    : name(c.value("name", "?")),
      prompt(c.at("prompt_ids").get<std::vector<int32_t>>()),
      expected(c.at("generated_ids").get<std::vector<int32_t>>()),
      gap(c.at("argmax_gap").get<std::vector<double>>()) {}

void FreeRunGreedy(LlamaModel& model, SessionCache& cache, const GreedyCase& c, double clear_gap,
                   const std::string& label, size_t* same) {
  const int32_t vocab = model.config().vocab_size;
  std::vector<float> logits(vocab);
  ASSERT_TRUE(StepRunner(model).Run(c.prompt, cache, LogitsMode::kLast, logits.data()).ok());
  for (*same = 0; *same < c.expected.size() && c.gap[*same] >= clear_gap; ++*same) {
    const int32_t ours = Argmax(logits.data(), vocab);
    ASSERT_EQ(ours, c.expected[*same]) << label << " free-running step " << *same;
    ASSERT_TRUE(StepRunner(model).Run({&ours, 1}, cache, LogitsMode::kLast, logits.data()).ok());
  }
}

void TeacherForceGreedy(LlamaModel& model, SessionCache& cache, const GreedyCase& c,
                        double clear_gap, const std::string& label, int* checked) {
  const int32_t vocab = model.config().vocab_size;
  std::vector<float> logits(vocab);
  ASSERT_TRUE(StepRunner(model).Run(c.prompt, cache, LogitsMode::kLast, logits.data()).ok());
  for (size_t i = 0; i < c.expected.size(); ++i) {
    if (c.gap[i] >= clear_gap) {
      EXPECT_EQ(Argmax(logits.data(), vocab), c.expected[i]) << label << " step " << i;
      ++*checked;
    }
    ASSERT_TRUE(
        StepRunner(model).Run({&c.expected[i], 1}, cache, LogitsMode::kLast, logits.data()).ok());
  }
}

StatusOr<StreamingComparison> CompareWithPlainReference(const GoldenModel& golden,
                                                        const std::vector<int32_t>& tokens,
                                                        const CacheSpec& spec) {
  LlamaModel& model = *golden.model;
  const int32_t vocab = model.config().vocab_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::unique_ptr<SessionCache> cache = golden.Cache(spec);
  STREAMD_ASSIGN_OR_RETURN(const std::vector<float> logits,
                           RunChunkedAll(model, tokens, *cache, spec.max_chunk));
  StreamingComparison r;
  r.effective = SessionCache::Effective(spec, model.config().context_length);
  PlainReferenceLlama reference(model, r.effective.sinks, r.effective.window);
  double nll = 0.0, ref_nll = 0.0;
  std::vector<float> ref_row(vocab);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const std::vector<double> ref = reference.Step(tokens[i]);
    std::copy(ref.begin(), ref.end(), ref_row.begin());
    nll += tools::TokenNll(&logits[i * vocab], vocab, tokens[i + 1]);
    ref_nll += tools::TokenNll(ref_row.data(), vocab, tokens[i + 1]);
    r.agree += Argmax(&logits[i * vocab], vocab) == Argmax(ref_row.data(), vocab);
  }
  r.scored = n - 1;
  r.ppl = std::exp(nll / (n - 1));
  r.ref_ppl = std::exp(ref_nll / (n - 1));
  return r;
}

}  // namespace streamd::testing
