// Small device helpers shared by the .cu files of kernels/cuda (not part of the API).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace streamd::kernels::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

// The attention kernels' precondition on a table (kernels.h): no native sliding window. The
// launchers cannot see the tables (device memory), so a kernel given span != 0 stops with a trap
// (a sticky launch failure) instead of attending over a key set the layer was not trained on.
__device__ __forceinline__ void TrapIfSpanned(int32_t span) {
  if (span != 0) __trap();
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the `kWidth` lanes (a power of two <= 32) of each aligned lane group.
template <int kWidth>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Max over the `kWidth` lanes (a power of two <= 32) of each aligned lane group.
template <int kWidth>
__device__ __forceinline__ float GroupMax(float v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__host__ __device__ __forceinline__ const __half* AsHalf(const uint16_t* p) {
  return reinterpret_cast<const __half*>(p);
}
__host__ __device__ __forceinline__ __half* AsHalf(uint16_t* p) {
  return reinterpret_cast<__half*>(p);
}

// Eight halves, held as 16 raw bytes, as floats.
__device__ __forceinline__ void HalvesToFloat8(const uint4& raw, float* out) {
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Eight f16 values (16 bytes, one vector load) to floats.
__device__ __forceinline__ void LoadHalf8(const __half* p, float* out) {
  HalvesToFloat8(*reinterpret_cast<const uint4*>(p), out);
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tiles of `size` keys that cover the key range [lo, hi); 0 when it is empty.
__device__ __forceinline__ int32_t TilesCovering(int64_t lo, int64_t hi, int size) {
  return lo < hi ? static_cast<int32_t>((hi - lo + size - 1) / size) : 0;
}

}  // namespace streamd::kernels::cuda
