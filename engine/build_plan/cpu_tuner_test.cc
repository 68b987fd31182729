// The tuner and what it times with: StepTimer's workloads and errors, TuneCpu's result (valid,
// applied, numerics-exact when asked, bounded by its deadline) and OpenPlanFor's binding of a
// plan file to a model, a version and this machine.
#include "engine/build_plan/cpu_tuner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "engine/build_plan/machine_load.h"
#include "engine/build_plan/plan_binding.h"
#include "engine/build_plan/step_timer.h"
#include "engine/cache/kv_scales.h"
#include "engine/snapshot/model_fingerprint.h"
#include "engine/util/version.h"
#include "tests/support/plan_test_util.h"

namespace streamd {
namespace {

using plan_test::Logits;
using plan_test::QuantSpec;
using plan_test::RandomTokens;
using ::testing::HasSubstr;

CpuTunerOptions QuickOptions() {
  CpuTunerOptions o;
  o.sinks = 4;
  o.window = 28;
  o.rounds = 1;
  o.steps_per_sample = 1;
  o.thread_candidates = {1, 2};
  return o;
}

TEST(StepTimerTest, TimesTheStepsAskedFor) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok()) << model.status().message();
  for (const StepWorkload w : {StepWorkload{3, 1, 4, 28}, StepWorkload{1, 16, 4, 28}}) {
    auto timer = StepTimer::Create(**model, w);
    ASSERT_TRUE(timer.ok()) << timer.status().message();
    auto ms = (*timer)->Run(4);
    ASSERT_TRUE(ms.ok()) << ms.status().message();
    ASSERT_EQ(ms->size(), 4u);
    for (double v : *ms) EXPECT_GT(v, 0.0);
    EXPECT_GT((*timer)->kv_bytes_per_step(), 0.0);
    EXPECT_GT((*timer)->bytes_per_step(), (*timer)->kv_bytes_per_step());
  }
}

TEST(StepTimerTest, BadWorkloadsNameTheField) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  EXPECT_THAT(StepTimer::Create(**model, {0, 1, 4, 28}).status().message(),
              HasSubstr("sessions = 0 outside [1, 4096]"));
  EXPECT_THAT(StepTimer::Create(**model, {1, 257, 4, 28}).status().message(),
              HasSubstr("tokens_per_session = 257 outside [1, 256]"));
  EXPECT_THAT(StepTimer::Create(**model, {1, 1, 4, 0}).status().message(), HasSubstr("window = 0"));
}

// Scales of 1 for every channel of `model`: an int8 cache of the model's shape.
std::shared_ptr<const KvInt8Scales> UnitScales(const LlamaModel& model) {
  const LlamaConfig& c = model.config();
  const size_t n = static_cast<size_t>(c.n_layers) * c.n_kv_heads * c.head_dim;
  auto scales = KvInt8Scales::Make(c.n_layers, c.n_kv_heads, c.head_dim,
                                   std::vector<float>(n, 1.0f), std::vector<float>(n, 1.0f));
  EXPECT_TRUE(scales.ok()) << scales.status().message();
  return scales.ok() ? *scales : nullptr;
}

TEST(StepTimerTest, TimesTheCacheTheModelHolds) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  const StepWorkload w{2, 1, 4, 28};
  auto f16 = StepTimer::Create(**model, w);
  ASSERT_TRUE(f16.ok()) << f16.status().message();
  ASSERT_TRUE((*model)->SetInt8KvCache(UnitScales(**model)).ok());
  auto int8 = StepTimer::Create(**model, w);
  ASSERT_TRUE(int8.ok()) << int8.status().message();
  EXPECT_EQ((*int8)->kv_bytes_per_step() * 2, (*f16)->kv_bytes_per_step());
  auto ms = (*int8)->Run(2);  // the model runs the int8 attention on it
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  EXPECT_EQ(ms->size(), 2u);
}

