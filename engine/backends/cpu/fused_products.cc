#include "engine/backends/cpu/fused_products.h"

namespace streamd::model_internal {

// Rows per work item of a parallel product, by default (CpuTuning::DefaultSplits; a build plan
// may choose others): about a matrix's rows / (2 threads), so every thread gets two items of
// it, in multiples of kRowQuantum, between 96 and 768 rows (the head's 49152 rows still make
// 64 items, so a thread the OS takes away holds up little). Long items are long prefetch
// streams: each kernel fetches the rows after the ones it computes, and a thread's next item
// used to start cold. Measured with `streamd bench --sessions 1,16 --decode-steps 30 --threads 2
// --window 192` (step ms, three alternations): fixed 96 rows 4.1-4.4 / 24.0-25.9, fixed 384
// 3.7-6.0 / 21.8-23.9, this with a cap of 768 3.56-3.8 / 20.7-21.5 (1536: the same; 4096: 1
// session 3.86-3.97); one thread unchanged. (Earlier, fixed sizes of 32, 48, 96 and 144 rows gave
// 210, 235, 279 and 289 tok/s for one session.)
// Batches of 6 or more tokens take one item per thread instead (rows / threads): each item then
// packs its tokens' activations once (the AMX level's PackTokens) and starts one cold row tile,
// and these batches are bound by arithmetic, not by the weight stream. Measured (`--sessions
// 1,4,8,16 --decode-steps 100..200 --window 192`, three or four alternations, step ms): 16
// sessions 14.8-14.9 -> 13.8-14.0, 8 sessions 8.9-9.2 -> 8.6-9.0, one and four unchanged; 16
// sessions at the AVX-512 level 22.5-23.9 -> 22.2-22.5. Two items per thread for these was the
// faster side before; four per thread made 16 sessions 15.4-16.0.
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
    const Int8Rows rows = Int8RowsOf(w);
    kernels::cpu::MatMulRows8(rows.type, rows.data, rows.row_bytes, w.cols, x, n, out, p.ldo, r0,
                              r1, w.vnni8_packed);
  } else if (isa < 0) {
    kernels::cpu::MatMulRows(w.type, w.data, w.row_bytes, w.cols, x, n, out, p.ldo, r0, r1,
                             w.amx_packed);
  } else {
    kernels::cpu::MatMulRowsAt(static_cast<kernels::cpu::Isa>(isa), w.type, w.data, w.row_bytes,
                               w.cols, x, n, out, p.ldo, r0, r1, w.amx_packed);
  }
}

}  // namespace streamd::model_internal
