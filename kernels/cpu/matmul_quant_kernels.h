// AVX2 kernels for quantized weights (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q6_K) times Q16_1 activations,
// shared by the instruction-set levels that run them. They are templates on Mac, the i16
// multiply-accumulate acc + sum of pair products (acc[l] += a[2l] b[2l] + a[2l+1] b[2l+1] per i32
// lane l):
//   matmul_quant_avx2.cc  MaddAvx2:   _mm256_madd_epi16, then an i32 add
//   matmul_quant_vnni.cc  DpwssdVnni: AVX-VNNI _mm256_dpwssd_avx_epi32, both in one instruction
// Include only from those files (compiled with -mavx2 -mfma -mf16c, plus -mavxvnni for the second);
// everything here has internal linkage, so no copy built with wider flags reaches another level.
// Same math as matmul_portable.cc (exact i32 block sums, f32 per-block scaling), other f32 order.
//
// Per weight block b of row r and activation block of token t (see matmul_portable.cc):
//   out[t][r] += dw * dx * sum_j q_j y_j  +  ow * os
// with (ow, os) = (mw, sx) for Q4_1, (dw, -8 sx) for Q4_0 and no offset term for Q8_0 and Q5_0
// (whose values q - 16 are widened signed) and Q6_K (whose q_j are its values times their
// 16-value scales, dw its super-block's d; matmul_quant_tiles.h).
// Weights are widened to i16 (WeightI16: values 0-15 and 16-31 in two vectors) and multiplied
// with the i16 activations, products summed in pairs into i32 lanes.
// Overflow: |y| <= kQ16Max = 2047, so one product is <= 15 * 2047 (4-bit) or 128 * 2047 (Q8_0) in
// magnitude. Every i32 value below sums the products of ONE block (32 of them at most): <= 32 * 15
// * 2047 < 2^20 (4-bit), 32 * 128 * 2047 < 2^23 (Q8_0) or 32 * 4096 * 2047 < 2^28 (Q6_K: one
// product <= 4096 * 2047, a lane's pair sum < 2^25), so neither the lanes, nor the
// hadds that fold a block's lanes (Fold4), nor OuterTile's per-token block sums overflow.
// Products of different blocks are never added in i32: each block has its own scale, applied in
// f32.
//
// Four kernels, picked by token count (measured on Sapphire Rapids, see matmul_bench.cc):
//   GemvQuad   1 token: 4 rows per step, their i32 sums folded by hadds into one vector
//              [r0 r1 r2 r3 | r0 r1 r2 r3] so one cvt + fma serves 4 rows; software prefetch,
//              since decode streams every weight from DRAM once.
//   OuterTile  chunks of 16 tokens (12-15 padded to 16): tokens in the vector lanes. The
//              activations are repacked (PackChunk) so that one vector holds the same value pair
//              (y_2i, y_2i+1) of 8 tokens; a weight pair broadcast to every lane then feeds 8
//              tokens per multiply-accumulate and the i32 lanes are the per-token block sums,
//              with no horizontal reduction: ~1.5x TileQuad's throughput at 16+ tokens, but its
//              per-block costs only pay off over full lanes.
//   TileQuad   4-11 tokens (alone, or left over after OuterTile): each widened weight block used
//              for 4 kQuadGroups tokens, whose i32 sums are folded by hadds like GemvQuad's rows.
//   Tile       everything else (2-3 tokens, remainders): kR <= 4 rows x kT tokens, one f32
//              accumulator per (row, token).
// Kernels reading the token-major activations directly live in matmul_quant_tiles.h.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/matmul_quant_tiles.h"

