// Plain reference dequantizers of the GGUF block formats streamd reads only by converting them
// at load (repack_quant.h): the 5-bit legacy formats, the K-quants and the non-linear 4-bit ones.
// One scalar loop per format, written for reading, not speed; tested bit for bit against the
// numpy dequantization of the `gguf` PyPI package (dequantize_reference_test.cc).
//
// Layouts (little-endian; "f16" is an IEEE half; value i of a block is x[i]):
//   Q5_0   32 values, 22 bytes: d f16 | qh u32 | qs[16]
//          q = (nibble i) | (bit i of qh) << 4, x = d * (q - 16)
//   Q5_1   32 values, 24 bytes: d f16 | m f16 | qh u32 | qs[16]            x = d * q + m
//          (nibble i: low nibble of qs[i] for i < 16, high nibble of qs[i - 16] otherwise)
//   Q2_K  256 values, 84 bytes: sc[16] | qs[64] | d f16 | dmin f16
//          16 sub-blocks of 16; sc low nibble = scale, high nibble = min;
//          value 128h + 32s + l: q = (qs[32h + l] >> 2s) & 3; x = d*scale*q - dmin*min
//   Q3_K  256 values, 110 bytes: hmask[32] | qs[64] | sc[12] | d f16
//          16 sub-blocks of 16 with 6-bit scales biased by 32 (low nibbles in sc[0..7], sub-block
//          j < 8 the low nibble of sc[j], j >= 8 the high nibble of sc[j - 8]; high 2 bits of
//          sub-block j at bits 2*(j/4) of sc[8 + j%4]); value i = 128h + 32s + l:
//          low = (qs[32h + l] >> 2s) & 3, q = low - 4 * (1 - bit (i/32) of hmask[l]); x = d*scale*q
//   Q4_K  256 values, 144 bytes: d f16 | dmin f16 | sc[12] | qs[128]
//          8 sub-blocks of 32 with 6-bit scale and min (KQuantScaleMin below);
//          value 64c + 32u + l: q = (qs[32c + l] >> 4u) & 15; x = d*scale*q - dmin*min
//   Q5_K  256 values, 176 bytes: d f16 | dmin f16 | sc[12] | qh[32] | qs[128]
//          as Q4_K, plus bit 4 of value 32b + l is bit b of qh[l]
//   Q6_K  256 values, 210 bytes: ql[128] | qh[64] | sc[16] i8 | d f16
//          16 sub-blocks of 16; value i = 128h + 64s + m: low = (ql[64h + m] >> 4s) & 15;
//          value i = 128h + 32t + l: high = (qh[32h + l] >> 2t) & 3; x = d*sc[i/16]*(q - 32)
//   IQ4_NL 32 values, 18 bytes: d f16 | qs[16]; nibbles as Q5_1; x = d * kIq4Values[nibble]
//   IQ4_XS 256 values, 136 bytes: d f16 | sc_h u16 | sc_l[4] | qs[128]
//          8 sub-blocks of 32, each 16 bytes of qs laid out as IQ4_NL; 6-bit scale biased by 32:
//          low 4 bits nibble j of sc_l (j even: low), high 2 bits at bits 2j of sc_h
// This header has no engine types: kernels/ stays below engine/.
#pragma once

#include <cstdint>

namespace streamd::kernels {

// The formats above; the values are the ggml type ids (what GGUF files store).
enum class ConvertedQuant : uint32_t {
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
};
inline constexpr ConvertedQuant kConvertedQuants[] = {
    ConvertedQuant::kQ5_0, ConvertedQuant::kQ5_1,   ConvertedQuant::kQ2_K,
    ConvertedQuant::kQ3_K, ConvertedQuant::kQ4_K,   ConvertedQuant::kQ5_K,
    ConvertedQuant::kQ6_K, ConvertedQuant::kIQ4_NL, ConvertedQuant::kIQ4_XS,
};

struct QuantLayout {
  const char* name;  // ggml's name, "Q4_K"
  int block_values;  // values per block: 32 or 256
  int block_bytes;
};
QuantLayout LayoutOf(ConvertedQuant type);

// The 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K from their 12 packed bytes:
// sub-blocks 0..3 keep theirs in the low 6 bits of bytes j (scale) and j + 4 (min); 4..7 keep
// their low 4 bits in byte j + 4 (scale low nibble, min high nibble) and their top 2 bits in the
// spare top bits of bytes j - 4 (scale) and j (min).
inline void KQuantScaleMin(const uint8_t* sc, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = sc[j] & 63;
    *min = sc[j + 4] & 63;
  } else {
    *scale = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
    *min = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

// The non-linear 4-bit code book of IQ4_NL and IQ4_XS (int8 values).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// Dequantizes n_blocks consecutive blocks of `type` at src into
// n_blocks * LayoutOf(type).block_values floats at out. Arithmetic in f32, in the order the
// format defines (scale products first), so results equal ggml's and the gguf package's.
void DequantizeReference(ConvertedQuant type, const uint8_t* src, int64_t n_blocks, float* out);

}  // namespace streamd::kernels