TEST(StepTimerTest, MedianIsTheMiddleValue) {
  EXPECT_EQ(Median({}), 0.0);
  EXPECT_EQ(Median({3.0}), 3.0);
  EXPECT_EQ(Median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(Median({4.0, 1.0, 3.0, 2.0}), 3.0);  // the upper middle
}

TEST(CpuTunerTest, NumericsExactTuningIsValidAppliedAndChangesNoLogit) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  const std::vector<int32_t> tokens = RandomTokens((*model)->config().vocab_size, 48);
  const std::vector<float> before = Logits(**model, tokens);
  CpuTunerOptions o = QuickOptions();
  o.numerics_exact_only = true;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  auto result = TuneCpu(**model, o);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(ValidateCpuTuning(result->tuning).ok());
  EXPECT_TRUE(result->tuning.isa.empty()) << "numerics-exact tuning chose a level per shape";
  EXPECT_EQ((*model)->tuning(), result->tuning) << "the result is not the applied tuning";
  EXPECT_THAT(result->tuning.threads, ::testing::AnyOf(1, 2));
  // Every comparison was logged and measured: threads, attention grouping and prefetch, 3 knobs
  // x 5 buckets.
  EXPECT_GE(lines.size(), 3u + 3u * kTokenBuckets);
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.rfind("attention prefetch blocks:", 0) == 0;
  }));
  EXPECT_FALSE(result->measurements.empty());
  for (const PlanMeasurement& m : result->measurements) {
    if (m.unit == "%") {
      EXPECT_GE(m.value, 0.0) << m.what;  // the machine's load while threads were timed
      EXPECT_LE(m.value, 100.0) << m.what;
    } else {
      EXPECT_GT(m.value, 0.0) << m.what;
    }
  }
  EXPECT_EQ(Logits(**model, tokens), before);
}

TEST(MachineLoadTest, OthersShareIsAFraction) {
  const MachineLoad load;
  volatile double sink = 0;
  for (int i = 0; i < 20000000; ++i) sink = sink + 1e-9 * i;  // our own CPU time, not others'
  const double share = load.OthersShare();
  EXPECT_GE(share, 0.0);
  EXPECT_LE(share, 1.0);
}

TEST(CpuTunerTest, LevelChoicesNameShapesOfTheModel) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  CpuTunerOptions o = QuickOptions();
  o.min_gain = 0;  // any faster level wins: exercises the choice, whatever this CPU prefers
  auto result = TuneCpu(**model, o);
  ASSERT_TRUE(result.ok()) << result.status().message();
  // Whatever was chosen is a shape of this model at a level this CPU runs, and applies.
  for (const ShapeIsa& s : result->tuning.isa) {
    EXPECT_TRUE(kernels::cpu::IsaSupported(s.isa));
    if (s.activation_bits == 8) {  // 8-bit activations: at the active level, where it has them
      EXPECT_EQ(s.isa, kernels::cpu::ActiveIsa());
      EXPECT_TRUE(kernels::cpu::FastInt8Activations(s.type));
    } else {
      EXPECT_LT(static_cast<int>(s.isa), static_cast<int>(kernels::cpu::ActiveIsa()));
    }
  }
  EXPECT_TRUE((*model)->ApplyTuning(result->tuning).ok());
  const bool several_levels = kernels::cpu::ActiveIsa() > kernels::cpu::Isa::kAvx2;
  const bool timed_products =
      std::any_of(result->measurements.begin(), result->measurements.end(),
                  [](const PlanMeasurement& m) { return m.what.rfind("product ", 0) == 0; });
  EXPECT_EQ(timed_products, several_levels);
}