namespace streamd::kernels::cpu::internal {
namespace {

// OuterTile: tokens per group (vector lanes), groups and rows per tile (measured: 3 rows x 2
// groups best of 9 shapes, 1x2 to 4x2, at both levels). PackedChunk, 36 KiB, lives on the stack.
constexpr int kLanes = 8;
constexpr int kOuterGroups = 2;
constexpr int kOuterTokens = kLanes * kOuterGroups;
constexpr int kOuterRows = 3;

// Activations of kOuterTokens tokens over up to kBlockChunk blocks, tokens in lanes.
struct PackedChunk {
  // [group][block][pair i][lane]: the i16 pair (y_2i, y_2i+1) of token 8 group + lane, as i32.
  alignas(32) int32_t y[kOuterGroups][kBlockChunk][kQuantBlock / 2][kLanes];
  alignas(32) float dx[kOuterGroups][kBlockChunk][kLanes];  // block scales
  alignas(32) float os[kOuterGroups][kBlockChunk][kLanes];  // offset factors (F::Os)
};

// In place: rows v[0..7] (8 i32 each) -> columns.
inline void Transpose8x8(__m256i* v) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

// Packs tokens [0, n_valid) (n_valid <= kOuterTokens) of x, blocks [0, nbc); lanes of missing
// tokens get y = dx = os = 0. x: first token's first block of the chunk, tokens nb blocks apart.
template <class F>
void PackChunk(const BlockQ16_1* x, int64_t nb, int n_valid, int64_t nbc, PackedChunk& p) {
  for (int g = 0; g < kOuterGroups; ++g) {
    for (int64_t b = 0; b < nbc; ++b) {
      __m256i lo[kLanes], hi[kLanes];  // pairs 0-7 and 8-15 of each lane's token
      for (int l = 0; l < kLanes; ++l) {
        const int t = kLanes * g + l;
        if (t < n_valid) {
          const BlockQ16_1& xb = x[t * nb + b];
          lo[l] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
          hi[l] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs + 16));
          p.dx[g][b][l] = xb.d;
          p.os[g][b][l] = F::Os(xb.s);
        } else {
          lo[l] = hi[l] = _mm256_setzero_si256();
          p.dx[g][b][l] = p.os[g][b][l] = 0.0f;
        }
      }
      Transpose8x8(lo);
      Transpose8x8(hi);
      for (int i = 0; i < kLanes; ++i) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.y[g][b][i]), lo[i]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.y[g][b][i + kLanes]), hi[i]);
      }
    }
  }
}

// kR rows x all packed tokens over nbc blocks; tokens [0, n_valid) are written (or added to out
// unless first: later block chunks of the same tile).
template <class Mac, class F, int kR>
void OuterTile(const uint8_t* w, size_t w_stride, const PackedChunk& p, int64_t nbc, int n_valid,
               bool first, float* out, int64_t ldo) {
  static_assert(kR <= 4);
  constexpr int kG = kOuterGroups;
  __m256 acc[kR][kG];  // lane l of acc[r][g]: token 8 g + l, row r
  for (int r = 0; r < kR; ++r) {
    for (int g = 0; g < kG; ++g) acc[r][g] = _mm256_setzero_ps();
  }
  alignas(32) int32_t wq[kR][kQuantBlock / 2];  // the rows' widened block, as i16 pairs
  for (int64_t b = 0; b < nbc; ++b) {
    const uint8_t* blocks[kR];
    for (int r = 0; r < kR; ++r) {
      blocks[r] = w + r * w_stride + UnitOffset<F>(b);
      const WeightI16 q = WidenAt<F>(blocks[r], b);
      _mm256_store_si256(reinterpret_cast<__m256i*>(wq[r]), q.lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(wq[r] + 8), q.hi);
    }
    const __m256 pairs = ScalePairsAt<F>(blocks, kR);  // [dw0 ow0 dw1 ow1 ...]
    __m256i sum[kR][kG];  // i32 block sums, one block only (see the overflow note)
    for (int r = 0; r < kR; ++r) {
      for (int g = 0; g < kG; ++g) sum[r][g] = _mm256_setzero_si256();
    }
    for (int i = 0; i < kQuantBlock / 2; ++i) {
      __m256i y[kG];
      for (int g = 0; g < kG; ++g) {
        y[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.y[g][b][i]));
      }
      for (int r = 0; r < kR; ++r) {
        const __m256i wp = _mm256_set1_epi32(wq[r][i]);
        for (int g = 0; g < kG; ++g) sum[r][g] = Mac::MulAdd(sum[r][g], wp, y[g]);
      }
    }
    for (int r = 0; r < kR; ++r) {
      const __m256 dw = _mm256_permutevar8x32_ps(pairs, _mm256_set1_epi32(2 * r));
      for (int g = 0; g < kG; ++g) {
        const __m256 scale = _mm256_mul_ps(dw, _mm256_load_ps(p.dx[g][b]));
        acc[r][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][g]), scale, acc[r][g]);
        if constexpr (F::kOffset) {
          const __m256 ow = _mm256_permutevar8x32_ps(pairs, _mm256_set1_epi32(2 * r + 1));
          acc[r][g] = _mm256_fmadd_ps(ow, _mm256_load_ps(p.os[g][b]), acc[r][g]);
        }
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int g = 0; g < kG; ++g) {
      alignas(32) float v[kLanes];
      _mm256_store_ps(v, acc[r][g]);
      for (int l = 0; l < kLanes && kLanes * g + l < n_valid; ++l) {
        float& o = out[(kLanes * g + l) * ldo + r];
        o = first ? v[l] : o + v[l];
      }
    }
  }
}

