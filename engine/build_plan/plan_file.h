// The plan file: a BuildPlan and its pre-packed weights, written once by `streamd build` and
// mapped by `serve --plan` (docs/BUILD.md has the layout).
//
//   [0, 64)            header: magic "STRMPLAN", format version, then the offset, size and
//                      XXH3-64 of the manifest and of the weights (little-endian integers)
//   [64, ...)          manifest: the BuildPlan as JSON (UTF-8), what `streamd plan inspect`
//                      prints
//   [4096-aligned ...) weights: the pre-packed copies, page-aligned so the file maps straight
//                      into memory
//
// Reading checks everything before anything is used: the size, the magic, the version, that
// both sections lie inside the file, both checksums, and every manifest field (types, ranges,
// ValidateCpuTuning). No byte sequence crashes the reader (tests/fuzz/plan_fuzz.cc); errors
// name the file and the reason. Writing is atomic: a temporary file, fsync, rename, fsync of
// the directory, so a half-written plan is never seen under the plan's name.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/build_plan/build_plan.h"
#include "engine/util/status.h"

namespace streamd {

inline constexpr char kPlanMagic[8] = {'S', 'T', 'R', 'M', 'P', 'L', 'A', 'N'};
inline constexpr size_t kPlanHeaderBytes = 64;
inline constexpr size_t kPlanWeightsAlignment = 4096;
// The manifest of a small model's plan is a few KiB; a cap keeps a hostile length from
// becoming a huge allocation.
inline constexpr uint64_t kMaxPlanManifestBytes = 16 << 20;

// The manifest JSON of a plan, and back. ParsePlanManifest checks every field.
std::string PlanManifestJson(const BuildPlan& plan);
StatusOr<BuildPlan> ParsePlanManifest(std::string_view json);

// The whole file's bytes (header, manifest, padding, weights). plan.weights_bytes is set from
// `weights`.
std::vector<uint8_t> SerializePlan(BuildPlan plan, std::span<const uint8_t> weights);

// A plan read from bytes: the plan and where its weights are inside those bytes.
struct ParsedPlan {
  BuildPlan plan;
  uint64_t weights_offset = 0;
};
StatusOr<ParsedPlan> ParsePlanBytes(std::span<const uint8_t> bytes);

Status WritePlanFile(const std::string& path, const BuildPlan& plan,
                     std::span<const uint8_t> weights);

// A plan file mapped read-only; its weights stay valid as long as the object lives.
// Where `streamd build` writes a model's plan unless told otherwise, and where model.plan: auto
// looks for it: the model's path with .plan instead of .gguf (or .plan appended).
std::string PlanBesideModel(const std::string& model_path);

class PlanFile {
 public:
  // Errors: "<path>: <reason>".
  static StatusOr<std::unique_ptr<PlanFile>> Open(const std::string& path);
  ~PlanFile();
  PlanFile(const PlanFile&) = delete;
  PlanFile& operator=(const PlanFile&) = delete;

  const BuildPlan& plan() const { return parsed_.plan; }
  std::span<const uint8_t> weights() const;
  // Drops this process's resident pages of [begin, begin + bytes), a range of the mapping (the
  // pages wholly inside it): read-only and private, a later read faults the same bytes back in
  // from the file. Open calls it on the whole file once it is checked, and the loader on each
  // range of weights once copied out, so that the plan's pages never all sit in memory beside
  // the copies. Advice only: a failure leaves the pages where they were.
  void ReleasePages(const uint8_t* begin, uint64_t bytes) const;
  const std::string& path() const { return path_; }

 private:
  PlanFile() = default;
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  ParsedPlan parsed_;
};

}  // namespace streamd