// With precision cuts allowed and two threads, the tuner times token-parallel decode against the
// row split; the choice it keeps is one of the candidates and applies.
TEST(CpuTunerTest, TokenParallelDecodeIsTimedAgainstTheRowSplit) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  CpuTunerOptions o = QuickOptions();
  o.thread_candidates = {2};
  o.min_gain = 0;  // any faster candidate wins: exercises the choice
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  auto result = TuneCpu(**model, o);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const auto line = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.rfind("decode token-parallel from:", 0) == 0;
  });
  ASSERT_NE(line, lines.end()) << "token-parallel decode was not timed";
  EXPECT_THAT(*line, HasSubstr(" 0 "));
  EXPECT_THAT(*line, HasSubstr(" 16 "));
  EXPECT_THAT(result->tuning.decode_by_tokens_from, ::testing::AnyOf(0, 4, 8, 16));
  EXPECT_EQ((*model)->tuning(), result->tuning);
  // Numerics-exact tuning never takes it.
  o.numerics_exact_only = true;
  lines.clear();
  auto exact = TuneCpu(**model, o);
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  EXPECT_TRUE(std::none_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.rfind("decode token-parallel from:", 0) == 0;
  }));
}

TEST(CpuTunerTest, BadOptionsAndAPassedDeadlineAreRefused) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  const CpuTuning original = (*model)->tuning();
  CpuTunerOptions o = QuickOptions();
  o.rounds = 0;
  EXPECT_THAT(TuneCpu(**model, o).status().message(), HasSubstr("rounds = 0 outside [1, 101]"));
  o = QuickOptions();
  o.min_gain = 1.5;
  EXPECT_THAT(TuneCpu(**model, o).status().message(), HasSubstr("min_gain"));
  o = QuickOptions();
  o.thread_candidates = {0};
  EXPECT_THAT(TuneCpu(**model, o).status().message(), HasSubstr("thread candidate 0"));
  o = QuickOptions();
  o.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(TuneCpu(**model, o).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*model)->tuning().split, original.split);
}

TEST(CpuTunerTest, ComparisonWithDefaultsMeasuresBoth) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  CpuTuning tuned;
  tuned.threads = 1;
  tuned.split[0] = {1, 48, 384};
  CpuTunerOptions o = QuickOptions();
  auto m = CompareWithDefaults(**model, tuned, o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->size(), 6u);
  EXPECT_EQ((*m)[0].what, "decode step, 1 session, default");
  EXPECT_EQ((*m)[3].what, "decode step, 16 sessions, tuned");
  for (const PlanMeasurement& x : *m) EXPECT_GT(x.value, 0.0) << x.what;
  EXPECT_EQ((*model)->tuning().threads, 1) << "the tuned knobs are left applied";
}

TEST(CpuTunerTest, ComparisonWithAnInt8PlanKeepsTheModelsCache) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  const std::shared_ptr<const KvInt8Scales> scales = UnitScales(**model);
  ASSERT_TRUE((*model)->SetInt8KvCache(scales).ok());
  CpuTuning tuned;
  tuned.threads = 1;
  auto m = CompareWithDefaults(**model, tuned, QuickOptions());
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->size(), 6u);
  for (const PlanMeasurement& x : *m) EXPECT_GT(x.value, 0.0) << x.what;
  // The defaults were timed on f16 caches; the model is left with the plan's int8 cache.
  EXPECT_EQ((*model)->CacheShape().dtype, kernels::KvDtype::kInt8);
  EXPECT_EQ((*model)->CacheShape().int8_scales, scales);
}

