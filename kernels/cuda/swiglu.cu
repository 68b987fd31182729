// SwiGLU of the feed-forward block: silu(gate) * up, written f16 for the down projection.
// Element-wise; grid-stride loop over n * ffn.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

__global__ void SwiGluKernel(const float* gate_up, int64_t total, int32_t ffn, __half* out) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / ffn;
    const int64_t i = e - t * ffn;
    const float g = gate_up[t * 2 * ffn + i];
    const float u = gate_up[t * 2 * ffn + ffn + i];
    out[e] = __float2half(g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace

cudaError_t SwiGlu(const float* gate_up, int32_t n, int32_t ffn, uint16_t* out,
                   cudaStream_t stream) {
  if (n <= 0 || ffn <= 0) return cudaErrorInvalidValue;
  const int64_t total = static_cast<int64_t>(n) * ffn;
  const int64_t blocks = CeilDiv(total, 256) < 65535 ? CeilDiv(total, 256) : 65535;
  SwiGluKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(gate_up, total, ffn, AsHalf(out));
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
