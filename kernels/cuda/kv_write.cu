// Appends new K and V to the paged cache: token t's vectors go to the block and slot its
// session's SinkWindowTable assigns to text position positions[t] (a recycled ring block is
// simply overwritten: that is the eviction). One thread per (token, kv head, 8 dimensions).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

__global__ void WriteKvKernel(KvPoolLayout layout, __half* layer_kv,
                              const SinkWindowTable* tables, const int32_t* seq_of,
                              const int64_t* positions, const float* k, const float* v,
                              int64_t ld, int32_t n) {
  const int32_t chunks = layout.head_dim / 8;
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= static_cast<int64_t>(n) * layout.n_kv_heads * chunks) return;
  const int64_t t = e / (layout.n_kv_heads * chunks);
  const int32_t rest = static_cast<int32_t>(e - t * layout.n_kv_heads * chunks);
  const int32_t h = rest / chunks;
  const int32_t d0 = (rest % chunks) * 8;
  int32_t block, slot;
  tables[seq_of[t]].Locate(positions[t], &block, &slot);
  const float* ks = k + t * ld + h * layout.head_dim + d0;
  const float* vs = v + t * ld + h * layout.head_dim + d0;
  __align__(16) __half kh[8];  // 16-byte aligned: stored below as one uint4
  __align__(16) __half vh[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    kh[j] = __float2half(ks[j]);
    vh[j] = __float2half(vs[j]);
  }
  *reinterpret_cast<uint4*>(layer_kv + layout.Offset(block, 0, h, slot) + d0) =
      *reinterpret_cast<const uint4*>(kh);
  *reinterpret_cast<uint4*>(layer_kv + layout.Offset(block, 1, h, slot) + d0) =
      *reinterpret_cast<const uint4*>(vh);
}

}  // namespace

cudaError_t WriteKv(KvPoolLayout layout, uint16_t* layer_kv, const SinkWindowTable* tables,
                    const int32_t* seq_of, const int64_t* positions, const float* k,
                    const float* v, int64_t ld, int32_t n, cudaStream_t stream) {
  if (n <= 0 || layout.head_dim % 8 != 0) return cudaErrorInvalidValue;
  const int64_t total = static_cast<int64_t>(n) * layout.n_kv_heads * (layout.head_dim / 8);
  WriteKvKernel<<<static_cast<unsigned>(CeilDiv(total, 128)), 128, 0, stream>>>(
      layout, AsHalf(layer_kv), tables, seq_of, positions, k, v, ld, n);
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