// Tokens [0, n_tokens) in chunks of kOuterTokens (the last one may be partial), blocks in chunks
// of kBlockChunk, rows in tiles of kOuterRows (then single rows) with OuterTile.
template <class Mac, class F>
void MatMulOuter(const uint8_t* w, size_t w_row_bytes, int64_t nb, const BlockQ16_1* xq,
                 int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  constexpr int kR = kOuterRows;
  PackedChunk p;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kOuterTokens) {
    const int nt = static_cast<int>(n_tokens - t0 < kOuterTokens ? n_tokens - t0 : kOuterTokens);
    for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
      const int64_t nbc = nb - kb0 < kBlockChunk ? nb - kb0 : kBlockChunk;
      PackChunk<F>(xq + t0 * nb + kb0, nb, nt, nbc, p);
      const uint8_t* wb = w + UnitOffset<F>(kb0);
      float* o = out + t0 * ldo;
      int64_t r0 = row_begin;
      for (; r0 + kR <= row_end; r0 += kR) {
        OuterTile<Mac, F, kR>(wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, p, nbc, nt,
                              kb0 == 0, o + r0, ldo);
      }
      for (; r0 < row_end; ++r0) {
        OuterTile<Mac, F, 1>(wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, p, nbc, nt,
                             kb0 == 0, o + r0, ldo);
      }
    }
  }
}

// OuterTile for whole chunks of kOuterTokens, and for a last partial chunk of at least 12 tokens
// (padded, it still beats TileQuad); TileQuad and Tile for the 4-11 or fewer tokens left.
template <class Mac, class F>
void MatMulFormat(const uint8_t* w, size_t w_row_bytes, int64_t k, const BlockQ16_1* xq,
                  int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin, int64_t row_end) {
  constexpr int kMinPartialChunk = 12;
  const int64_t nb = k / kQuantBlock;
  if (n_tokens == 1) return MatMulGemv<Mac, F>(w, w_row_bytes, nb, xq, out, row_begin, row_end);
  if (n_tokens < 4) {
    return MatMulTiled<Mac, F>(w, w_row_bytes, nb, xq, n_tokens, out, ldo, row_begin, row_end);
  }
  int64_t n_outer = n_tokens / kOuterTokens * kOuterTokens;
  if (n_tokens - n_outer >= kMinPartialChunk) n_outer = n_tokens;
  if (n_outer > 0) {
    MatMulOuter<Mac, F>(w, w_row_bytes, nb, xq, n_outer, out, ldo, row_begin, row_end);
  }
  if (n_outer < n_tokens) {
    MatMulQuad<Mac, F>(w, w_row_bytes, nb, xq + n_outer * nb, n_tokens - n_outer,
                       out + n_outer * ldo, ldo, row_begin, row_end);
  }
}

// The MatMulQuant* entry point of one instruction-set level (see matmul_internal.h).
template <class Mac>
void MatMulQuant(WeightType type, const uint8_t* w, size_t w_row_bytes, int64_t k,
                 const BlockQ16_1* xq, int64_t n_tokens, float* out, int64_t ldo, int64_t row_begin,
                 int64_t row_end) {
  switch (type) {
    case WeightType::kQ4_0:
      return MatMulFormat<Mac, Q4_0Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                           row_end);
    case WeightType::kQ4_1:
      return MatMulFormat<Mac, Q4_1Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                           row_end);
    case WeightType::kQ8_0:
      return MatMulFormat<Mac, Q8_0Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                           row_end);
    case WeightType::kQ5_0:
      return MatMulFormat<Mac, Q5_0Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                           row_end);
    case WeightType::kQ5_1:
      return MatMulFormat<Mac, Q5_1Format>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                           row_end);
    case WeightType::kQ6_K:
      return MatMulFormat<Mac, Q6_KFormat>(w, w_row_bytes, k, xq, n_tokens, out, ldo, row_begin,
                                           row_end);
    default:
      return;
  }
}

}  // namespace
}  // namespace streamd::kernels::cpu::internal
