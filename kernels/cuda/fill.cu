// Device-side initialisation: synthetic random weights (hash-based, reproducible, no curand)
// and f32 -> f16 conversion.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

// SplitMix64 finaliser: a bijective 64-bit mix, good enough for test weights.
__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void FillUniformF16Kernel(__half* out, int64_t n, float bound, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = Mix(seed * 0x100000001b3ull ^ static_cast<uint64_t>(i));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
    out[i] = __float2half((2.0f * u - 1.0f) * bound);
  }
}

__global__ void FillF32Kernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

__global__ void ConvertF32ToF16Kernel(const float* in, int64_t n, __half* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2half(in[i]);
  }
}

unsigned Blocks(int64_t n) {
  const int64_t b = CeilDiv(n, 256);
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

}  // namespace

cudaError_t FillUniformF16(uint16_t* out, int64_t n, float bound, uint64_t seed,
                           cudaStream_t stream) {
  if (n <= 0) return cudaErrorInvalidValue;
  FillUniformF16Kernel<<<Blocks(n), 256, 0, stream>>>(AsHalf(out), n, bound, seed);
  return cudaGetLastError();
}

cudaError_t FillF32(float* out, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaErrorInvalidValue;
  FillF32Kernel<<<Blocks(n), 256, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

cudaError_t ConvertF32ToF16(const float* in, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n <= 0) return cudaErrorInvalidValue;
  ConvertF32ToF16Kernel<<<Blocks(n), 256, 0, stream>>>(in, n, AsHalf(out));
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
