// Quantized weights (Q4_0, Q4_1, Q8_0) times 8-bit activations (BlockQ8A), AVX-512 VNNI level.
//
// The 12-bit kernel (matmul_quant_avx512.cc) is bound by vpdpwssd, which sums 2 i16 products per
// lane; vpdpbusd sums 4 byte products per lane, so 8-bit activations take half the instructions
// for the same work. It multiplies unsigned by signed bytes: the activations are made unsigned
// (q + 128, packed once per chunk of tokens) and the weights are the signed side (4-bit values
// 0..15, or Q8_0's bytes), folded into the instruction as an embedded broadcast; the 128 * sum(w)
// this adds per block is taken off again before the sum is scaled:
//   sum_j w_j q_j = sum_j w_j (q_j + 128) - 128 sum_j w_j.
// The same layout as the 12-bit kernel otherwise: 16 tokens in the lanes of a zmm register,
// kRows rows per tile with two accumulator chains each (even and odd quads of the block), the
// next tile's weights prefetched, and the f32 math of the portable reference in the same order
// (matmul_quant8.cc), so the results are the same bit for bit. Every token count runs here, a
// last partial chunk padded to 16 lanes: this path is taken for batches only, by a build plan.
//
// Compiled with -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni; reached only
// after the run-time check in isa.cc.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu::internal {
namespace {

constexpr int kLanes = 16;
constexpr int kQuads = kQuantBlock / 4;  // 4-byte groups per block
constexpr int kRows = 6;                 // 2 * kRows chains + kRows f32 sums + 2 inputs: 20 zmm

// Activations of 16 tokens over up to kBlockChunk blocks, tokens in lanes.
struct PackedChunk8 {
  // [block][quad i][lane]: bytes 4i..4i+3 of token `lane`'s block, each + 128 (as u8).
  alignas(64) uint32_t y[kBlockChunk][kQuads][kLanes];
  alignas(64) float dx[kBlockChunk][kLanes];
  alignas(64) float sx[kBlockChunk][kLanes];
};

// Tokens [0, n_valid) of x (tokens nb blocks apart), blocks [0, nbc); missing lanes get q = 0
// (128 after the shift) and scales 0, so they add nothing.
void PackChunk8(const BlockQ8A* x, int64_t nb, int n_valid, int64_t nbc, PackedChunk8& p) {
  for (int64_t b = 0; b < nbc; ++b) {
    for (int t = 0; t < kLanes; ++t) {
      if (t < n_valid) {
        const BlockQ8A& xb = x[t * nb + b];
        for (int i = 0; i < kQuads; ++i) {
          uint32_t v;
          std::memcpy(&v, xb.qs + 4 * i, sizeof v);
          p.y[b][i][t] = v ^ 0x80808080u;
        }
        p.dx[b][t] = xb.d;
        p.sx[b][t] = xb.s;
      } else {
        for (int i = 0; i < kQuads; ++i) p.y[b][i][t] = 0x80808080u;
        p.dx[b][t] = p.sx[b][t] = 0.0f;
      }
    }
  }
}

enum class Format { kQ4_0, kQ4_1, kQ8_0 };

// One row's block: its 32 values as signed bytes in element order (into `bytes`), 128 times
// their sum, its scale and its offset factor.
template <Format F>
inline void LoadRowBlock(const uint8_t* row, int64_t b, int8_t* bytes, int32_t* shift,
                         float* dw, float* ow) {
  if constexpr (F == Format::kQ8_0) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
    _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), q);
    // Sum of signed bytes: the unsigned sum of q + 128, less 32 * 128.
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(-128)),
                                        _mm256_setzero_si256());
    const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    const int32_t sum = static_cast<int32_t>(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) -
                        kQuantBlock * 128;
    *shift = 128 * sum;
    *dw = _cvtsh_ss(blk->d);
    *ow = 0;
  } else {
    const uint8_t* qs;
    uint16_t d;
    if constexpr (F == Format::kQ4_1) {
      const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
      qs = blk->qs;
      d = blk->d;
      *ow = _cvtsh_ss(blk->m);
    } else {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
      qs = blk->qs;
      d = blk->d;
    }
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(packed, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), q);
    const __m256i sad = _mm256_sad_epu8(q, _mm256_setzero_si256());
    const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    *shift = 128 * static_cast<int32_t>(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1));
    *dw = _cvtsh_ss(d);
    if constexpr (F == Format::kQ4_0) *ow = *dw;
  }
}

