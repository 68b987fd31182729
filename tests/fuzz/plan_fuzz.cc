// libFuzzer target for the build-plan reader (engine/build_plan/plan_file.h): any byte string must
// yield either a plan whose fields pass every check the reader promises (ValidateCpuTuning, the
// weights section inside the input and aligned) and that serializes back to bytes parsing to
// the same plan, or an error with a non-empty one-line message. Never a crash, a sanitizer
// report or an allocation beyond a few times the input (-malloc_limit_mb in fuzz-smoke.sh).
//
// Both sections sit under XXH3-64 checksums that the reader checks before it parses them, so
// the custom mutator rewrites the checksums after most mutations (and leaves them stale in the
// others, so the checksum path is fuzzed too).
//
// Built twice: as plan_fuzz (libFuzzer main) and, with STREAMD_PLAN_FUZZ_SEEDS, as
// plan_fuzz_seeds, which writes the seed corpus with the writer.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "engine/build_plan/plan_file.h"

namespace {

using namespace streamd;  // NOLINT: a fuzz target

void CheckMessage(const Status& status) {
  const std::string& msg = status.message();
  if (status.ok() || msg.empty() || msg.find('\n') != std::string::npos) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto parsed = ParsePlanBytes(bytes);
  if (!parsed.ok()) {
    CheckMessage(parsed.status());
    return 0;
  }
  const BuildPlan& plan = parsed->plan;
  if (!ValidateCpuTuning(plan.tuning).ok()) __builtin_trap();
  if (parsed->weights_offset % kPlanWeightsAlignment != 0) __builtin_trap();
  if (parsed->weights_offset > size || plan.weights_bytes > size - parsed->weights_offset) {
    __builtin_trap();
  }
  // The manifest is checked in full: the same plan comes back from its JSON alone...
  auto manifest = ParsePlanManifest(PlanManifestJson(plan));
  if (!manifest.ok() || !(*manifest == plan)) __builtin_trap();
  // ...and from the bytes the writer makes of it, with the same weights.
  const std::span<const uint8_t> weights =
      bytes.subspan(parsed->weights_offset, plan.weights_bytes);
  const std::vector<uint8_t> again = SerializePlan(plan, weights);
  auto reparsed = ParsePlanBytes(again);
  if (!reparsed.ok() || !(reparsed->plan == plan)) __builtin_trap();
  return 0;
}

#ifndef STREAMD_PLAN_FUZZ_SEEDS
namespace {

uint64_t GetU64(const uint8_t* at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | at[i];
  return v;
}
void PutU64(uint8_t* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the manifest's and the weights' checksums where their ranges lie inside `bytes`
// (header layout: plan_file.h).
void RewriteChecksums(std::span<uint8_t> bytes) {
  if (bytes.size() < kPlanHeaderBytes) return;
  struct Section {
    size_t offset_at, size_at, hash_at;
  };
  for (const Section s : {Section{16, 24, 32}, Section{40, 48, 56}}) {
    const uint64_t offset = GetU64(&bytes[s.offset_at]);
    const uint64_t size = GetU64(&bytes[s.size_at]);
    if (offset > bytes.size() || size > bytes.size() - offset) continue;
    PutU64(&bytes[s.hash_at], XXH3_64bits(bytes.data() + offset, size));
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 8 != 0) RewriteChecksums({data, size});
  return size;
}
#endif

#ifdef STREAMD_PLAN_FUZZ_SEEDS
#include <cstdio>
#include <fstream>

namespace {

void Save(const std::string& dir, const std::string& name, std::span<const uint8_t> bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

BuildPlan SeedPlan() {
  using kernels::cpu::Isa;
  using kernels::cpu::WeightType;
  BuildPlan p;
  p.streamd_version = "fuzz";
  p.model_fingerprint = "f0220123456789abcdef0123456789ab";
  p.model_name = "fuzz-model";
  p.model_path = "/m.gguf";
  p.hardware.kind = "cpu";
  p.hardware.vendor = "AuthenticAMD";
  p.hardware.model = "Fuzz CPU";
  p.hardware.isa_flags = {"avx2", "avx512_vnni", "fma"};
  p.hardware.kernel_level = "avx512-vnni";
  p.hardware.cpus = 2;
  p.built_at = "2026-12-03T10:00:00Z";
  p.build_seconds = 20.5;
  p.tuning.threads = 2;
  p.kv_cache.dtype = "int8";  // a small int8 KV section, so mutations reach its checks
  p.kv_cache.n_layers = 2;
  p.kv_cache.n_kv_heads = 1;
  p.kv_cache.head_dim = 4;
  p.kv_cache.k_scales = {0.01f, 0.02f, 0.03f, 0.04f, 0.05f, 0.06f, 0.07f, 0.08f};
  p.kv_cache.v_scales = {0.5f, 0.25f, 0.125f, 1.0f, 2.0f, 0.1f, 0.2f, 0.3f};
  p.kv_cache.calibration_text = "calib.txt tokens 0..4096";
  p.kv_cache.calibration_tokens = 4096;
  p.tuning.split[1] = {1, 48, 3072};
  p.tuning.decode_by_tokens_from = 16;
  p.tuning.isa.push_back({WeightType::kQ4_1, 576, 1536, 0, Isa::kAvx2});
  p.precision.push_back(
      {"instruction-set level per product shape", true, 17.8, 17.81, 0.05, 1.0, "eval.txt", 2048});
  p.measurements.push_back({"decode step, 1 session, tuned", 2.6, "ms"});
  return p;
}

}  // namespace

// plan_fuzz_seeds DIR
int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const BuildPlan plan = SeedPlan();
  Save(dir, "no_weights", SerializePlan(plan, {}));
  std::vector<uint8_t> weights(320);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<uint8_t>(i * 7);
  BuildPlan packed = plan;
  packed.weights_layout = "amx-packed";
  packed.amx_bytes = 320;
  Save(dir, "amx_packed", SerializePlan(packed, weights));
  BuildPlan both = plan;
  both.weights_layout = "amx-packed+vnni8-packed";
  both.amx_bytes = 128;
  const std::vector<uint8_t> full = SerializePlan(both, weights);
  Save(dir, "amx_and_vnni8", full);
  BuildPlan bare;  // defaults everywhere
  bare.streamd_version = "fuzz";
  bare.model_fingerprint = plan.model_fingerprint;
  bare.hardware = plan.hardware;
  Save(dir, "bare", SerializePlan(bare, {}));
  Save(dir, "cut", std::span<const uint8_t>(full).first(full.size() / 2));
  return 0;
}
#endif  // STREAMD_PLAN_FUZZ_SEEDS
