// PackForAmx: the tile-ordered copy of 4-bit weight matrices (layout: matmul_internal.h). Plain
// C++, run once per matrix at model load.
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu {
namespace {

constexpr int kTileRows = 16;

// The 4-bit value v (0..31) of a block's quants: value j in the low nibble of qs[j], value
// j + 16 in the high nibble.
uint8_t Value(const uint8_t* qs, int v) {
  return v < 16 ? qs[v] & 0x0f : static_cast<uint8_t>(qs[v - 16] >> 4);
}

}  // namespace

bool AmxPackable(WeightType type, int64_t rows, int64_t k) {
  return (type == WeightType::kQ4_0 || type == WeightType::kQ4_1 || type == WeightType::kQ8_0) &&
         rows > 0 && rows % kTileRows == 0 && k > 0 && k % kQuantBlock == 0;
}

size_t AmxPackedBytes(WeightType type, int64_t rows, int64_t k) {
  if (!AmxPackable(type, rows, k)) return 0;
  return static_cast<size_t>(rows / kTileRows) * static_cast<size_t>(k / kQuantBlock) *
         internal::AmxPackedRecordBytes(type);
}

void PackForAmx(WeightType type, const void* w, size_t w_row_bytes, int64_t rows, int64_t k,
                void* out) {
  if (!AmxPackable(type, rows, k)) return;
  const auto* src = static_cast<const uint8_t*>(w);
  auto* dst = static_cast<uint8_t*>(out);
  const bool has_min = type == WeightType::kQ4_1;
  const size_t block_bytes = type == WeightType::kQ8_0 ? sizeof(BlockQ8_0)
                             : has_min                 ? sizeof(BlockQ4_1)
                                                       : sizeof(BlockQ4_0);
  const size_t record_bytes = internal::AmxPackedRecordBytes(type);
  const int64_t nb = k / kQuantBlock;
  for (int64_t tile = 0; tile < rows / kTileRows; ++tile) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + (tile * nb + b) * record_bytes;
      std::memset(rec, 0, record_bytes);
      uint8_t* quants = rec + internal::kAmxPackedScaleBytes;
      for (int n = 0; n < kTileRows; ++n) {
        const uint8_t* block = src + (tile * kTileRows + n) * w_row_bytes + b * block_bytes;
        std::memcpy(rec + 2 * n, block, 2);                        // d
        if (has_min) std::memcpy(rec + 32 + 2 * n, block + 2, 2);  // m
        if (type == WeightType::kQ8_0) {  // values 4kk..4kk+3 in row kk, bytes 4n..4n+3
          for (int v = 0; v < kQuantBlock; ++v) quants[64 * (v / 4) + 4 * n + v % 4] = block[2 + v];
          continue;
        }
        const uint8_t* qs = block + block_bytes - kQuantBlock / 2;
        const int lane = n / 4, i = n % 4;
        for (int j = 0; j < 4; ++j) {
          uint8_t* s = quants + 64 * j + 16 * lane + 2 * i;
          for (int e = 0; e < 2; ++e) {
            s[e] = static_cast<uint8_t>(Value(qs, 8 * j + e) | Value(qs, 8 * j + 4 + e) << 4);
            s[8 + e] =
                static_cast<uint8_t>(Value(qs, 8 * j + 2 + e) | Value(qs, 8 * j + 6 + e) << 4);
          }
        }
      }
    }
  }
}

}  // namespace streamd::kernels::cpu
