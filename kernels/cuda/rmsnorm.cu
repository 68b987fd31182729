// Residual add fused with RMSNorm. The residual stream x stays f32 (it accumulates every
// layer's output); the normalised row is written f16 because it only feeds a GEMM.
// One thread block per token: the row is read once into registers, reduced, written once.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPerThread = 32;  // dim <= 8192

__global__ void AddRmsNormKernel(float* x, const float* delta, const float* weight, float eps,
                                 int32_t dim, const int32_t* out_rows, __half* out) {
  const int64_t t = blockIdx.x;
  float* row = x + t * dim;
  float v[kMaxPerThread];
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int32_t i = threadIdx.x + j * kThreads;
    v[j] = 0.0f;
    if (i < dim) {
      v[j] = row[i];
      if (delta != nullptr) {
        v[j] += delta[t * dim + i];
        row[i] = v[j];
      }
      sq += v[j] * v[j];
    }
  }
  __shared__ float partial[kThreads / 32];
  sq = WarpSum(sq);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sq;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const int32_t out_row = out_rows != nullptr ? out_rows[t] : static_cast<int32_t>(t);
  if (out_row < 0) return;
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  __half* dst = out + static_cast<int64_t>(out_row) * dim;
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int32_t i = threadIdx.x + j * kThreads;
    if (i < dim) dst[i] = __float2half(v[j] * inv * weight[i]);
  }
}

}  // namespace

cudaError_t AddRmsNorm(float* x, const float* delta, const float* weight, float eps, int32_t n,
                       int32_t dim, const int32_t* out_rows, uint16_t* out, cudaStream_t stream) {
  if (n <= 0 || dim <= 0 || dim > kThreads * kMaxPerThread) return cudaErrorInvalidValue;
  AddRmsNormKernel<<<n, kThreads, 0, stream>>>(x, delta, weight, eps, dim, out_rows, AsHalf(out));
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
