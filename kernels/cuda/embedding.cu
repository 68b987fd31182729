// Token embedding lookup: one f16 row of the table per token, widened to the f32 residual
// stream. Memory-bound and tiny (n * dim elements); one thread block per token.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

__global__ void EmbeddingLookupKernel(const __half* table, const int32_t* tokens, int32_t dim,
                                      float* out) {
  const int64_t t = blockIdx.x;
  const __half* row = table + static_cast<int64_t>(tokens[t]) * dim;
  float* dst = out + t * dim;
  for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = __half2float(row[i]);
}

}  // namespace

cudaError_t EmbeddingLookup(const uint16_t* table, const int32_t* tokens, int32_t n, int32_t dim,
                            float* out, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return cudaErrorInvalidValue;
  EmbeddingLookupKernel<<<n, 256, 0, stream>>>(AsHalf(table), tokens, dim, out);
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
