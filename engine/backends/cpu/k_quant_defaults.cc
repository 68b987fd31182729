#include "engine/backends/cpu/k_quant_defaults.h"

#include <algorithm>
#include <span>

#include "kernels/cpu/matmul.h"

namespace streamd {
namespace {

// The 8-bit copy replaces the rows the 12-bit products read (ReleaseUnreadConvertedRows) and must
// not grow the model by more than Q8_0's copy does (576 bytes per 16 rows and block for 544):
// Q4_K's copy is 0.93x its Q4_1 conversion, Q6_K's 1.01x its rows, a Q8_0 conversion's (Q3_K,
// Q2_K, IQ4) 1.06x; Q5_K's Q5_1 conversion would take 1.5x (values as bytes) and keeps 12 bits.
bool CopyFitsInItsRows(const WeightMatrix& m) {
  const uint64_t rows = m.row_bytes * static_cast<uint64_t>(m.rows);
  const uint64_t copy = kernels::cpu::Vnni8PackedBytes(Int8RowsOf(m).type, m.rows, m.cols);
  return copy * 544 <= rows * 576;
}

}  // namespace

bool KQuantCopyServesAlone(kernels::cpu::WeightType int8_type, int64_t rows, int64_t cols) {
  return kernels::cpu::ActiveIsa() == kernels::cpu::Isa::kAvx512Vnni &&
         Vnni8CopyCanServeAlone(int8_type, rows, cols);
}

CpuTuning KQuantDefaultTuning(const LlamaWeights& weights, const CpuTuning& current) {
  CpuTuning tuning = current;
  const kernels::cpu::Isa active = kernels::cpu::ActiveIsa();
  for (const WeightMatrix* m : ProductMatrices(weights)) {
    if (!m->k_quant_file || !KQuantCopyServesAlone(Int8RowsOf(*m).type, m->rows, m->cols) ||
        !CopyFitsInItsRows(*m)) {
      continue;
    }
    for (int bucket = 0; bucket < kTokenBuckets; ++bucket) {
      const ShapeIsa choice{m->type, m->rows, m->cols, bucket, active, 8};
      // Matrices of one shape and type share their choices (ShapeIsa's key).
      const bool listed = std::any_of(tuning.isa.begin(), tuning.isa.end(), [&](const ShapeIsa& s) {
        return s.type == choice.type && s.rows == choice.rows && s.cols == choice.cols &&
               s.bucket == choice.bucket;
      });
      if (!listed) tuning.isa.push_back(choice);
    }
  }
  return tuning;
}

StatusOr<uint64_t> ApplyKQuantDefaults(LlamaModel& model) {
  const CpuTuning tuning = KQuantDefaultTuning(model.weights(), model.tuning());
  if (tuning == model.tuning()) return uint64_t{0};
  const uint64_t before = model.weights().vnni8_packed_bytes;
  // The packing reads the file's blocks of the Q4_K and Q6_K matrices through the mapping; the
  // products then read only the copies, so those pages would count the matrices twice in RSS.
  // Each matrix's go as soon as its copy is made: a whole model's pages would otherwise be
  // resident beside all the copies at the end (the 1.5B: a 1.96 GB peak instead of ~1.1).
  // (A tied head's rows are also the token embeddings, which are looked up with pread, not
  // through the mapping: EmbeddingTable::file.)
  const gguf::GgufFile& file = model.file();
  const MatrixPacked release = [&file](const WeightMatrix& m) {
    const Int8Rows source = Int8RowsOf(m);
    const std::span<const uint8_t> bytes = file.bytes();
    if (file.is_file_mapping() && ServedByVnni8CopyAlone(m) && source.data >= bytes.data() &&
        source.data < bytes.data() + bytes.size()) {
      ReleaseMappedPages(source.data, source.row_bytes * static_cast<size_t>(m.rows));
    }
  };
  STREAMD_RETURN_IF_ERROR(model.ApplyTuning(tuning, {}, nullptr, release));
  model.ReleaseUnreadConvertedRows();
  return model.weights().vnni8_packed_bytes - before;
}

}  // namespace streamd
