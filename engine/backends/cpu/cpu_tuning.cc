#include "engine/backends/cpu/cpu_tuning.h"

#include <set>
#include <tuple>

namespace streamd {

using kernels::cpu::Isa;
using kernels::cpu::WeightType;

int TokenBucket(int64_t n) {
  if (n <= 1) return 0;
  if (n < 6) return 1;
  if (n < 16) return 2;
  if (n < 64) return 3;
  return 4;
}

const char* TokenBucketName(int bucket) {
  static constexpr const char* kNames[kTokenBuckets] = {"1", "2-5", "6-15", "16-63", "64+"};
  return bucket >= 0 && bucket < kTokenBuckets ? kNames[bucket] : "?";
}

std::array<RowSplit, kTokenBuckets> CpuTuning::DefaultSplits() {
  return {RowSplit{2, 96, 768}, RowSplit{2, 96, 768}, RowSplit{1, 96, 768}, RowSplit{1, 96, 768},
          RowSplit{1, 96, 768}};
}

namespace {

Status OutOfRange(const std::string& field, int64_t value, const std::string& limit) {
  return InvalidArgumentError(field + " = " + std::to_string(value) + " " + limit);
}

}  // namespace

Status ValidateCpuTuning(const CpuTuning& t) {
  if (t.threads < 0 || t.threads > 4096) {
    return OutOfRange("tuning.threads", t.threads, "is outside [0, 4096]");
  }
  for (int b = 0; b < kTokenBuckets; ++b) {
    const RowSplit& s = t.split[b];
    const std::string at = "tuning.split[" + std::to_string(b) + "].";
    if (s.items_per_thread < 1 || s.items_per_thread > 64) {
      return OutOfRange(at + "items_per_thread", s.items_per_thread, "is outside [1, 64]");
    }
    for (const auto& [name, v] : {std::pair{"min_rows", s.min_rows}, {"max_rows", s.max_rows}}) {
      if (v < kRowQuantum || v > (int64_t{1} << 20) || v % kRowQuantum != 0) {
        return OutOfRange(at + name, v,
                          "must be a multiple of " + std::to_string(kRowQuantum) + " in [" +
                              std::to_string(kRowQuantum) + ", 1048576]");
      }
    }
    if (s.min_rows > s.max_rows) {
      return OutOfRange(at + "min_rows", s.min_rows,
                        "exceeds max_rows = " + std::to_string(s.max_rows));
    }
  }
  if (t.attention_batch_factor < 1 || t.attention_batch_factor > (1 << 20)) {
    return OutOfRange("tuning.attention_batch_factor", t.attention_batch_factor,
                      "is outside [1, 1048576]");
  }
  if (t.attention_prefetch_runs < 0 || t.attention_prefetch_runs > kernels::cpu::kMaxPrefetchRuns) {
    return OutOfRange("tuning.attention_prefetch_runs", t.attention_prefetch_runs,
                      "is outside [0, " + std::to_string(kernels::cpu::kMaxPrefetchRuns) + "]");
  }
  if (t.decode_by_tokens_from < 0 || t.decode_by_tokens_from > (1 << 20)) {
    return OutOfRange("tuning.decode_by_tokens_from", t.decode_by_tokens_from,
                      "is outside [0, 1048576]");
  }
  std::set<std::tuple<int, int64_t, int64_t, int32_t>> seen;
  for (size_t i = 0; i < t.isa.size(); ++i) {
    const ShapeIsa& s = t.isa[i];
    const std::string at = "tuning.isa[" + std::to_string(i) + "].";
    if (s.rows < 1 || s.cols < 1 || s.rows > (int64_t{1} << 31) || s.cols > (int64_t{1} << 31)) {
      return OutOfRange(at + "rows", s.rows < 1 ? s.rows : s.cols, "must be in [1, 2^31]");
    }
    if (s.bucket < 0 || s.bucket >= kTokenBuckets) {
      return OutOfRange(at + "bucket", s.bucket, "is outside [0, 4]");
    }
    if (static_cast<int>(s.isa) < 0 || static_cast<int>(s.isa) > static_cast<int>(Isa::kAmx)) {
      return OutOfRange(at + "isa", static_cast<int>(s.isa), "is not a known level");
    }
    // The types with 8-bit products (the quantized ones: matmul.h).
    const bool int8 =
        s.type == kernels::cpu::WeightType::kQ4_0 || s.type == kernels::cpu::WeightType::kQ4_1 ||
        s.type == kernels::cpu::WeightType::kQ8_0 || s.type == kernels::cpu::WeightType::kQ5_0 ||
        s.type == kernels::cpu::WeightType::kQ5_1 || s.type == kernels::cpu::WeightType::kQ6_K;
    if (s.activation_bits != kDefaultActivationBits && !(s.activation_bits == 8 && int8)) {
      return OutOfRange(at + "activation_bits", s.activation_bits,
                        int8 ? "must be 12 or 8"
                             : "must be 12 for weights without 8-bit products (f32, f16, bf16)");
    }
    if (!seen.insert({static_cast<int>(s.type), s.rows, s.cols, s.bucket}).second) {
      return InvalidArgumentError(at + "bucket: the shape " + std::to_string(s.rows) + "x" +
                                  std::to_string(s.cols) + " " + WeightTypeName(s.type) +
                                  " and bucket " + TokenBucketName(s.bucket) + " are listed twice");
    }
  }
  return OkStatus();
}

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kF16:
      return "f16";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kQ4_0:
      return "q4_0";
    case WeightType::kQ4_1:
      return "q4_1";
    case WeightType::kQ8_0:
      return "q8_0";
    case WeightType::kQ5_0:
      return "q5_0";
    case WeightType::kQ5_1:
      return "q5_1";
    case WeightType::kQ6_K:
      return "q6_k";
    case WeightType::kQ4_K:  // never a tuned shape's: those are the 12-bit products' types
      return "q4_k";
  }
  return "?";
}

StatusOr<WeightType> ParseWeightType(const std::string& name) {
  for (WeightType t :
       {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ4_0, WeightType::kQ4_1,
        WeightType::kQ8_0, WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ6_K}) {
    if (name == WeightTypeName(t)) return t;
  }
  return InvalidArgumentError("\"" + name +
                              "\" is not a weight type (f32, f16, bf16, q4_0, "
                              "q4_1, q8_0, q5_0, q5_1, q6_k)");
}

StatusOr<Isa> ParseIsa(const std::string& name) {
  for (Isa isa : kernels::cpu::kAllIsas) {
    if (name == kernels::cpu::IsaName(isa)) return isa;
  }
  return InvalidArgumentError("\"" + name +
                              "\" is not an instruction-set level (portable, avx2, "
                              "avx-vnni, avx512-vnni, amx-int8)");
}

}  // namespace streamd
