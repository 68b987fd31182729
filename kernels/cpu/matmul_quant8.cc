// 8-bit activations (matmul.h, BlockQ8A): the public entry points, the portable quantizer and
// the portable reference product, which the AVX-512 VNNI kernel (matmul_quant8_avx512.cc)
// equals bit for bit: per (token, row) the exact i32 sum of each block, then in block order
//   acc = fma(f32(sum), dw * dx, acc); acc = fma(ow, os, acc)   (the offset term: Q4_0, Q4_1)
// with the block chunks of kBlockChunk the multi-token kernels use.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cpu/dequantize_reference.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu {
namespace internal {

void QuantizeRowQ8APortable(const float* x, int64_t k, BlockQ8A* out) {
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float inv = amax > 0 ? static_cast<float>(kQ8Max) / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kQuantBlock; ++j) {
      const int32_t q = static_cast<int32_t>(std::nearbyint(xb[j] * inv));
      out[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = amax / static_cast<float>(kQ8Max);
    out[b].s = out[b].d * static_cast<float>(sum);
  }
}

namespace {

// Block b of one weight row as 32 values in element order, its scale dw and offset factor ow
// (Q4_1 and Q5_1: m; Q4_0: dw, with os = -8 sx; Q8_0 and Q5_0: none; Q4_K: sub-block b % 8 of
// super-block b / 8, dw = d sc and ow = -dmin m, both exact in f32: 11 by 6 significant bits).
struct RowBlock {
  int32_t q[kQuantBlock];
  float dw = 0, ow = 0;
  bool offset = false;
  float os_factor = 1;  // os = os_factor * sx
};

// Sub-block j (0-7) of a Q4_K super-block: its 32 nibbles in element order into q, and its 6-bit
// scale and min.
struct Q4_KSubBlock {
  int scale = 0, min = 0;
};
Q4_KSubBlock LoadQ4_KSubBlock(const BlockQ4_K& sb, int j, int32_t* q) {
  Q4_KSubBlock s;
  KQuantScaleMin(sb.sc, j, &s.scale, &s.min);
  for (int l = 0; l < kQuantBlock; ++l) {
    const uint8_t byte = sb.qs[kQuantBlock * (j / 2) + l];
    q[l] = j % 2 == 0 ? byte & 0xf : byte >> 4;
  }
  return s;
}

RowBlock LoadBlock(WeightType type, const uint8_t* row, int64_t b) {
  RowBlock r;
  if (type == WeightType::kQ5_0) {  // as Q8_0: values q - 16, no offset term
    const auto& blk = reinterpret_cast<const BlockQ5_0*>(row)[b];
    for (int j = 0; j < kQuantBlock; ++j) r.q[j] = Q5Value(blk.qs, blk.qh, j) - 16;
    r.dw = HalfToFloat(blk.d);
    return r;
  }
  if (type == WeightType::kQ5_1) {  // values 0..31 and Q4_1's offset term
    const auto& blk = reinterpret_cast<const BlockQ5_1*>(row)[b];
    for (int j = 0; j < kQuantBlock; ++j) r.q[j] = Q5Value(blk.qs, blk.qh, j);
    r.dw = HalfToFloat(blk.d);
    r.ow = HalfToFloat(blk.m);
    r.offset = true;
    return r;
  }
  if (type == WeightType::kQ4_K) {
    const auto& sb = reinterpret_cast<const BlockQ4_K*>(row)[b / 8];
    const Q4_KSubBlock s = LoadQ4_KSubBlock(sb, static_cast<int>(b % 8), r.q);
    r.dw = HalfToFloat(sb.d) * static_cast<float>(s.scale);
    r.ow = -(HalfToFloat(sb.dmin) * static_cast<float>(s.min));
    r.offset = true;
    return r;
  }
  if (type == WeightType::kQ8_0) {
    const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
    for (int j = 0; j < kQuantBlock; ++j) r.q[j] = blk.qs[j];
    r.dw = HalfToFloat(blk.d);
    return r;
  }
  const uint8_t* qs;
  if (type == WeightType::kQ4_1) {
    const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
    qs = blk.qs;
    r.dw = HalfToFloat(blk.d);
    r.ow = HalfToFloat(blk.m);
  } else {
    const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
    qs = blk.qs;
    r.dw = HalfToFloat(blk.d);
    r.ow = r.dw;
    r.os_factor = -8.0f;
  }
  r.offset = true;
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    r.q[j] = qs[j] & 0xf;
    r.q[j + kQuantBlock / 2] = qs[j] >> 4;
  }
  return r;
}

// Block b (32 values) of a Q6_K row (quant_blocks.h): its values q in 0..63 (for q - 32), the
// super-block's scale d and the scales of its two 16-value groups.
struct Q6_KRowBlock {
  int32_t q[kQuantBlock];
  float d = 0;
  int32_t sc[2] = {0, 0};
};

Q6_KRowBlock LoadQ6_KBlock(const uint8_t* row, int64_t b) {
  constexpr int64_t kBlocksPerSuper = kQ6_KValues / kQuantBlock;
  const auto& sb = reinterpret_cast<const BlockQ6_K*>(row)[b / kBlocksPerSuper];
  const int i = static_cast<int>(b % kBlocksPerSuper), n = i / 4, j = i % 4;
  Q6_KRowBlock r;
  for (int l = 0; l < kQuantBlock; ++l) {
    const uint8_t low = sb.ql[64 * n + 32 * (j & 1) + l];
    const int32_t high = (sb.qh[32 * n + l] >> (2 * j)) & 3;
    r.q[l] = (j < 2 ? low & 0xf : low >> 4) | (high << 4);
  }
  r.d = HalfToFloat(sb.d);
  r.sc[0] = sb.sc[8 * n + 2 * j];
  r.sc[1] = sb.sc[8 * n + 2 * j + 1];
  return r;
}

// One (row, token, block) of a Q6_K product: per 16-value group g the exact i32 sum
// sum_j q_j x_j - 32 sum_j x_j, then
//   v = f32(sum_0) * (d sc_0); v = fma(f32(sum_1), d sc_1, v); acc = fma(v, dx, acc)
// (d sc is exact in f32: 11 by 8 significant bits).
float Q6_KBlockTerm(const Q6_KRowBlock& w, const BlockQ8A& x, float acc) {
  int32_t sum[2] = {0, 0};
  for (int l = 0; l < kQuantBlock; ++l) sum[l / 16] += (w.q[l] - 32) * x.qs[l];
  const float v = static_cast<float>(sum[0]) * (w.d * static_cast<float>(w.sc[0]));
  return std::fma(std::fma(static_cast<float>(sum[1]), w.d * static_cast<float>(w.sc[1]), v), x.d,
                  acc);
}

}  // namespace

