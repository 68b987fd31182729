#include "engine/build_plan/plan_binding.h"

#include <map>
#include <tuple>

#include "engine/backends/cpu/k_quant_defaults.h"
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

namespace {

// Prepacked::served_by_vnni8 of a plan: none without 8-bit copies.
ServedByPlanCopies ServedByPlanVnni8Copies(const PlanFile& plan) {
  if (PrepackedVnni8Weights(plan).empty()) return nullptr;
  // The shapes whose every token bucket the tuning runs at 8 bits.
  std::map<std::tuple<kernels::cpu::WeightType, int64_t, int64_t>, int> eight_bit_buckets;
  for (const ShapeIsa& s : plan.plan().tuning.isa) {
    if (s.activation_bits == 8) ++eight_bit_buckets[{s.type, s.rows, s.cols}];
  }
  return [eight_bit_buckets](kernels::cpu::WeightType type, int64_t rows, int64_t cols) {
    const auto it = eight_bit_buckets.find({type, rows, cols});
    // As ServedByVnni8CopyAlone decides once the copies are in place.
    return it != eight_bit_buckets.end() && it->second == kTokenBuckets &&
           Vnni8CopyCanServeAlone(type, rows, cols);
  };
}

}  // namespace

LlamaModel::Prepacked PrepackedWeights(const PlanFile& plan) {
  LlamaModel::Prepacked p;
  if (plan.plan().amx_bytes > 0) {
    p.amx_bytes = plan.weights().data();
    p.amx_size = plan.plan().amx_bytes;
  }
  p.served_by_vnni8 = ServedByPlanVnni8Copies(plan);
  return p;
}

std::span<const uint8_t> PrepackedVnni8Weights(const PlanFile& plan) {
  return plan.weights().subspan(plan.plan().amx_bytes);
}

Status ApplyKvCache(const PlanKvCache& kv, LlamaModel& model) {
  if (kv.dtype != "int8") return model.SetInt8KvCache(nullptr);
  STREAMD_ASSIGN_OR_RETURN(auto scales, KvInt8Scales::Make(kv.n_layers, kv.n_kv_heads, kv.head_dim,
                                                           kv.k_scales, kv.v_scales));
  return model.SetInt8KvCache(std::move(scales));
}

StatusOr<std::unique_ptr<LlamaModel>> LoadCpuModel(const std::string& model_path,
                                                   const std::string& plan_path,
                                                   std::string* plan_note,
                                                   std::string* plan_rejected,
                                                   int k_quant_activation_bits) {
  // A problem of the plan: the load's error, or (plan_rejected) why the defaults serve instead.
  // The model is loaded again without the plan: one loaded for it may lack rows it skipped.
  const auto plan_problem = [&](StatusCode code,
                                const std::string& why) -> StatusOr<std::unique_ptr<LlamaModel>> {
    if (plan_rejected == nullptr) return Status(code, "model.plan: " + why);
    *plan_rejected = why;
    if (plan_note != nullptr) plan_note->clear();
    return LoadCpuModel(model_path, "", nullptr, nullptr, k_quant_activation_bits);
  };
  auto file = gguf::GgufFile::Open(model_path);
  if (!file.ok()) return file.status();  // Open's errors name the path
  std::unique_ptr<PlanFile> plan;
  LlamaModel::Prepacked prepacked;
  if (!plan_path.empty()) {
    auto opened = OpenPlanFor(plan_path, **file);
    if (!opened.ok()) return plan_problem(opened.status().code(), opened.status().message());
    plan = std::move(opened).value();
    prepacked = PrepackedWeights(*plan);
  } else if (k_quant_activation_bits == 8) {
    prepacked.packed_from_file = KQuantCopyServesAlone;  // ApplyKQuantDefaults below packs them
  }
  auto model = LlamaModel::FromFile(std::move(file).value(), &prepacked);
  if (!model.ok())
    return Status(model.status().code(), model_path + ": " + model.status().message());
  if (plan != nullptr) {
    // Each range of the plan's copies leaves memory once copied out of the mapping.
    const SourceCopied release = [&plan](const uint8_t* begin, uint64_t bytes) {
      plan->ReleasePages(begin, bytes);
    };
    if (Status s =
            (*model)->ApplyTuning(plan->plan().tuning, PrepackedVnni8Weights(*plan), release);
        !s.ok()) {
      return plan_problem(s.code(), plan_path + ": " + s.message());
    }
    if (Status s = ApplyKvCache(plan->plan().kv_cache, **model); !s.ok()) {
      return plan_problem(s.code(), plan_path + ": kv_cache: " + s.message());
    }
    // The plan is applied for good: the converted rows its 8-bit products never read go.
    (*model)->ReleaseUnreadConvertedRows();
    if (plan_note != nullptr) *plan_note = DescribePlan(*plan);
  } else if (k_quant_activation_bits == 8) {
    auto packed = ApplyKQuantDefaults(**model);
    if (!packed.ok()) {
      return Status(packed.status().code(), model_path + ": " + packed.status().message());
    }
    if (plan_note != nullptr && *packed > 0) {
      *plan_note = "none: the built-in defaults, a K-quant file's matrices at 8-bit activations (" +
                   std::to_string((*packed + (1 << 19)) >> 20) +
                   " MiB of copies packed at load; model.k_quant_activation_bits: 12 for 12 bits)";
    }
  }
  return model;
}

std::string DescribePlan(const PlanFile& file) {
  const BuildPlan& p = file.plan();
  const CpuTuning& t = p.tuning;
  std::string line =
      file.path() + ": built " + p.built_at + " in " +
      std::to_string(static_cast<int64_t>(p.build_seconds + 0.5)) + " s; " +
      std::to_string(t.threads) + " threads, attention grouping from " +
      std::to_string(t.attention_batch_factor) + " tokens per thread, " + "prefetch " +
      std::to_string(t.attention_prefetch_runs) + " blocks ahead, " +
      (t.decode_by_tokens_from > 0
           ? "decode token-parallel from " + std::to_string(t.decode_by_tokens_from) + " sessions, "
           : std::string("decode split by rows, ")) +
      std::to_string(t.isa.size()) + " kernel choices per shape, splits";
  for (int b = 0; b < kTokenBuckets; ++b) {
    const RowSplit& s = t.split[static_cast<size_t>(b)];
    line += std::string(" ") + TokenBucketName(b) + ":" + std::to_string(s.items_per_thread) + "/" +
            std::to_string(s.min_rows) + "-" + std::to_string(s.max_rows);
  }
  line += "; KV cache " + p.kv_cache.dtype + "; weights " + p.weights_layout;
  if (p.weights_bytes > 0)
    line += " " + std::to_string((p.weights_bytes + (1 << 19)) >> 20) + " MiB";
  return line;
}

}  // namespace streamd