template <Format F>
inline float OffsetFactor() {
  return F == Format::kQ4_0 ? -8.0f : 1.0f;
}

// kR rows x 16 packed tokens over nbc blocks; tokens [0, n_valid) are written (or added to out
// unless first: later block chunks of the same tile).
template <Format F, int kR>
void Tile8(const uint8_t* w, size_t w_stride, const PackedChunk8& p, int64_t nbc, int n_valid,
           bool first, float* out, int64_t ldo) {
  constexpr bool kOffset = F != Format::kQ8_0;
  __m512 acc[kR];
  for (int r = 0; r < kR; ++r) acc[r] = _mm512_setzero_ps();
  alignas(32) int8_t wq[kR][kQuantBlock];
  const uint8_t* next_tile = w + kR * w_stride;
  const int64_t lines_per_step = (kR * static_cast<int64_t>(w_stride) / 64 + nbc - 1) / nbc;
  const __m512 os_factor = _mm512_set1_ps(OffsetFactor<F>());
  for (int64_t b = 0; b < nbc; ++b) {
    for (int64_t l = 0; l < lines_per_step; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(next_tile + 64 * (b * lines_per_step + l)),
                   _MM_HINT_T0);
    }
    int32_t shift[kR];
    float dw[kR], ow[kR];
    for (int r = 0; r < kR; ++r) {
      LoadRowBlock<F>(w + r * w_stride, b, wq[r], &shift[r], &dw[r], &ow[r]);
    }
    // Broadcast from memory, folded into vpdpbusd (see the 12-bit kernel on why the pointer is
    // hidden from the optimizer).
    const int32_t* wp = reinterpret_cast<const int32_t*>(&wq[0][0]);
    asm volatile("" : "+r"(wp)::"memory");
    __m512i even[kR], odd[kR];
    for (int r = 0; r < kR; ++r) even[r] = odd[r] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int i = 0; i < kQuads; i += 2) {
      const __m512i y0 = _mm512_load_si512(p.y[b][i]);
      const __m512i y1 = _mm512_load_si512(p.y[b][i + 1]);
      for (int r = 0; r < kR; ++r) {
        const int32_t* wr = wp + r * kQuads;
        even[r] = _mm512_dpbusd_epi32(even[r], y0, _mm512_set1_epi32(wr[i]));
        odd[r] = _mm512_dpbusd_epi32(odd[r], y1, _mm512_set1_epi32(wr[i + 1]));
      }
    }
    const __m512 dx = _mm512_load_ps(p.dx[b]);
    for (int r = 0; r < kR; ++r) {
      const __m512i sum =
          _mm512_sub_epi32(_mm512_add_epi32(even[r], odd[r]), _mm512_set1_epi32(shift[r]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(_mm512_set1_ps(dw[r]), dx),
                               acc[r]);
      if constexpr (kOffset) {
        const __m512 os = _mm512_mul_ps(os_factor, _mm512_load_ps(p.sx[b]));
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(ow[r]), os, acc[r]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    alignas(64) float v[kLanes];
    _mm512_store_ps(v, acc[r]);
    for (int l = 0; l < n_valid; ++l) {
      float& o = out[l * ldo + r];
      o = first ? v[l] : o + v[l];
    }
  }
}

template <Format F>
void MatMul8(const uint8_t* w, size_t w_row_bytes, int64_t k, const BlockQ8A* xq, int64_t n_tokens,
             float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  const int64_t nb = k / kQuantBlock;
  PackedChunk8 p;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kLanes) {
    const int nt = static_cast<int>(n_tokens - t0 < kLanes ? n_tokens - t0 : kLanes);
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
      const int64_t nbc = nb - kb0 < kBlockChunk ? nb - kb0 : kBlockChunk;
      PackChunk8(xq + t0 * nb + kb0, nb, nt, nbc, p);
      const size_t block_bytes = F == Format::kQ8_0   ? sizeof(BlockQ8_0)
                                 : F == Format::kQ4_1 ? sizeof(BlockQ4_1)
                                                      : sizeof(BlockQ4_0);
      const uint8_t* wb = w + static_cast<size_t>(kb0) * block_bytes;
      float* o = out + t0 * ldo;
      int64_t r0 = row_begin;
      for (; r0 + kRows <= row_end; r0 += kRows) {
        Tile8<F, kRows>(wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, p, nbc, nt,
                        kb0 == 0, o + r0, ldo);
      }
      for (; r0 < row_end; ++r0) {
        Tile8<F, 1>(wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, p, nbc, nt, kb0 == 0,
                    o + r0, ldo);
      }
    }
  }
}