TEST(CpuTunerTest, RetuningTheAttentionChangesOnlyItsKnobsAndNoLogit) {
  auto model = MakeSyntheticModel(QuantSpec());
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE((*model)->SetInt8KvCache(UnitScales(**model)).ok());
  CpuTuning start;
  start.threads = 1;
  start.split[0] = {1, 48, 384};
  ASSERT_TRUE((*model)->ApplyTuning(start).ok());
  const std::vector<int32_t> tokens = RandomTokens((*model)->config().vocab_size, 40);
  const std::vector<float> before = Logits(**model, tokens);
  CpuTunerOptions o = QuickOptions();
  o.min_gain = 0;  // any faster candidate wins: exercises the choice
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  auto result = RetuneAttention(**model, o);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("attention grouping factor:", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("attention prefetch blocks:", 0), 0u) << lines[1];
  CpuTuning expected = start;
  expected.attention_batch_factor = result->tuning.attention_batch_factor;
  expected.attention_prefetch_runs = result->tuning.attention_prefetch_runs;
  EXPECT_EQ(result->tuning, expected) << "a knob other than the attention's changed";
  EXPECT_EQ((*model)->tuning(), result->tuning) << "the result is not the applied tuning";
  EXPECT_EQ(Logits(**model, tokens), before);
  o.rounds = 0;
  EXPECT_THAT(RetuneAttention(**model, o).status().message(), HasSubstr("rounds = 0"));
}

// A plan for the synthetic model, as `streamd build` would write it for this machine.
BuildPlan PlanFor(const gguf::GgufFile& file) {
  BuildPlan p;
  const PlanExpectations here = ExpectationsHere(file);
  p.streamd_version = here.streamd_version;
  p.model_fingerprint = here.model_fingerprint;
  p.hardware = here.hardware;
  p.model_name = "synthetic";
  p.built_at = "2026-12-03T10:00:00Z";
  p.tuning.threads = 1;
  return p;
}

TEST(PlanBindingTest, OpensOnlyAPlanForThisModelVersionAndMachine) {
  const SyntheticModelSpec spec = QuantSpec();
  auto bytes = BuildSyntheticModel(spec);
  ASSERT_TRUE(bytes.ok());
  auto file = gguf::GgufFile::FromBuffer(bytes->data(), bytes->size());
  ASSERT_TRUE(file.ok());
  const std::string dir = testing::TempDir() + "/plan_binding";
  std::filesystem::create_directories(dir);

  const std::string good = dir + "/good.plan";
  ASSERT_TRUE(WritePlanFile(good, PlanFor(**file), {}).ok());
  auto opened = OpenPlanFor(good, **file);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_THAT(DescribePlan(**opened), HasSubstr("1 threads"));
  EXPECT_EQ(PrepackedWeights(**opened).amx_size, 0u);

  SyntheticModelSpec other_spec = spec;
  other_spec.ffn_dim = 384;
  auto other_bytes = BuildSyntheticModel(other_spec);
  ASSERT_TRUE(other_bytes.ok());
  auto other = gguf::GgufFile::FromBuffer(other_bytes->data(), other_bytes->size());
  ASSERT_TRUE(other.ok());
  const Status wrong_model = OpenPlanFor(good, **other).status();
  EXPECT_EQ(wrong_model.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong_model.message(), HasSubstr(good + ": the plan is for another model"));

  BuildPlan old = PlanFor(**file);
  old.streamd_version = "0.0.1";
  ASSERT_TRUE(WritePlanFile(dir + "/old.plan", old, {}).ok());
  EXPECT_THAT(OpenPlanFor(dir + "/old.plan", **file).status().message(),
              HasSubstr("built by streamd 0.0.1; this is streamd " + std::string(kStreamdVersion)));

  BuildPlan elsewhere = PlanFor(**file);
  elsewhere.hardware.model = "Some Other CPU";
  ASSERT_TRUE(WritePlanFile(dir + "/elsewhere.plan", elsewhere, {}).ok());
  EXPECT_THAT(OpenPlanFor(dir + "/elsewhere.plan", **file).status().message(),
              HasSubstr("tuned on other hardware: plan: cpu"));

  BuildPlan gpu = PlanFor(**file);
  gpu.target = "cuda";
  ASSERT_TRUE(WritePlanFile(dir + "/gpu.plan", gpu, {}).ok());
  EXPECT_THAT(OpenPlanFor(dir + "/gpu.plan", **file).status().message(),
              HasSubstr("target \"cuda\" is not one this streamd runs"));

  EXPECT_EQ(OpenPlanFor(dir + "/missing.plan", **file).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace streamd
