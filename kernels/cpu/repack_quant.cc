// The conversions described in repack_quant.h, one row at a time: plain scalar loops, run once at
// load (the caller splits the rows across threads).
#include "kernels/cpu/repack_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels {
namespace {

constexpr float kF16Max = 65504.0f;

// f16 of a scale, or false when it does not fit one.
bool ToHalfScale(float x, uint16_t* out) {
  if (!std::isfinite(x) || std::fabs(x) > kF16Max) return false;
  *out = FloatToHalf(x);
  return true;
}

float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return HalfToFloat(h);
}

// Sub-block j (0..7) of a Q4_K or Q5_K super-block (d and dmin at src, its 12 scale bytes at
// src + 4, nibbles at qs) as one Q4_1 or Q5_1 block, which store d, m and the nibbles alike:
// d' = f16(d*scale), m' = f16(-dmin*min); value l in the low nibble of qs[l], l + 16 in the high
// one. False when a scale does not fit an f16.
template <class Block>
bool KSubBlockToLegacy(const uint8_t* src, const uint8_t* qs, int j, Block* out) {
  int scale, min;
  KQuantScaleMin(src + 4, j, &scale, &min);
  if (!ToHalfScale(F16At(src) * static_cast<float>(scale), &out->d)) return false;
  if (!ToHalfScale(-(F16At(src + 2) * static_cast<float>(min)), &out->m)) return false;
  // Sub-block j's values are nibble (j % 2) of qs[32 * (j / 2) + l], l = 0..31.
  const uint8_t* q = qs + 32 * (j / 2);
  const int shift = 4 * (j % 2);
  for (int l = 0; l < 16; ++l) {
    const int lo = (q[l] >> shift) & 15, hi = (q[l + 16] >> shift) & 15;
    out->qs[l] = static_cast<uint8_t>(lo | (hi << 4));
  }
  return true;
}

// Q4_K: each sub-block of 32 values becomes one Q4_1 block.
bool Q4KRowToQ4_1(const uint8_t* src, int64_t n_blocks, BlockQ4_1* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 144) {
    for (int j = 0; j < 8; ++j, ++out) {
      if (!KSubBlockToLegacy(src, src + 16, j, out)) return false;
    }
  }
  return true;
}

// Q5_K: as Q4_K, each sub-block j becomes one Q5_1 block; its fifth bits are bit j of qh[l] for
// value l of the sub-block, which Q5_1 keeps at bit l of its own qh.
bool Q5KRowToQ5_1(const uint8_t* src, int64_t n_blocks, BlockQ5_1* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 176) {
    const uint8_t* qh = src + 16;
    for (int j = 0; j < 8; ++j, ++out) {
      if (!KSubBlockToLegacy(src, src + 48, j, out)) return false;
      uint32_t bits = 0;
      for (int l = 0; l < 32; ++l) bits |= static_cast<uint32_t>((qh[l] >> j) & 1) << l;
      std::memcpy(out->qh, &bits, sizeof bits);
    }
  }
  return true;
}

// Q5_0 and IQ4_NL share the f16 scale and 32-value block of Q8_0: only the byte per value changes.
bool Q5_0RowToQ8_0(const uint8_t* src, int64_t n_blocks, BlockQ8_0* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 22, ++out) {
    std::memcpy(&out->d, src, sizeof out->d);
    uint32_t qh;
    std::memcpy(&qh, src + 2, sizeof qh);
    const uint8_t* qs = src + 6;
    for (int i = 0; i < 32; ++i) {
      const int lo = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
      out->qs[i] = static_cast<int8_t>((lo | static_cast<int>(((qh >> i) & 1u) << 4)) - 16);
    }
  }
  return true;
}

bool Iq4NlRowToQ8_0(const uint8_t* src, int64_t n_blocks, BlockQ8_0* out) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 18, ++out) {
    std::memcpy(&out->d, src, sizeof out->d);
    const uint8_t* qs = src + 2;
    for (int i = 0; i < 32; ++i) out->qs[i] = kIq4Values[i < 16 ? qs[i] & 15 : qs[i - 16] >> 4];
  }
  return true;
}

// Any format: its reference dequantization, re-quantized per 32 values with the rounded scale
// (q = round(x / f16(amax / 127)), so the stored scale is the one the values were divided by).
bool RequantizeRowToQ8_0(ConvertedQuant type, const uint8_t* src, int64_t k, float* scratch,
                         BlockQ8_0* out) {
  DequantizeReference(type, src, k / LayoutOf(type).block_values, scratch);
  for (int64_t b = 0; b < k / kQuantBlock; ++b, ++out) {
    const float* x = scratch + b * kQuantBlock;
    float amax = 0.0f;
    for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
    if (!ToHalfScale(amax / 127.0f, &out->d)) return false;
    const float d = HalfToFloat(out->d);
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    for (int i = 0; i < kQuantBlock; ++i) {
      const float q = std::nearbyint(x[i] * id);
      out->qs[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
  return true;
}

}  // namespace

cpu::WeightType RepackTarget(ConvertedQuant type) {
  switch (type) {
    case ConvertedQuant::kQ4_K:
      return cpu::WeightType::kQ4_1;
    case ConvertedQuant::kQ5_K:
    case ConvertedQuant::kQ5_1:
      return cpu::WeightType::kQ5_1;
    default:
      return cpu::WeightType::kQ8_0;
  }
}

bool RepackRows(ConvertedQuant type, const uint8_t* src, size_t src_row_bytes, int64_t k,
                int64_t row_begin, int64_t row_end, uint8_t* dst) {
  const size_t dst_row_bytes = cpu::WeightRowBytes(RepackTarget(type), k);
  const int64_t n_blocks = k / LayoutOf(type).block_values;
  std::vector<float> scratch(static_cast<size_t>(k));
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* in = src + static_cast<size_t>(r) * src_row_bytes;
    uint8_t* row = dst + static_cast<size_t>(r) * dst_row_bytes;
    auto* q8 = reinterpret_cast<BlockQ8_0*>(row);
    bool ok;
    switch (type) {
      case ConvertedQuant::kQ4_K:
        ok = Q4KRowToQ4_1(in, n_blocks, reinterpret_cast<BlockQ4_1*>(row));
        break;
      case ConvertedQuant::kQ5_K:
        ok = Q5KRowToQ5_1(in, n_blocks, reinterpret_cast<BlockQ5_1*>(row));
        break;
      case ConvertedQuant::kQ5_1:  // the products read it as stored: the same bytes
        std::memcpy(row, in, dst_row_bytes);
        ok = true;
        break;
      case ConvertedQuant::kQ5_0:
        ok = Q5_0RowToQ8_0(in, n_blocks, q8);
        break;
      case ConvertedQuant::kIQ4_NL:
        ok = Iq4NlRowToQ8_0(in, n_blocks, q8);
        break;
      default:
        ok = RequantizeRowToQ8_0(type, in, k, scratch.data(), q8);
        break;
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace streamd::kernels