// ---- Rows in lanes, from the PackForVnni8 copy ------------------------------------------------
// One zmm holds the same 4 values of 16 rows; a token's 4 activation bytes are broadcast from
// its block ({1to16}). The 8 weight vectors of a block are unpacked once and serve every token
// of a group of kGroup, whose 8-instruction chains interleave. 4-bit weights are the unsigned
// side as they are (0..15); Q8_0's are stored + 128, and 128 * sum(q) of the token's block is
// taken off again.

constexpr int kGroup = 8;

// The activations' integer sums per (token, block), for Q8_0's shift.
void ActivationSums(const BlockQ8A* x, int64_t n, int64_t nb, int32_t* sums) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      int32_t s = 0;
      for (int j = 0; j < kQuantBlock; ++j) s += x[t * nb + b].qs[j];
      sums[t * nb + b] = 128 * s;
    }
  }
}

// Tokens [0, G) of a group (tokens nb blocks apart in x), one tile of 16 rows, blocks [kb0, kb1).
// acc[t] holds the 16 rows' sums of token t over these blocks.
template <Format F, int G>
inline void PackedChunk(const uint8_t* tile, int64_t nb, const BlockQ8A* x, const int32_t* shifts,
                        int64_t kb0, int64_t kb1, __m512* acc) {
  constexpr size_t kRecord = F == Format::kQ8_0 ? 576 : 320;
  const float os_factor = OffsetFactor<F>();
  for (int t = 0; t < G; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = kb0; b < kb1; ++b) {
    const uint8_t* rec = tile + static_cast<size_t>(b) * kRecord;
    _mm_prefetch(reinterpret_cast<const char*>(rec + 4 * kRecord), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(rec + 4 * kRecord + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(rec + 4 * kRecord + 128), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(rec + 4 * kRecord + 192), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(rec + 4 * kRecord + 256), _MM_HINT_T0);
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec)));
    __m512i wv[kQuads];
    if constexpr (F == Format::kQ8_0) {
      for (int i = 0; i < kQuads; ++i) {
        wv[i] = _mm512_load_si512(rec + 64 + 64 * i);
      }
    } else {
      const __m512i mask = _mm512_set1_epi8(0x0f);
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_load_si512(rec + 64 + 64 * j);
        wv[j] = _mm512_and_si512(v, mask);
        wv[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
      }
    }
    __m512 ow = _mm512_setzero_ps();
    if constexpr (F == Format::kQ4_1) {
      ow = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + 32)));
    } else if constexpr (F == Format::kQ4_0) {
      ow = dw;
    }
    __m512i sum[G];
    for (int t = 0; t < G; ++t) sum[t] = _mm512_setzero_si512();
    for (int i = 0; i < kQuads; ++i) {
      for (int t = 0; t < G; ++t) {
        int32_t quad;
        std::memcpy(&quad, x[t * nb + b].qs + 4 * i, sizeof quad);
        sum[t] = _mm512_dpbusd_epi32(sum[t], wv[i], _mm512_set1_epi32(quad));
      }
    }
    for (int t = 0; t < G; ++t) {
      const BlockQ8A& xb = x[t * nb + b];
      __m512i s = sum[t];
      if constexpr (F == Format::kQ8_0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(shifts[t * nb + b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xb.d)),
                               acc[t]);
      if constexpr (F != Format::kQ8_0) {
        acc[t] = _mm512_fmadd_ps(ow, _mm512_set1_ps(os_factor * xb.s), acc[t]);
      }
    }
  }
}

template <Format F, int G>
void PackedGroup(const uint8_t* tile, int64_t nb, const BlockQ8A* x, const int32_t* shifts,
                 float* out, int64_t ldo) {
  for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
    const int64_t kb1 = nb - kb0 < kBlockChunk ? nb : kb0 + kBlockChunk;
    __m512 acc[G];
    PackedChunk<F, G>(tile, nb, x, shifts, kb0, kb1, acc);
    for (int t = 0; t < G; ++t) {
      float* o = out + t * ldo;
      if (kb0 == 0) {
        _mm512_storeu_ps(o, acc[t]);
      } else {
        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[t]));
      }
    }
  }
}

