#include "engine/plan/plan_binding.h"

#include "engine/snapshot/model_fingerprint.h"
#include "engine/util/version.h"

namespace streamd {

PlanExpectations ExpectationsHere(const gguf::GgufFile& model_file) {
  return {ModelFingerprint(model_file), kStreamdVersion, CpuFingerprint()};
}

StatusOr<std::unique_ptr<PlanFile>> OpenPlanFor(const std::string& plan_path,
                                                const gguf::GgufFile& model_file) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<PlanFile> plan, PlanFile::Open(plan_path));
  STREAMD_RETURN_IF_ERROR(CheckPlanMatches(plan->plan(), plan_path, ExpectationsHere(model_file)));
  return plan;
}

LlamaModel::Prepacked PrepackedWeights(const PlanFile& plan) {
  LlamaModel::Prepacked p;
  if (plan.plan().weights_layout == "amx-packed") {
    p.amx_bytes = plan.weights().data();
    p.amx_size = plan.weights().size();
  }
  return p;
}

std::string DescribePlan(const PlanFile& file) {
  const BuildPlan& p = file.plan();
  const CpuTuning& t = p.tuning;
  std::string line = file.path() + ": built " + p.built_at + " in " +
                     std::to_string(static_cast<int64_t>(p.build_seconds + 0.5)) + " s; " +
                     std::to_string(t.threads) + " threads, attention grouping from " +
                     std::to_string(t.attention_batch_factor) + " tokens per thread, " +
                     std::to_string(t.isa.size()) + " level choices per shape, splits";
  for (int b = 0; b < kTokenBuckets; ++b) {
    const RowSplit& s = t.split[static_cast<size_t>(b)];
    line += std::string(" ") + TokenBucketName(b) + ":" + std::to_string(s.items_per_thread) +
            "/" + std::to_string(s.min_rows) + "-" + std::to_string(s.max_rows);
  }
  line += "; weights " + p.weights_layout;
  if (p.weights_bytes > 0) line += " " + std::to_string((p.weights_bytes + (1 << 19)) >> 20) + " MiB";
  return line;
}

}  // namespace streamd
