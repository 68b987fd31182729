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
    case ConvertedQuant::kQ5_0:
      return {0};
    case ConvertedQuant::kQ5_1:
      return {0, 2};
    case ConvertedQuant::kQ2_K:
      return {80, 82};
    case ConvertedQuant::kQ3_K:
      return {108};
    case ConvertedQuant::kQ4_K:
      return {0, 2};
    case ConvertedQuant::kQ5_K:
      return {0, 2};
    case ConvertedQuant::kQ6_K:
      return {208};
    case ConvertedQuant::kIQ4_NL:
      return {0};
    case ConvertedQuant::kIQ4_XS:
      return {0};
  }
  return {};
}

// One block at `out` (LayoutOf(type).block_bytes). amax > 0, as a trained matrix's rows: the
// f16 scale d is random in [0.5, 1), a second f16 field (the min of Q5_1 and the K-quants) is set
// so the block's mean is about zero (random mins alone would give every row a bias of ~20% of
// its range, a degenerate network), then both are scaled so the block's largest |value| is about
// amax (within f16 rounding). amax == 0: the f16 fields take random signs and magnitudes over
// 2^-12 .. 2^4 (for tests of the bit layouts, not of a model).
inline void RandomBlock(ConvertedQuant type, std::mt19937_64& rng, float amax, uint8_t* out) {
  const QuantLayout layout = LayoutOf(type);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < layout.block_bytes; ++i) out[i] = static_cast<uint8_t>(byte(rng));
  const std::vector<int> offsets = HalfScaleOffsets(type);
  const auto write = [&](const std::vector<float>& scales) {
    for (size_t i = 0; i < offsets.size(); ++i) {
      const uint16_t h = FloatToHalf(scales[i]);
      std::memcpy(out + offsets[i], &h, sizeof h);
    }
  };
  std::vector<float> x(layout.block_values);
  // Values are linear in the f16 fields: the block's values with fields `scales`.
  const auto decode = [&](const std::vector<float>& scales) {
    write(scales);
    DequantizeReference(type, out, 1, x.data());
  };
  const auto mean = [&] {
    double sum = 0;
    for (float v : x) sum += v;
    return sum / static_cast<double>(x.size());
  };
  std::vector<float> scales(offsets.size());
  if (amax == 0.0f) {
    std::uniform_real_distribution<float> log2(-12.0f, 4.0f);
    for (float& s : scales) s = std::exp2(log2(rng)) * (byte(rng) < 128 ? -1.0f : 1.0f);
    write(scales);
    return;
  }
  scales[0] = std::uniform_real_distribution<float>(0.5f, 1.0f)(rng);
  if (scales.size() == 2) {
    decode({scales[0], 0.0f});
    const double scaled_part = mean();
    decode({0.0f, 1.0f});
    const double per_unit_min = mean();
    scales[1] = per_unit_min == 0 ? 0.0f : static_cast<float>(-scaled_part / per_unit_min);
  }
  decode(scales);
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  if (m == 0.0f) return;
  for (float& s : scales) s *= amax / m;
  write(scales);
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
