// Opening a plan for a model about to be loaded: the one place `serve --plan`, `streamd build
// --reuse` and `streamd plan inspect` decide whether a plan file may be used here.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/backends/cpu/llama_model.h"
#include "engine/build_plan/plan_file.h"
#include "engine/gguf/gguf_file.h"
#include "engine/util/status.h"

namespace streamd {

// What a plan must match on this machine for `model_file`, this streamd version and the CPU
// this process runs on.
PlanExpectations ExpectationsHere(const gguf::GgufFile& model_file);

// Opens `plan_path` (every byte checked, plan_file.h; the reader knows only cpu plans) and checks
// it is for `model_file`, this streamd version and this machine. Errors name the file and the
// reason: FAILED_PRECONDITION for a plan that is well formed but bound to something else, the
// reader's code for a damaged one.
StatusOr<std::unique_ptr<PlanFile>> OpenPlanFor(const std::string& plan_path,
                                                const gguf::GgufFile& model_file);

// The pre-packed weights of an opened plan: the AMX copies in the form LlamaModel::Load takes
// them, with the layer matrices its 8-bit copies serve alone (not converted at load, so a
// model loaded with this must be given PrepackedVnni8Weights by ApplyTuning), and the 8-bit
// copies as LlamaModel::ApplyTuning takes them (empty when none).
LlamaModel::Prepacked PrepackedWeights(const PlanFile& plan);
std::span<const uint8_t> PrepackedVnni8Weights(const PlanFile& plan);

// Makes `model`'s KV cache what the plan says (CacheShape: int8 with the plan's scales, or f16).
Status ApplyKvCache(const PlanKvCache& kv, LlamaModel& model);

// The CPU model of `model_path` under the plan at `plan_path` (checked first with OpenPlanFor,
// before anything is packed; its pre-packed weights used, its tuning and KV cache applied), or with
// the built-in defaults when plan_path is empty. `plan_note` (optional) gets DescribePlan's line.
// Errors: "<model path>: ..." for the model, "model.plan: <plan path>: ..." for the plan. With
// `plan_rejected`, a plan that cannot be used (missing, damaged, for another model, version or
// machine, or refused when applied) is no error: it gets "<plan path>: <why>" and the model is
// loaded with the built-in defaults (model.plan: auto). Without a plan, a K-quant file's matrices
// take 8-bit activations where that kernel is fast (ApplyKQuantDefaults, k_quant_defaults.h)
// unless k_quant_activation_bits is 12 (model.k_quant_activation_bits), and `plan_note` says so;
// a plan makes its own choices.
StatusOr<std::unique_ptr<LlamaModel>> LoadCpuModel(const std::string& model_path,
                                                   const std::string& plan_path,
                                                   std::string* plan_note = nullptr,
                                                   std::string* plan_rejected = nullptr,
                                                   int k_quant_activation_bits = 8);

// One line for the log: "plan P: built 2026-12-03T10:00:00Z in 41 s; 2 threads, 3 level
// choices, split ..., weights amx-packed 94 MiB".
std::string DescribePlan(const PlanFile& plan);

}  // namespace streamd