void MatMulQuant8Portable(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                          const BlockQ8A* xq, int64_t n_tokens, float* out, int64_t ldo,
                          int64_t row_begin, int64_t row_end) {
  const int64_t nb = k / kQuantBlock;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * w_row_bytes;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const BlockQ8A* x = xq + t * nb;
      float total = 0;
      for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
        const int64_t end = kb0 + kBlockChunk < nb ? kb0 + kBlockChunk : nb;
        float acc = 0;
        for (int64_t b = kb0; b < end; ++b) {
          if (type == WeightType::kQ6_K) {
            acc = Q6_KBlockTerm(LoadQ6_KBlock(row, b), x[b], acc);
            continue;
          }
          const RowBlock rb = LoadBlock(type, row, b);
          int32_t sum = 0;
          for (int j = 0; j < kQuantBlock; ++j) sum += rb.q[j] * x[b].qs[j];
          acc = std::fma(static_cast<float>(sum), rb.dw * x[b].d, acc);
          if (rb.offset) acc = std::fma(rb.ow, rb.os_factor * x[b].s, acc);
        }
        total = kb0 == 0 ? acc : total + acc;
      }
      out[t * ldo + r] = total;
    }
  }
}

}  // namespace internal

using internal::HasInt8Products;

size_t ActivationBytes8(int64_t n_tokens, int64_t k) {
  STREAMD_CHECK_MSG(k > 0 && k % kQuantBlock == 0 && n_tokens >= 0, "bad 8-bit activation shape");
  return static_cast<size_t>(n_tokens) * static_cast<size_t>(k / kQuantBlock) * sizeof(BlockQ8A);
}

void PrepareActivations8(const float* x, int64_t ldx, int64_t k, int64_t token_begin,
                         int64_t token_end, void* xq8) {
  STREAMD_CHECK_MSG(
      k > 0 && k % kQuantBlock == 0 && token_begin >= 0 && token_end >= token_begin && ldx >= k,
      "bad 8-bit activation range");
  const int64_t nb = k / kQuantBlock;
  auto* blocks = static_cast<BlockQ8A*>(xq8);
  const bool avx512 = ActiveIsa() >= Isa::kAvx512Vnni;
  for (int64_t t = token_begin; t < token_end; ++t) {
    if (avx512) {
      internal::QuantizeRowQ8AAvx512(x + t * ldx, k, blocks + t * nb);
    } else {
      internal::QuantizeRowQ8APortable(x + t * ldx, k, blocks + t * nb);
    }
  }
}