template <Format F>
void MatMul8Packed(const uint8_t* packed, int64_t k, const BlockQ8A* xq, int64_t n_tokens,
                   float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  constexpr size_t kRecord = F == Format::kQ8_0 ? 576 : 320;
  const int64_t nb = k / kQuantBlock;
  // Q8_0's shifts, for up to 64 tokens at a time (a stack table; batches are chunks).
  constexpr int64_t kTokensPerPass = 64;
  alignas(64) int32_t shifts[kTokensPerPass * 64];
  for (int64_t p0 = 0; p0 < n_tokens; p0 += kTokensPerPass) {
    const int64_t np = n_tokens - p0 < kTokensPerPass ? n_tokens - p0 : kTokensPerPass;
    const bool table = F == Format::kQ8_0 && nb <= 64;
    std::vector<int32_t> big;
    int32_t* sh = shifts;
    if (F == Format::kQ8_0 && !table) {
      big.resize(static_cast<size_t>(np * nb));
      sh = big.data();
    }
    if (F == Format::kQ8_0) ActivationSums(xq + p0 * nb, np, nb, sh);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += 16) {
      const uint8_t* tile = packed + static_cast<size_t>(r0 / 16 * nb) * kRecord;
      for (int64_t t0 = 0; t0 < np; t0 += kGroup) {
        const BlockQ8A* x = xq + (p0 + t0) * nb;
        const int32_t* s = sh + t0 * nb;
        float* o = out + (p0 + t0) * ldo + r0;
        switch (np - t0 < kGroup ? np - t0 : kGroup) {
          case 1: PackedGroup<F, 1>(tile, nb, x, s, o, ldo); break;
          case 2: PackedGroup<F, 2>(tile, nb, x, s, o, ldo); break;
          case 3: PackedGroup<F, 3>(tile, nb, x, s, o, ldo); break;
          case 4: PackedGroup<F, 4>(tile, nb, x, s, o, ldo); break;
          case 5: PackedGroup<F, 5>(tile, nb, x, s, o, ldo); break;
          case 6: PackedGroup<F, 6>(tile, nb, x, s, o, ldo); break;
          case 7: PackedGroup<F, 7>(tile, nb, x, s, o, ldo); break;
          default: PackedGroup<F, 8>(tile, nb, x, s, o, ldo); break;
        }
      }
    }
  }
}

}  // namespace

void MatMulQuant8PackedAvx512Vnni(WeightType type, const uint8_t* packed, int64_t k,
                                  const BlockQ8A* xq, int64_t n_tokens, float* out, int64_t ldo,
                                  int64_t row_begin, int64_t row_end) {
  switch (type) {
    case WeightType::kQ4_0:
      return MatMul8Packed<Format::kQ4_0>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end);
    case WeightType::kQ4_1:
      return MatMul8Packed<Format::kQ4_1>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end);
    case WeightType::kQ8_0:
      return MatMul8Packed<Format::kQ8_0>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end);
    default:
      return;
  }
}

void QuantizeRowQ8AAvx512(const float* x, int64_t k, BlockQ8A* out) {
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * kQuantBlock);
    const __m512 x1 = _mm512_loadu_ps(x + b * kQuantBlock + 16);
    const float amax = _mm512_reduce_max_ps(
        _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float inv = amax > 0 ? static_cast<float>(kQ8Max) / amax : 0.0f;
    const __m512 vinv = _mm512_set1_ps(inv);
    // Round to nearest even (the default rounding mode), as nearbyint in the portable quantizer.
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vinv));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16), _mm512_cvtepi32_epi8(q1));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    out[b].d = amax / static_cast<float>(kQ8Max);
    out[b].s = out[b].d * static_cast<float>(sum);
  }
}

void MatMulQuant8Avx512Vnni(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                            const BlockQ8A* xq, int64_t n_tokens, float* out, int64_t ldo,
                            int64_t row_begin, int64_t row_end) {
  switch (type) {
    case WeightType::kQ4_0:
      return MatMul8<Format::kQ4_0>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    case WeightType::kQ4_1:
      return MatMul8<Format::kQ4_1>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    case WeightType::kQ8_0:
      return MatMul8<Format::kQ8_0>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin, row_end);
    default:
      return;
  }
}

}  // namespace streamd::kernels::cpu::internal
