// CpuTuning: the CPU backend's kernel choices that a build plan tunes by timing candidates on the
// machine at hand (engine/build_plan/cpu_tuner.h, docs/BUILD.md). Without a plan the defaults hold:
// the values measured on a Sapphire Rapids machine and written down in llama_model.cc before
// plans existed, so a daemon without a plan runs exactly as it always did.
//
// Choices depend on how many tokens a product multiplies at once (a decode step of n sessions,
// a prefill chunk), grouped into token buckets: 1, 2-5, 6-15, 16-63, 64+ (6 is where the AMX
// level starts using tiles).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/util/status.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"

namespace streamd {

inline constexpr int kTokenBuckets = 5;
// Token count the tuner times each bucket at.
inline constexpr std::array<int64_t, kTokenBuckets> kBucketProbeTokens = {1, 4, 8, 16, 64};
// Bucket of a product of n >= 1 tokens.
int TokenBucket(int64_t n);
// "1", "2-5", "6-15", "16-63", "64+".
const char* TokenBucketName(int bucket);

// Every work item's rows are a multiple of this: a multiple of every kernel's row tile (16 at the
// AMX level, 6 at AVX-512, 3 and 4 at AVX2), so no item ends in a slow tail.
inline constexpr int64_t kRowQuantum = 48;

// How a product's rows are cut into work items for the thread pool: about
// rows / (items_per_thread * threads) rows per item, rounded up to kRowQuantum, clamped to
// [min_rows, max_rows]. Few long items are long prefetch streams; more items balance a thread
// the OS takes away.
struct RowSplit {
  int32_t items_per_thread = 2;
  int64_t min_rows = 96;
  int64_t max_rows = 768;
  bool operator==(const RowSplit&) const = default;
};

// The kernel one product shape runs, for one token bucket: its instruction-set level and the
// bits of its activations (12, or 8: kernels::cpu::MatMulRows8, a precision cut that only a
// build's eval gate lets through; quantized weights only).
inline constexpr int32_t kDefaultActivationBits = 12;
struct ShapeIsa {
  kernels::cpu::WeightType type = kernels::cpu::WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t bucket = 0;
  kernels::cpu::Isa isa = kernels::cpu::Isa::kPortable;
  int32_t activation_bits = kDefaultActivationBits;
  bool operator==(const ShapeIsa&) const = default;
};

struct CpuTuning {
  int32_t threads = 0;  // worker threads, the caller's included; 0 = every core
  std::array<RowSplit, kTokenBuckets> split = DefaultSplits();
  // A step of n >= attention_batch_factor * threads tokens runs one attention task per token
  // (all its KV heads) instead of one per (token, KV head): fewer, longer tasks once there are
  // enough of them to keep every thread busy.
  int32_t attention_batch_factor = 4;
  // How many blocks of keys the attention's score pass asks the memory for ahead of the one it
  // scores (kernels::cpu::PagedAttentionGroup's prefetch_runs; 0: none); any value gives the
  // same result bit for bit.
  int32_t attention_prefetch_runs = kernels::cpu::kDefaultPrefetchRuns;
  // A decode step of at least this many tokens (sessions) runs token-parallel: each thread takes
  // a share of the tokens through the whole forward pass, every row of every product, with no
  // join per product (llama_token_parallel.cc); 0: never (every step cuts each product's rows
  // across the threads). Either gives the same logits bit for bit.
  int32_t decode_by_tokens_from = 0;
  // Per product shape and bucket; a shape or bucket not listed runs at the active level.
  std::vector<ShapeIsa> isa;

  bool operator==(const CpuTuning&) const = default;

  // Before plans: two items per thread below 6 tokens, one from 6 on (each item then packs its
  // tokens' activations once); 96..768 rows.
  static std::array<RowSplit, kTokenBuckets> DefaultSplits();
};

// Checks every field (threads in [0, 4096], items_per_thread in [1, 64], min_rows and max_rows
// positive multiples of kRowQuantum with min <= max <= 1 << 20, attention_batch_factor in
// [1, 1 << 20], attention_prefetch_runs in [0, kernels::cpu::kMaxPrefetchRuns],
// decode_by_tokens_from in [0, 1 << 20], buckets in range, shapes positive, no shape and bucket
// listed twice, levels
// known, activation bits 12, or 8 for a quantized type). Errors name the field
// ("tuning.split[2].max_rows") and the limit.
Status ValidateCpuTuning(const CpuTuning& tuning);

// Names used in plan files and `streamd plan inspect`: "q4_1", "avx512-vnni" ...
const char* WeightTypeName(kernels::cpu::WeightType type);
StatusOr<kernels::cpu::WeightType> ParseWeightType(const std::string& name);
StatusOr<kernels::cpu::Isa> ParseIsa(const std::string& name);

}  // namespace streamd
