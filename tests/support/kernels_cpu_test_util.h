// Shared helpers of kernels_cpu_test: fresh random seeds (printed on failure so a failing run can
// be replayed with STREAMD_TEST_SEED=<seed>), the instruction-set levels this CPU can run, and
// random weights (with an independent decode, for references) and activations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/dequantize_reference.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/random_quant_blocks.h"

namespace streamd::kernels::cpu::testing {

// STREAMD_TEST_SEED if set, else a fresh seed from std::random_device.
inline uint64_t TestSeed() {
  if (const char* env = std::getenv("STREAMD_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

inline std::string SeedTrace(uint64_t seed) {
  return "replay with STREAMD_TEST_SEED=" + std::to_string(seed);
}

// Every level this CPU can run, portable first; a level it lacks is not listed (and ForceIsa
// steps down from it).
inline std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : kAllIsas) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Restores the detected ISA when a test that forced one ends.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) { ForceIsa(isa); }
  ~ScopedIsa() { ForceIsa(DetectIsa()); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;
};

// Independent IEEE half decode (no bit tricks), for the reference.
inline double RefHalf(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(static_cast<double>(mant + 1024), exp - 25);
}

inline double RefBf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

struct Weights {
  WeightType type;
  int64_t rows = 0, k = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> data;  // [rows, row_bytes]
  std::vector<double> w;      // [rows, k] decoded
  std::vector<double> d_abs;  // [rows, k/32] |d| of each block (quantized types)
  std::vector<double> m_abs;  // [rows, k/32] |m| of each block (Q4_1)
};

inline uint16_t RandomHalf(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> mag(lo, hi);
  const double v = mag(rng) * ((rng() & 1) ? -1.0 : 1.0);
  return FloatToHalf(static_cast<float>(v));
}

// A row of k values in random super-blocks of a K-quant read as stored (every quant, scale and
// bit pattern reachable) at `row`, and their plain reference decode, which equals the gguf
// package's numpy, in w.
inline void RandomSuperBlocks(ConvertedQuant type, int64_t k, std::mt19937_64& rng, uint8_t* row,
                              double* w) {
  const int64_t n_super = k / LayoutOf(type).block_values;
  const std::vector<uint8_t> blocks = RandomBlocks(type, n_super, rng, /*amax=*/0.5f);
  std::memcpy(row, blocks.data(), blocks.size());
  std::vector<float> decoded(static_cast<size_t>(k));
  DequantizeReference(type, row, n_super, decoded.data());
  for (int64_t j = 0; j < k; ++j) w[j] = decoded[j];
}

inline Weights RandomWeights(WeightType type, int64_t rows, int64_t k, std::mt19937_64& rng) {
  Weights wt;
  wt.type = type;
  wt.rows = rows;
  wt.k = k;
  wt.row_bytes = WeightRowBytes(type, k);
  wt.data.resize(wt.row_bytes * rows);
  wt.w.resize(rows * k);
  const int64_t nb = k / kQuantBlock;
  wt.d_abs.assign(rows * nb, 0.0);
  wt.m_abs.assign(rows * nb, 0.0);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = wt.data.data() + r * wt.row_bytes;
    double* w = wt.w.data() + r * k;
    switch (type) {
      case WeightType::kF32:
        for (int64_t j = 0; j < k; ++j) {
          const float v = normal(rng);
          std::memcpy(row + 4 * j, &v, 4);
          w[j] = v;
        }
        break;
      case WeightType::kF16:
      case WeightType::kBF16:
        for (int64_t j = 0; j < k; ++j) {
          const float v = normal(rng);
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          const uint16_t h =
              type == WeightType::kF16 ? FloatToHalf(v) : static_cast<uint16_t>(bits >> 16);
          std::memcpy(row + 2 * j, &h, 2);
          w[j] = type == WeightType::kF16 ? RefHalf(h) : RefBf16(h);
        }
        break;
      case WeightType::kQ4_0:
        for (int64_t b = 0; b < nb; ++b) {
          auto* blk = reinterpret_cast<BlockQ4_0*>(row) + b;
          blk->d = RandomHalf(rng, 1e-3, 5e-2);
          for (auto& q : blk->qs) q = static_cast<uint8_t>(rng());
          const double d = RefHalf(blk->d);
          wt.d_abs[r * nb + b] = std::fabs(d);
          for (int j = 0; j < kQuantBlock / 2; ++j) {
            w[b * kQuantBlock + j] = d * ((blk->qs[j] & 0xf) - 8);
            w[b * kQuantBlock + j + kQuantBlock / 2] = d * ((blk->qs[j] >> 4) - 8);
          }
        }
        break;
      case WeightType::kQ4_1:
        for (int64_t b = 0; b < nb; ++b) {
          auto* blk = reinterpret_cast<BlockQ4_1*>(row) + b;
          blk->d = RandomHalf(rng, 1e-3, 5e-2);
          blk->m = RandomHalf(rng, 1e-3, 3e-1);
          for (auto& q : blk->qs) q = static_cast<uint8_t>(rng());
          const double d = RefHalf(blk->d), m = RefHalf(blk->m);
          wt.d_abs[r * nb + b] = std::fabs(d);
          wt.m_abs[r * nb + b] = std::fabs(m);
          for (int j = 0; j < kQuantBlock / 2; ++j) {
            w[b * kQuantBlock + j] = d * (blk->qs[j] & 0xf) + m;
            w[b * kQuantBlock + j + kQuantBlock / 2] = d * (blk->qs[j] >> 4) + m;
          }
        }
        break;
      case WeightType::kQ8_0:
        for (int64_t b = 0; b < nb; ++b) {
          auto* blk = reinterpret_cast<BlockQ8_0*>(row) + b;
          blk->d = RandomHalf(rng, 1e-4, 1e-2);
          for (auto& q : blk->qs) q = static_cast<int8_t>(rng());
          blk->qs[rng() % kQuantBlock] = -128;  // the asymmetric extreme must work too
          const double d = RefHalf(blk->d);
          wt.d_abs[r * nb + b] = std::fabs(d);
          for (int j = 0; j < kQuantBlock; ++j) w[b * kQuantBlock + j] = d * blk->qs[j];
        }
        break;
      case WeightType::kQ5_0:
        for (int64_t b = 0; b < nb; ++b) {
          auto* blk = reinterpret_cast<BlockQ5_0*>(row) + b;
          blk->d = RandomHalf(rng, 1e-3, 5e-2);
          for (auto& q : blk->qh) q = static_cast<uint8_t>(rng());
          for (auto& q : blk->qs) q = static_cast<uint8_t>(rng());
          const double d = RefHalf(blk->d);
          wt.d_abs[r * nb + b] = std::fabs(d);
          // Value j: nibble j % 16 of qs (low for j < 16), bit j of the 4 qh bytes as bit 4.
          for (int j = 0; j < kQuantBlock; ++j) {
            const int nibble = j < 16 ? blk->qs[j] & 0xf : blk->qs[j - 16] >> 4;
            const int high = (blk->qh[j / 8] >> (j % 8)) & 1;
            w[b * kQuantBlock + j] = d * (nibble + 16 * high - 16);
          }
        }
        break;
      case WeightType::kQ5_1:
        for (int64_t b = 0; b < nb; ++b) {
          auto* blk = reinterpret_cast<BlockQ5_1*>(row) + b;
          blk->d = RandomHalf(rng, 1e-3, 5e-2);
          blk->m = RandomHalf(rng, 1e-3, 3e-1);
          for (auto& q : blk->qh) q = static_cast<uint8_t>(rng());
          for (auto& q : blk->qs) q = static_cast<uint8_t>(rng());
          const double d = RefHalf(blk->d), m = RefHalf(blk->m);
          wt.d_abs[r * nb + b] = std::fabs(d);
          wt.m_abs[r * nb + b] = std::fabs(m);
          // Value j: nibble j % 16 of qs (low for j < 16), bit j of the 4 qh bytes as bit 4.
          for (int j = 0; j < kQuantBlock; ++j) {
            const int nibble = j < 16 ? blk->qs[j] & 0xf : blk->qs[j - 16] >> 4;
            const int high = (blk->qh[j / 8] >> (j % 8)) & 1;
            w[b * kQuantBlock + j] = d * (nibble + 16 * high) + m;
          }
        }
        break;
      case WeightType::kQ6_K: {
        // Random super-blocks (every quant, i8 scale and bit pattern reachable) decoded by the
        // plain reference dequantizer, which equals the gguf package's numpy.
        RandomSuperBlocks(ConvertedQuant::kQ6_K, k, rng, row, w);
        // A block's quantum: |d| times its larger |scale|.
        for (int64_t b = 0; b < nb; ++b) {
          const auto& s = reinterpret_cast<const BlockQ6_K*>(row)[b / 8];
          const int first = 8 * static_cast<int>(b % 8 / 4) + 2 * static_cast<int>(b % 4);
          wt.d_abs[r * nb + b] =
              std::fabs(RefHalf(s.d)) * std::max(std::abs(s.sc[first]), std::abs(s.sc[first + 1]));
        }
        break;
      }
      case WeightType::kQ4_K: {
        // Random super-blocks decoded by the plain reference dequantizer, as Q6_K's.
        RandomSuperBlocks(ConvertedQuant::kQ4_K, k, rng, row, w);
        // A block's quantum |d sc| and offset |dmin m|.
        for (int64_t b = 0; b < nb; ++b) {
          const auto& s = reinterpret_cast<const BlockQ4_K*>(row)[b / 8];
          int sc = 0, m = 0;
          KQuantScaleMin(s.sc, static_cast<int>(b % 8), &sc, &m);
          wt.d_abs[r * nb + b] = std::fabs(RefHalf(s.d)) * sc;
          wt.m_abs[r * nb + b] = std::fabs(RefHalf(s.dmin)) * m;
        }
        break;
      }
    }
  }
  return wt;
}

// x: [n, ldx] with per-token scales spanning 1e-2..1e2, a few outliers, and NaN in the padding.
inline std::vector<float> RandomActivations(int64_t n, int64_t k, int64_t ldx,
                                            std::mt19937_64& rng) {
  std::vector<float> x(n * ldx, std::numeric_limits<float>::quiet_NaN());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-2.0f, 2.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float scale = std::pow(10.0f, log_scale(rng));
    for (int64_t j = 0; j < k; ++j) {
      float v = normal(rng) * scale;
      if (rng() % 100 == 0) v *= 20.0f;
      x[t * ldx + j] = v;
    }
  }
  return x;
}

}  // namespace streamd::kernels::cpu::testing
