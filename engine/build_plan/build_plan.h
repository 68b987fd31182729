// BuildPlan: what `streamd build` decided for one model on one machine (docs/BUILD.md). A plain
// value; plan_file.h turns it into a file and back.
//
// A plan is bound three ways: to the model (its fingerprint, engine/snapshot/model_fingerprint.h),
// to the hardware it was tuned on (hardware_fingerprint.h) and to the streamd version that
// built it (its kernels, and the layout of its pre-packed weights, are that version's). Every
// choice comes with the measurements that made it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backends/cpu/cpu_tuning.h"
#include "engine/build_plan/hardware_fingerprint.h"
#include "engine/util/status.h"

namespace streamd {

// 2: the manifest gained kv_cache. 3: tuning.attention_prefetch_runs. 4:
// tuning.decode_by_tokens_from. 5: Q4_K tensors' 8-bit copies in Q4_K's records
// (kernels::cpu::PackForVnni8), no longer their Q4_1 conversion's. 6: Q6_K's 8-bit copies in
// 6-bit super-block records (6.625 bits per weight, where its byte records took 9).
inline constexpr int32_t kPlanFormatVersion = 6;

// One number the build measured: a candidate's time, a step time with and without the plan,
// a perplexity. `what` says what was measured in words ("decode step, 16 sessions, tuned").
struct PlanMeasurement {
  std::string what;
  double value = 0;
  std::string unit;  // "ms", "tok/s", "ppl", "%", "s"
  bool operator==(const PlanMeasurement&) const = default;
};

// A precision cut the build considered, and the eval gate's verdict on it.
struct PrecisionDecision {
  std::string name;  // "kernel choices", "int8 kv cache", ...
  bool accepted = false;
  double baseline_ppl = 0;  // streaming (sink) perplexity on the eval text without it
  double ppl = 0;           // ... with it
  double increase_pct = 0;  // 100 * (ppl / baseline_ppl - 1)
  double max_increase_pct = 0;
  std::string eval_text;  // the file it was measured on, and how many tokens
  int64_t eval_tokens = 0;
  bool operator==(const PrecisionDecision&) const = default;
};

// What the KV cache holds under the plan: "f16" (as without a plan), or "int8" with the
// calibrated scales (engine/cache/kv_scales.h, [n_layers][n_kv_heads][head_dim] each for K and
// V) and where they were calibrated.
struct PlanKvCache {
  std::string dtype = "f16";
  int32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  std::vector<float> k_scales, v_scales;
  std::string calibration_text;  // the file, and which of its tokens
  int64_t calibration_tokens = 0;
  bool operator==(const PlanKvCache&) const = default;
};

struct BuildPlan {
  int32_t format_version = kPlanFormatVersion;
  std::string streamd_version;
  std::string target = "cpu";
  std::string model_fingerprint;  // 32 hex digits
  std::string model_name;
  std::string model_path;  // where the model was at build time (informational)
  HardwareFingerprint hardware;
  std::string built_at;  // UTC, ISO 8601
  double build_seconds = 0;
  CpuTuning tuning;
  // Pre-packed weights stored after the manifest: "none", "amx-packed" (LlamaModel's AMX copies,
  // in their layout), "vnni8-packed" (the rows-in-lanes copies of the matrices the tuning runs
  // with 8-bit activations, kernels::cpu::PackForVnni8, in ProductMatrices order) or
  // "amx-packed+vnni8-packed": the AMX copies are the first amx_bytes, the 8-bit ones the rest.
  std::string weights_layout = "none";
  uint64_t weights_bytes = 0;
  uint64_t amx_bytes = 0;
  PlanKvCache kv_cache;
  std::vector<PrecisionDecision> precision;
  std::vector<PlanMeasurement> measurements;
  bool operator==(const BuildPlan&) const = default;
};

// What a plan must match to be used here; errors name the plan file and both sides.
struct PlanExpectations {
  std::string model_fingerprint;
  std::string streamd_version;
  HardwareFingerprint hardware;
};
Status CheckPlanMatches(const BuildPlan& plan, const std::string& plan_path,
                        const PlanExpectations& here);

}  // namespace streamd
