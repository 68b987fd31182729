// The precision K-quant files run at without a build plan.
//
// LlamaModel::Load multiplies every matrix by 12-bit activations: the most exact products, what
// the tests compare with the plain reference, and what a plan's eval gate starts from. The models
// users bring are K-quant files (Q4_K_M, Q5_K_M, Q6_K ...), and llama.cpp, by whose numbers those
// files are made and judged, multiplies them by 8-bit activations (its Q8_K blocks). On the
// AVX-512 VNNI level, where streamd's 8-bit kernel is fast (kernels::cpu::MatMulRows8), their
// matrices take 8-bit activations without a plan too, read from copies packed at load from the
// file's own blocks (kernels::cpu::PackForVnni8; Q4_K's are never converted to Q4_1). On the
// held-out Qwen2.5-Coder-1.5B Q4_K_M that took prefill from 0.76x llama.cpp's rate to 1.34x and
// decode from 1.01x to 1.20x (docs/PERFORMANCE.md, "K-quant files without a plan"); a plan's eval
// gate measured the same cut at -0.04% streaming perplexity there, -0.13% on the 0.5B. A plan
// replaces all of this with its own timed and gated choices; model.k_quant_activation_bits: 12
// keeps the 12-bit products.
#pragma once

#include <cstdint>

#include "engine/backends/cpu/cpu_tuning.h"
#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/llama_weights.h"
#include "engine/util/status.h"

namespace streamd {

// Whether a K-quant matrix takes 8-bit activations without a plan: the AVX-512 VNNI level runs
// (AMX CPUs, whose tiles serve batches from the 12-bit conversions' AMX copies, and CPUs without
// a fast 8-bit kernel keep the 12-bit products), and the 8-bit copy of its rows of `int8_type`
// (Int8RowsOf) serves every product alone (Vnni8CopyCanServeAlone). What
// LlamaModel::Prepacked::packed_from_file asks at load, so that a Q4_K matrix it serves is not
// converted at all.
bool KQuantCopyServesAlone(kernels::cpu::WeightType int8_type, int64_t rows, int64_t cols);

// `current` with every matrix of a K-quant file (WeightMatrix::k_quant_file) that
// KQuantCopyServesAlone, and whose copy is at most 1.06x the rows it replaces (Q4_K's 0.93x, Q6_K's
// 1.01x, a Q8_0 conversion's 1.06x; not Q5_K's Q5_1 conversion, 1.5x), at 8 bits in every token
// bucket; unchanged when there is none.
CpuTuning KQuantDefaultTuning(const LlamaWeights& weights, const CpuTuning& current);

// Applies KQuantDefaultTuning to a model loaded without a plan: packs the 8-bit copies, frees the
// conversions they replace, and drops from memory the file pages the packing read (products never
// read those rows again). Returns the bytes of 8-bit copies packed (0: nothing changed).
StatusOr<uint64_t> ApplyKQuantDefaults(LlamaModel& model);

}  // namespace streamd
