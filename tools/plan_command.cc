// `streamd plan inspect P [--model M.gguf] [--json]`: every choice a build plan made and every
// measurement behind it, and whether it may be used here (docs/BUILD.md).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "engine/build_plan/plan_binding.h"
#include "engine/build_plan/plan_file.h"
#include "engine/gguf/gguf_file.h"
#include "engine/util/version.h"
#include "tools/commands.h"

namespace streamd::tools {
namespace {

void PrintPlan(const PlanFile& file) {
  const BuildPlan& p = file.plan();
  std::printf("plan %s\n", file.path().c_str());
  std::printf("  format version %d, built by streamd %s at %s in %.1f s, target %s\n",
              p.format_version, p.streamd_version.c_str(), p.built_at.c_str(), p.build_seconds,
              p.target.c_str());
  std::printf("  model %s (fingerprint %s), built from %s\n", p.model_name.c_str(),
              p.model_fingerprint.c_str(), p.model_path.c_str());
  std::printf("  hardware %s\n", p.hardware.Describe().c_str());
  const CpuTuning& t = p.tuning;
  std::printf(
      "choices\n  threads %d\n  attention: one task per token from %d tokens per thread\n"
      "  attention: keys prefetched %d blocks ahead\n",
      t.threads, t.attention_batch_factor, t.attention_prefetch_runs);
  if (t.decode_by_tokens_from > 0) {
    std::printf(
        "  decode steps of %d or more sessions: token-parallel (each thread takes its "
        "sessions through every layer)\n",
        t.decode_by_tokens_from);
  } else {
    std::printf("  decode steps: every product's rows split across the threads\n");
  }
  for (int b = 0; b < kTokenBuckets; ++b) {
    const RowSplit& s = t.split[static_cast<size_t>(b)];
    std::printf("  split %s tokens: %d items per thread, %lld..%lld rows per item\n",
                TokenBucketName(b), s.items_per_thread, static_cast<long long>(s.min_rows),
                static_cast<long long>(s.max_rows));
  }
  if (t.isa.empty()) {
    std::printf("  kernel per shape: the active level, 12-bit activations, for every shape\n");
  }
  for (const ShapeIsa& s : t.isa) {
    std::printf("  kernel %lldx%lld %s, %s tokens: %s, %d-bit activations\n",
                static_cast<long long>(s.rows), static_cast<long long>(s.cols),
                WeightTypeName(s.type), TokenBucketName(s.bucket), kernels::cpu::IsaName(s.isa),
                s.activation_bits);
  }
  std::printf("  weights %s, %llu bytes\n", p.weights_layout.c_str(),
              static_cast<unsigned long long>(p.weights_bytes));
  const PlanKvCache& kv = p.kv_cache;
  if (kv.dtype == "int8") {
    const auto [k_lo, k_hi] = std::minmax_element(kv.k_scales.begin(), kv.k_scales.end());
    const auto [v_lo, v_hi] = std::minmax_element(kv.v_scales.begin(), kv.v_scales.end());
    std::printf(
        "  KV cache int8, per-channel scales for %d layers x %d KV heads x %d (K %.3g..%.3g, "
        "V %.3g..%.3g), calibrated on %lld tokens of %s\n",
        kv.n_layers, kv.n_kv_heads, kv.head_dim, *k_lo, *k_hi, *v_lo, *v_hi,
        static_cast<long long>(kv.calibration_tokens), kv.calibration_text.c_str());
  } else {
    std::printf("  KV cache f16\n");
  }
  std::printf("precision\n");
  if (p.precision.empty()) std::printf("  none considered (no --eval-text, or nothing to judge)\n");
  for (const PrecisionDecision& d : p.precision) {
    std::printf("  %s: %s; perplexity %.4f -> %.4f (%+.3f%%, limit %.3f%%) on %lld tokens of %s\n",
                d.name.c_str(), d.accepted ? "accepted" : "refused", d.baseline_ppl, d.ppl,
                d.increase_pct, d.max_increase_pct, static_cast<long long>(d.eval_tokens),
                d.eval_text.c_str());
  }
  std::printf("measurements\n");
  for (const PlanMeasurement& m : p.measurements) {
    std::printf("  %s: %.4g %s\n", m.what.c_str(), m.value, m.unit.c_str());
  }
}

}  // namespace

int PlanCommand(int argc, char** argv) {
  std::string model_path;
  bool json = false;
  FlagParser flags(
      "streamd plan inspect PLAN [--model M.gguf] [--json]\n"
      "Prints every choice and measurement of a build plan (streamd build), and whether this\n"
      "machine and streamd version (and, with --model, that model) may use it. Exit 1 when the\n"
      "file is damaged or the plan does not match.");
  flags.String("model", &model_path, "also check the plan is for this GGUF model");
  flags.Bool("json", &json, "print the plan's manifest as JSON instead");
  if (argc < 3 || std::string(argv[2]) != "inspect") {
    if (argc >= 3 && (std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h")) {
      return PrintHelp(flags);
    }
    return Fail(InvalidArgumentError("usage: streamd plan inspect PLAN [--model M.gguf] [--json]"));
  }
  if (argc < 4 || argv[3][0] == '-') {
    if (argc >= 4 && (std::string(argv[3]) == "--help" || std::string(argv[3]) == "-h")) {
      return PrintHelp(flags);
    }
    return Fail(InvalidArgumentError("streamd plan inspect: which plan file? (see --help)"));
  }
  const std::string plan_path = argv[3];
  if (Status s = flags.Parse(argc, argv, 4); !s.ok()) return Fail(s);
  if (flags.help_requested()) return PrintHelp(flags);
  auto file = PlanFile::Open(plan_path);
  if (!file.ok()) return Fail(file.status());
  if (json) {
    std::cout << PlanManifestJson((*file)->plan()) << std::endl;
  } else {
    PrintPlan(**file);
  }
  // Whether it may be used here: the version and hardware always, the model when given.
  const BuildPlan& p = (*file)->plan();
  PlanExpectations here{p.model_fingerprint, kStreamdVersion, CpuFingerprint()};
  if (!model_path.empty()) {
    auto gguf = gguf::GgufFile::Open(model_path);
    if (!gguf.ok()) return Fail(gguf.status(), model_path);
    here = ExpectationsHere(**gguf);
  }
  if (Status s = CheckPlanMatches(p, plan_path, here); !s.ok()) {
    std::fprintf(json ? stderr : stdout, "usable here: no: %s\n", s.message().c_str());
    return 1;
  }
  std::fprintf(
      json ? stderr : stdout, "usable here: yes%s\n",
      model_path.empty() ? " (this machine and version; give --model to check the model)" : "");
  return 0;
}

}  // namespace streamd::tools