namespace {

// The packed kernel's scratch, per thread (the pool's threads run products concurrently), grown
// to the largest k it has seen and then reused: no allocation in a decode step's product.
int32_t* ShiftScratch(size_t ints) {
  if (ints == 0) return nullptr;
  thread_local std::vector<int32_t> scratch;
  if (scratch.size() < ints) scratch.resize(ints);
  return scratch.data();
}

}  // namespace

bool FastInt8Activations(WeightType type) {
  return HasInt8Products(type) && ActiveIsa() >= Isa::kAvx512Vnni;
}

void MatMulRows8(WeightType type, const void* w, size_t w_row_bytes, int64_t k, const void* xq8,
                 int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end,
                 const void* packed) {
  STREAMD_CHECK_MSG(HasInt8Products(type),
                    "8-bit activations need Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q8_0 or Q6_K weights");
  STREAMD_CHECK_MSG(k > 0 && k % internal::StorageBlockValues(type) == 0,
                    "quantized k must be a multiple of the type's block (32; Q6_K, Q4_K 256)");
  STREAMD_CHECK_MSG(row_begin >= 0 && row_end >= row_begin && n_tokens >= 0,
                    "bad row or token range");
  STREAMD_CHECK_MSG(n_tokens <= 1 || ldo >= row_end, "ldo smaller than row_end");
  STREAMD_CHECK_MSG(w_row_bytes >= WeightRowBytes(type, k), "w_row_bytes smaller than one row");
  if (row_begin == row_end || n_tokens == 0) return;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const BlockQ8A*>(xq8);
  // The fast kernel reads whole tiles of 16 rows from the packed copy. Rows outside them, and a
  // matrix without a copy (not Vnni8Packable, or its allocation failed), take the portable
  // reference: every matrix of a Llama model has rows in multiples of 16, the engine cuts them in
  // multiples of 48 and AddVnni8PackedCopies packs each one that runs at 8 bits, so a second
  // fast kernel on the GGUF rows would serve no product of a model.
  int64_t tiles_begin = row_end, tiles_end = row_end;
  if (FastInt8Activations(type) && packed != nullptr) {
    tiles_begin = std::min((row_begin + 15) / 16 * 16, row_end);
    tiles_end = std::max(tiles_begin, row_end / 16 * 16);
  }
  // The rows themselves may be gone when every product of a matrix reads the packed copy
  // (engine/backends/cpu/llama_weights.h, ReleaseConvertedRowsServedByVnni8Copies).
  STREAMD_CHECK_MSG(wb != nullptr || (row_begin == tiles_begin && tiles_end == row_end),
                    "MatMulRows8: rows outside the packed tiles of a matrix without its rows");
  if (row_begin < tiles_begin) {
    internal::MatMulQuant8Portable(type, wb, w_row_bytes, k, x, n_tokens, out, ldo, row_begin,
                                   tiles_begin);
  }
  if (tiles_begin < tiles_end) {
    // The copy of a Q5_0 matrix is Q8_0's (PackForVnni8): the Q8_0 kernel reads it.
    internal::MatMulQuant8PackedAvx512Vnni(
        internal::Vnni8PackedFormat(type), static_cast<const uint8_t*>(packed), k, x, n_tokens, out,
        ldo, tiles_begin, tiles_end, ShiftScratch(internal::Vnni8ShiftInts(type, k)));
  }
  if (tiles_end < row_end) {
    internal::MatMulQuant8Portable(type, wb, w_row_bytes, k, x, n_tokens, out, ldo, tiles_end,
                                   row_end);
  }
}

}  // namespace streamd::kernels::cpu

