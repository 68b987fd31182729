// Random blocks of the formats in dequantize_reference.h, for tests and synthetic models: random
// bytes (every quant, sub-block scale and bit pattern is reachable) whose f16 block scales are
// replaced by finite values, so every block decodes to finite numbers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/dequantize_reference.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels {

// Byte offsets of a block's f16 scales (d, and dmin where the format has one).
inline std::vector<int> HalfScaleOffsets(ConvertedQuant type) {
  switch (type) {
    case ConvertedQuant::kQ5_0: return {0};
    case ConvertedQuant::kQ5_1: return {0, 2};
    case ConvertedQuant::kQ2_K: return {80, 82};
    case ConvertedQuant::kQ3_K: return {108};
    case ConvertedQuant::kQ4_K: return {0, 2};
    case ConvertedQuant::kQ5_K: return {0, 2};
    case ConvertedQuant::kQ6_K: return {208};
    case ConvertedQuant::kIQ4_NL: return {0};
    case ConvertedQuant::kIQ4_XS: return {0};
  }
  return {};
}

// One block at `out` (LayoutOf(type).block_bytes). amax > 0: the f16 scales are random in
// [0.5, 1) and then scaled so that the block's largest |value| is about amax (within f16
// rounding), as a trained matrix's rows are. amax == 0: the scales take random signs and
// magnitudes over 2^-12 .. 2^4 (for tests of the bit layouts, not of a model).
inline void RandomBlock(ConvertedQuant type, std::mt19937_64& rng, float amax, uint8_t* out) {
  const QuantLayout layout = LayoutOf(type);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < layout.block_bytes; ++i) out[i] = static_cast<uint8_t>(byte(rng));
  const std::vector<int> offsets = HalfScaleOffsets(type);
  std::vector<float> scales;
  std::uniform_real_distribution<float> unit(0.5f, 1.0f);
  std::uniform_real_distribution<float> log2(-12.0f, 4.0f);
  for (size_t i = 0; i < offsets.size(); ++i) {
    float s = unit(rng);
    if (amax == 0.0f) s = std::exp2(log2(rng)) * (byte(rng) < 128 ? -1.0f : 1.0f);
    scales.push_back(s);
  }
  const auto write = [&](float factor) {
    for (size_t i = 0; i < offsets.size(); ++i) {
      const uint16_t h = FloatToHalf(scales[i] * factor);
      std::memcpy(out + offsets[i], &h, sizeof h);
    }
  };
  write(1.0f);
  if (amax == 0.0f) return;
  // Every value is linear in the f16 scales, so scaling them all scales the block.
  std::vector<float> x(layout.block_values);
  DequantizeReference(type, out, 1, x.data());
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  if (m > 0.0f) write(amax / m);
}

// n_blocks random blocks back to back.
inline std::vector<uint8_t> RandomBlocks(ConvertedQuant type, int64_t n_blocks,
                                         std::mt19937_64& rng, float amax) {
  const QuantLayout layout = LayoutOf(type);
  std::vector<uint8_t> bytes(static_cast<size_t>(n_blocks * layout.block_bytes));
  for (int64_t b = 0; b < n_blocks; ++b) {
    RandomBlock(type, rng, amax, bytes.data() + b * layout.block_bytes);
  }
  return bytes;
}

}  // namespace streamd::kernels
