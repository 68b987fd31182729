// Tensor-core and asynchronous-copy building blocks shared by the attention kernels of
// kernels/cuda (not part of the API): cp.async into shared memory, ldmatrix, mma.m16n8k16 with
// f16 inputs and f32 accumulators, and the XOR swizzle of K/V rows in shared memory.
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

#include <cstdint>

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

}  // namespace streamd::kernels::cuda
