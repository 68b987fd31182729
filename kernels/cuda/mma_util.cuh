// Tensor-core and asynchronous-copy building blocks shared by the attention kernels of
// kernels/cuda (not part of the API): cp.async into shared memory, ldmatrix, mma.m16n8k16 with
// f16 inputs and f32 accumulators, the XOR swizzle of K/V rows in shared memory, and the steps
// of one key tile that decode and prefill attention share (copy K/V in, scores, online
// softmax, P V).
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with f16 inputs; g = lane / 4, c = lane % 4):
//   A (16 x 16, m x k): a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..),
//     each register two halves, the lower column in the low 16 bits;
//   B (16 x 8, k x n): b0 = (k 2c..2c+1, n g), b1 = (k 2c+8.., n g);
//   C (16 x 8, f32): c0, c1 = (g, 2c), (g, 2c+1); c2, c3 = (g+8, 2c), (g+8, 2c+1).
// ldmatrix.x4 gives lane L, from the four 8x8 matrices whose rows lanes 8i..8i+7 address, the
// elements (row L / 4, columns 2 (L % 4) and + 1) of each: B fragments from rows of K; with
// .trans, (rows 2 (L % 4) and + 1, column L / 4): B fragments from rows of V.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace streamd::kernels::cuda {

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; with valid = false the destination is zero-filled
// and nothing is read.
__device__ __forceinline__ void CopyAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CopyAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void LoadMatrixX4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void LoadMatrixX4Transposed(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a b for one m16n8k16 tile (f16 inputs, f32 accumulators).
__device__ __forceinline__ void Mma16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one register of halves, the first in the low 16 bits (the lower column).
__device__ __forceinline__ uint32_t PackHalves(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of `kRowBytes` (a
// multiple of 128) whose chunks are XOR-swizzled by the row's low three bits: the eight rows an
// ldmatrix reads (same chunk, rows r..r+7) then sit in eight different bank groups.
template <int kRowBytes>
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int chunk) {
  static_assert(kRowBytes % 128 == 0, "rows of whole 128-byte bank cycles");
  return row * kRowBytes + ((chunk ^ (row & 7)) << 4);
}

// ---- one key tile of an attention kernel ------------------------------------------------------
// A warp owns 16 rows (query heads, or (query, head) pairs); this thread holds rows g and g + 8
// (index h = 0, 1 below). K and V tiles are rows of kRowBytes = 2 head_dim bytes, swizzled, V
// kTileBytes after K; kDimSteps = head_dim / 16.

// Starts the copy of 16-byte chunk `chunk` of key row `row` (K and V) from the pool row at
// element `offset` (K; V is v_minus_k elements on); offset < 0 zero-fills both (a key past the
// range: a zero V row times p = 0 stays 0, garbage could be NaN).
template <int kRowBytes, int kTileBytes>
__device__ __forceinline__ void CopyKvChunk(uint32_t stage, int row, int chunk,
                                            const __half* layer_kv, long long offset,
                                            int64_t v_minus_k) {
  const bool valid = offset >= 0;
  const __half* src = layer_kv + (valid ? offset : 0) + chunk * 8;
  const uint32_t dst = stage + SwizzledOffset<kRowBytes>(row, chunk);
  CopyAsync16(dst, src, valid);
  CopyAsync16(dst + kTileBytes, src + v_minus_k, valid);
}

// Scores of keys key0 .. key0 + 7 (s0) and key0 + 8 .. + 15 (s1) of the K tile: s += Q K^T.
// Each ldmatrix.x4 reads keys key0 + (mat / 2) * 8 + row, dims 16 step + 8 (mat % 2): b0, b1
// of keys 0-7, then of keys 8-15.
template <int kRowBytes, int kDimSteps>
__device__ __forceinline__ void ScoreKeys16(uint32_t k_tile, int key0,
                                            const uint32_t (&qa)[kDimSteps][4], int lane,
                                            float (&s0)[4], float (&s1)[4]) {
  const int mat = lane / 8, mat_row = lane % 8;
#pragma unroll
  for (int step = 0; step < kDimSteps; ++step) {
    uint32_t b[4];
    LoadMatrixX4(
        k_tile + SwizzledOffset<kRowBytes>(key0 + (mat / 2) * 8 + mat_row, 2 * step + mat % 2), b);
    Mma16x8x16(s0, qa[step], b[0], b[1]);
    Mma16x8x16(s1, qa[step], b[2], b[3]);
  }
}

// The online softmax over one tile, per row, in base 2: s (kN n-tiles of this thread's scores,
// -inf where masked) becomes p = 2^(s - m) with m the running max; l (this thread's partial
// sum) and acc are rescaled to the new max and l gains the tile's p.
template <int kN, int kAcc>
__device__ __forceinline__ void OnlineSoftmaxTile(float (&s)[kN][4], float (&m)[2], float (&l)[2],
                                                  float (&acc)[kAcc][4]) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
  }
  float corr[2], base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_max[h] = GroupMax<4>(tile_max[h]);  // the four lanes of a row
    const float m_new = fmaxf(m[h], tile_max[h]);
    base[h] = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet stays empty
    corr[h] = exp2f(m[h] - base[h]);
    m[h] = m_new;
    l[h] *= corr[h];
  }
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = exp2f(s[n][e] - base[e / 2]);
      l[e / 2] += s[n][e];
    }
  }
#pragma unroll
  for (int n = 0; n < kAcc; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] *= corr[e / 2];
  }
}

// acc += P V for keys key0 .. key0 + 15 of the V tile, P's A tile from p0 (keys 0-7) and p1
// (keys 8-15), the C tiles of ScoreKeys16 after OnlineSoftmaxTile. Each ldmatrix.x4.trans
// reads keys key0 + (mat % 2) * 8 + row, dims 16 step + 8 (mat / 2): b0, b1 of dims
// 16 step .. + 7, then of dims 16 step + 8 .. + 15.
template <int kRowBytes, int kDimSteps>
__device__ __forceinline__ void AccumulatePv(uint32_t v_tile, int key0, const float (&p0)[4],
                                             const float (&p1)[4], int lane,
                                             float (&acc)[2 * kDimSteps][4]) {
  const int mat = lane / 8, mat_row = lane % 8;
  const uint32_t pa[4] = {PackHalves(p0[0], p0[1]), PackHalves(p0[2], p0[3]),
                          PackHalves(p1[0], p1[1]), PackHalves(p1[2], p1[3])};
#pragma unroll
  for (int step = 0; step < kDimSteps; ++step) {
    uint32_t b[4];
    LoadMatrixX4Transposed(
        v_tile + SwizzledOffset<kRowBytes>(key0 + (mat % 2) * 8 + mat_row, 2 * step + mat / 2), b);
    Mma16x8x16(acc[2 * step], pa, b[0], b[1]);
    Mma16x8x16(acc[2 * step + 1], pa, b[2], b[3]);
  }
}

}  // namespace streamd::kernels::cuda
