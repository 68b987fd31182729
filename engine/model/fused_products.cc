#include "engine/model/fused_products.h"

namespace streamd::model_internal {

int64_t RowChunk(const WeightMatrix& w, const RowSplit& split, int threads) {
  const int64_t items = static_cast<int64_t>(split.items_per_thread) * threads;
  const int64_t per = (w.rows + items - 1) / items;
  const int64_t rounded = (per + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
  return std::clamp(rounded, split.min_rows, split.max_rows);
}

void RunProductRows(const Product& p, bool int8, int bucket, const uint8_t* x, float* out,
                    int64_t n, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *p.w;
  const int8_t isa = w.isa_by_bucket[bucket];
  if (int8) {
    kernels::cpu::MatMulRows8(w.type, w.data, w.row_bytes, w.cols, x, n, out, p.ldo, r0, r1,
                              w.vnni8_packed);
  } else if (isa < 0) {
    kernels::cpu::MatMulRows(w.type, w.data, w.row_bytes, w.cols, x, n, out, p.ldo, r0, r1,
                             w.amx_packed);
  } else {
    kernels::cpu::MatMulRowsAt(static_cast<kernels::cpu::Isa>(isa), w.type, w.data, w.row_bytes,
                               w.cols, x, n, out, p.ldo, r0, r1, w.amx_packed);
  }
}

}  // namespace streamd::model_internal
