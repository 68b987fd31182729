// Block layouts of the quantized weight formats streamd reads, bit-identical to GGUF/ggml.
//
// A quantized row of K values is K/32 consecutive blocks. Each block holds 32 values:
//   Q4_0: x = d * (q - 8),        q in [0,15]; d f16.            18 bytes
//   Q4_1: x = d * q + m,          q in [0,15]; d, m f16.         20 bytes
//   Q8_0: x = d * q,              q in [-128,127]; d f16.        34 bytes
//   Q5_0: x = d * (q - 16),       q in [0,31]: the nibble as Q4_0's, bit 4 of value j at bit j
//         of qh (little-endian); d f16.                          22 bytes
//   Q5_1: x = d * q + m,          q in [0,31] as Q5_0's; d, m f16. 24 bytes
//   Q6_K: super-blocks of 256 values (8 of the 32-value blocks), x = d * sc * (q - 32) with q in
//         [0,63] and one i8 sc per 16 values; d f16.  210 bytes (BlockQ6_K, below)
//   Q16_1: x = d * q, s = d*sum(q), q in [-2047,2047] stored as i16; d, s f32.  72 bytes
//          (activations only; not a GGUF type: s lets Q4_1 add m*sum(x) and Q4_0 subtract
//          8*sum(x) in one multiply; 12-bit values, see matmul.h on precision)
// 4-bit blocks pack value j in the low nibble of qs[j] and value j+16 in the high nibble.
// This header has no engine types: kernels/ stays below engine/.
#pragma once

#include <cstdint>
#include <cstring>

namespace streamd::kernels {

inline constexpr int kQuantBlock = 32;

struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ5_0 {
  uint16_t d;     // f16 scale
  uint8_t qh[4];  // bit 4 of value j: bit j of the little-endian u32
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ5_1 {
  uint16_t d;     // f16 scale
  uint16_t m;     // f16 minimum
  uint8_t qh[4];  // bit 4 of value j: bit j of the little-endian u32
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQuantBlock];
};
// GGUF's Q6_K super-block of kQ6_KValues values. Value 128 n + 32 j + l (half n in 0-1, quarter
// j in 0-3, l in 0-31): low 4 bits in ql[64 n + 32 (j & 1) + l] (low nibble for j < 2, high for
// j >= 2), high 2 bits at bits 2 j, 2 j + 1 of qh[32 n + l], scale sc[8 n + 2 j + l / 16].
inline constexpr int kQ6_KValues = 256;
struct BlockQ6_K {
  uint8_t ql[kQ6_KValues / 2];
  uint8_t qh[kQ6_KValues / 4];
  int8_t sc[kQ6_KValues / 16];
  uint16_t d;  // f16 super-block scale
};
// GGUF's Q4_K super-block of kQ4_KValues values: 8 sub-blocks of 32, value l of sub-block j
// d sc_j q - dmin m_j with q the nibble of qs[32 (j / 2) + l] (low for even j, high for odd) and
// sc_j, m_j the 6-bit scale and min packed in sc (KQuantScaleMin, dequantize_reference.h).
// Read as stored only by the 8-bit products (PackForVnni8); the 12-bit ones take its Q4_1
// conversion (repack_quant.h).
inline constexpr int kQ4_KValues = 256;
struct BlockQ4_K {
  uint16_t d;     // f16 scale of the sub-block scales
  uint16_t dmin;  // f16 scale of the sub-block mins
  uint8_t sc[12];
  uint8_t qs[kQ4_KValues / 2];
};
// 12-bit activations in i16: 8-bit ones (ggml's Q8_1) flipped the argmax of SmolLM2-135M Q4_1 at
// ~2.7% of positions versus exact arithmetic on the same weights; 12 bits at 0.1% (see matmul.h).
inline constexpr int kQ16Max = 2047;
struct BlockQ16_1 {
  float d;  // scale amax / kQ16Max (f32: activations are quantized per step, not stored)
  float s;  // d * sum(qs)
  int16_t qs[kQuantBlock];
};

// 8-bit activations, a precision cut a build plan takes only behind its eval gate (docs/BUILD.md):
// half the multiply-accumulate instructions of BlockQ16_1 at the AVX-512 VNNI level (vpdpbusd
// sums 4 byte products per lane where vpdpwssd sums 2 i16 ones).
inline constexpr int kQ8Max = 127;
struct BlockQ8A {
  float d;  // scale amax / kQ8Max
  float s;  // d * sum(qs)
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ16_1) == 72);
static_assert(sizeof(BlockQ8A) == 40);

// Value j (0..31) of a Q5_0 or Q5_1 block, in [0, 31]: the nibble as the 4-bit blocks keep it,
// with bit j of the little-endian qh as bit 4. Scalar code's decode (reference, packing).
inline int32_t Q5Value(const uint8_t* qs, const uint8_t* qh, int j) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const int32_t nibble = j < kQuantBlock / 2 ? qs[j] & 0xf : qs[j - kQuantBlock / 2] >> 4;
  return nibble | static_cast<int32_t>(((bits >> j) & 1u) << 4);
}

// IEEE half <-> float, exact for every half value (subnormals, inf, NaN included).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round-to-nearest-even float -> half.
inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (x < 0x38800000u) {                                               // subnormal or zero
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((x >> 13) - ((127 - 15) << 10));
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace streamd::kernels