namespace streamd::kernels::cpu {

bool Vnni8Packable(WeightType type, int64_t rows, int64_t k) {
  return HasInt8Products(type) && rows > 0 && rows % 16 == 0 && k > 0 &&
         k % internal::StorageBlockValues(type) == 0;
}

size_t Vnni8PackedBytes(WeightType type, int64_t rows, int64_t k) {
  if (!Vnni8Packable(type, rows, k)) return 0;
  return static_cast<size_t>(rows / 16) * static_cast<size_t>(k / kQuantBlock) *
         internal::Vnni8RecordBytes(type);
}

namespace {

using internal::Q4_KSubBlock;

// Row r's 16 bytes of nibbles of one block (values i and 16 + i in byte i) into a 4-bit record's
// 256 bytes of quants: vector v holds bytes 4v..4v+3 of every row (low nibbles: values 4v..,
// high: 16 + 4v..).
void PutNibbleBlock(const uint8_t* qs, int r, uint8_t* quants) {
  for (int v = 0; v < 4; ++v) {
    for (int e = 0; e < 4; ++e) quants[64 * v + 4 * r + e] = qs[4 * v + e];
  }
}

// Row r's 32 values of one block, their low 4 bits, into a 4-bit record's quants as
// PutNibbleBlock lays them out (value i in the low nibble of byte i, value 16 + i in its high).
void PutLowNibbles(const int32_t* q, int r, uint8_t* quants) {
  uint8_t qs[kQuantBlock / 2];
  for (int i = 0; i < kQuantBlock / 2; ++i) {
    qs[i] = static_cast<uint8_t>((q[i] & 15) | (q[i + kQuantBlock / 2] & 15) << 4);
  }
  PutNibbleBlock(qs, r, quants);
}

// Q4_K's records (kQ4_KRecordBytes per tile of 16 rows and super-block): the rows' d and dmin,
// their sub-block scales and mins as bytes [block][row], then each block's nibbles laid out as
// the 4-bit formats' (value i in the low nibble of byte i, value 16 + i in its high nibble),
// so the kernel unpacks them as Q4_1's.
void PackQ4_KForVnni8(const uint8_t* src, size_t w_row_bytes, int64_t rows, int64_t k,
                      uint8_t* dst) {
  const int64_t n_super = k / kQ4_KValues;
  for (int64_t tile = 0; tile < rows / 16; ++tile) {
    for (int64_t s = 0; s < n_super; ++s) {
      uint8_t* rec = dst + static_cast<size_t>(tile * n_super + s) * internal::kQ4_KRecordBytes;
      auto* d = reinterpret_cast<uint16_t*>(rec);
      auto* dmin = reinterpret_cast<uint16_t*>(rec + internal::kQ4_KDminAt);
      uint8_t* scales = rec + internal::kQ4_KScalesAt;
      uint8_t* mins = rec + internal::kQ4_KMinsAt;
      for (int r = 0; r < 16; ++r) {
        const auto& sb = reinterpret_cast<const BlockQ4_K*>(
            src + static_cast<size_t>(tile * 16 + r) * w_row_bytes)[s];
        d[r] = sb.d;
        dmin[r] = sb.dmin;
        for (int j = 0; j < 8; ++j) {
          int32_t q[kQuantBlock];
          const Q4_KSubBlock sub = internal::LoadQ4_KSubBlock(sb, j, q);
          scales[16 * j + r] = static_cast<uint8_t>(sub.scale);
          mins[16 * j + r] = static_cast<uint8_t>(sub.min);
          PutLowNibbles(q, r, rec + internal::kQ4_KQuantsAt + internal::kQ4_KBlockQuantBytes * j);
        }
      }
    }
  }
}

// Q6_K's records (kQ6_KRecordBytes per tile of 16 rows and super-block): the rows' d, 32 bytes
// unused, their group scales as bytes [block][group][row], then per block the values' low 4 bits
// laid out as the 4-bit formats' nibbles and their high 2 bits as kQ6_KHighBitsShift says, so the
// kernel unpacks the low bits as Q4_1's and ORs the high ones in.
void PackQ6_KForVnni8(const uint8_t* src, size_t w_row_bytes, int64_t rows, int64_t k,
                      uint8_t* dst) {
  const int64_t n_super = k / kQ6_KValues;
  constexpr int kBlocks = kQ6_KValues / kQuantBlock;
  for (int64_t tile = 0; tile < rows / 16; ++tile) {
    for (int64_t s = 0; s < n_super; ++s) {
      uint8_t* rec = dst + static_cast<size_t>(tile * n_super + s) * internal::kQ6_KRecordBytes;
      std::memset(rec, 0, internal::kQ6_KRecordBytes);
      auto* d = reinterpret_cast<uint16_t*>(rec);
      uint8_t* scales = rec + internal::kQ6_KScalesAt;
      for (int r = 0; r < 16; ++r) {
        const uint8_t* row = src + static_cast<size_t>(tile * 16 + r) * w_row_bytes;
        d[r] = reinterpret_cast<const BlockQ6_K*>(row)[s].d;
        for (int j = 0; j < kBlocks; ++j) {
          const internal::Q6_KRowBlock qb = internal::LoadQ6_KBlock(row, s * kBlocks + j);
          scales[32 * j + r] = static_cast<uint8_t>(qb.sc[0]);
          scales[32 * j + 16 + r] = static_cast<uint8_t>(qb.sc[1]);
          uint8_t* quants = rec + internal::kQ6_KQuantsAt + internal::kQ6_KBlockQuantBytes * j;
          PutLowNibbles(qb.q, r, quants);
          uint8_t* high = quants + internal::kQ6_KHighAt;
          for (int v = 0; v < kQuantBlock / 4; ++v) {
            for (int e = 0; e < 4; ++e) {
              const int p = 4 * r + e;
              high[64 * (v / 4) + p] |=
                  static_cast<uint8_t>((qb.q[4 * v + e] >> 4) << (2 * (v % 4)));
            }
          }
        }
      }
    }
  }
}

}  // namespace

void PackForVnni8(WeightType type, const void* w, size_t w_row_bytes, int64_t rows, int64_t k,
                  void* out) {
  STREAMD_CHECK_MSG(Vnni8Packable(type, rows, k), "PackForVnni8: not a packable matrix");
  if (type == WeightType::kQ4_K) {
    return PackQ4_KForVnni8(static_cast<const uint8_t*>(w), w_row_bytes, rows, k,
                            static_cast<uint8_t*>(out));
  }
  if (type == WeightType::kQ6_K) {
    return PackQ6_KForVnni8(static_cast<const uint8_t*>(w), w_row_bytes, rows, k,
                            static_cast<uint8_t*>(out));
  }
  const int64_t nb = k / kQuantBlock;
  const size_t record = internal::Vnni8RecordBytes(type);
  const auto* src = static_cast<const uint8_t*>(w);
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t tile = 0; tile < rows / 16; ++tile) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + static_cast<size_t>(tile * nb + b) * record;
      std::memset(rec, 0, record);
      auto* d = reinterpret_cast<uint16_t*>(rec);
      auto* m = reinterpret_cast<uint16_t*>(rec + 32);
      uint8_t* quants = rec + 64;
      for (int r = 0; r < 16; ++r) {
        const uint8_t* row = src + static_cast<size_t>(tile * 16 + r) * w_row_bytes;
        if (type == WeightType::kQ5_1) {
          // d, m and the values 0..31 as bytes (unsigned already: no shift).
          const internal::RowBlock rb = internal::LoadBlock(type, row, b);
          const auto& blk = reinterpret_cast<const BlockQ5_1*>(row)[b];
          d[r] = blk.d;
          m[r] = blk.m;
          for (int i = 0; i < kQuantBlock / 4; ++i) {
            for (int e = 0; e < 4; ++e) {
              quants[64 * i + 4 * r + e] = static_cast<uint8_t>(rb.q[4 * i + e]);
            }
          }
        } else if (type == WeightType::kQ8_0 || type == WeightType::kQ5_0) {
          int8_t qs[kQuantBlock];
          if (type == WeightType::kQ8_0) {
            const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
            d[r] = blk.d;
            std::memcpy(qs, blk.qs, sizeof qs);
          } else {
            const internal::RowBlock rb = internal::LoadBlock(type, row, b);
            std::memcpy(&d[r], row + static_cast<size_t>(b) * sizeof(BlockQ5_0), sizeof d[r]);
            for (int j = 0; j < kQuantBlock; ++j) qs[j] = static_cast<int8_t>(rb.q[j]);
          }
          for (int i = 0; i < kQuantBlock / 4; ++i) {
            for (int e = 0; e < 4; ++e) {
              quants[64 * i + 4 * r + e] = static_cast<uint8_t>(qs[4 * i + e] ^ 0x80);
            }
          }
        } else {
          const uint8_t* qs;
          if (type == WeightType::kQ4_1) {
            const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
            d[r] = blk.d;
            m[r] = blk.m;
            qs = blk.qs;
          } else {
            const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
            d[r] = blk.d;
            qs = blk.qs;
          }
          PutNibbleBlock(qs, r, quants);
        }
      }
    }
  }
}

}  // namespace streamd::kernels::cpu
