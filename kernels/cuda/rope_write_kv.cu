// Rotary position embedding and the append of the new K/V to the paged cache, in one launch
// per layer: the streaming cache's way (docs/ARCHITECTURE.md, "Positions from the cache"):
// keys and the window query rotate by the text position, a copy of the query by its cache
// position for the sink keys. Angles are computed in double and reduced modulo 2*pi, like
// RopeTable::Angles on the CPU, so a position of 10^9 rotates as precisely as 10 and the two
// backends agree to float rounding.
//
// One thread block per token: its threads compute the token's head_dim / 2 rotations once
// (into shared memory), then rotate every head's pairs in parallel and store K and V as f16
// straight into the token's block and slot (a recycled ring block is simply overwritten: that
// is the eviction). Two small launches per layer became one, and the trigonometry is no longer
// repeated per head by one thread per pair (a decode step of 64 tokens had 32 blocks).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPairs = 128;  // head_dim <= 256

__device__ __forceinline__ float2 Rotated(float2 v, float2 cs) {
  return make_float2(v.x * cs.x - v.y * cs.y, v.x * cs.y + v.y * cs.x);
}

__global__ void __launch_bounds__(kThreads)
    RopeWriteKvKernel(float* qkv, int64_t ld, int32_t n_heads, int32_t head_dim,
                      const int64_t* positions, const int64_t* cache_positions,
                      const double* inv_freq, float* q_sink, KvPoolLayout layout, __half* layer_kv,
                      const SinkWindowTable* tables, const int32_t* seq_of) {
  __shared__ float2 rot[kMaxPairs];       // (cos, sin) at the text position
  __shared__ float2 rot_sink[kMaxPairs];  // at the cache position
  const int64_t t = blockIdx.x;
  const int32_t pairs = head_dim / 2;
  const int64_t p = positions[t];
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int32_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const double a = fmod(static_cast<double>(p) * inv_freq[i], kTwoPi);
    const double b = fmod(static_cast<double>(cache_positions[t]) * inv_freq[i], kTwoPi);
    rot[i] = make_float2(static_cast<float>(cos(a)), static_cast<float>(sin(a)));
    rot_sink[i] = make_float2(static_cast<float>(cos(b)), static_cast<float>(sin(b)));
  }
  __syncthreads();

  float* q = qkv + t * ld;
  const float* k = q + static_cast<int64_t>(n_heads) * head_dim;
  const float* v = k + static_cast<int64_t>(layout.n_kv_heads) * head_dim;
  float* qs = q_sink + t * static_cast<int64_t>(n_heads) * head_dim;
  for (int32_t e = threadIdx.x; e < n_heads * pairs; e += blockDim.x) {
    const int32_t i = e % pairs;
    const int64_t at = static_cast<int64_t>(e / pairs) * head_dim + 2 * i;
    const float2 x = *reinterpret_cast<const float2*>(q + at);
    *reinterpret_cast<float2*>(qs + at) = Rotated(x, rot_sink[i]);
    *reinterpret_cast<float2*>(q + at) = Rotated(x, rot[i]);
  }
  int32_t block, slot;
  tables[seq_of[t]].Locate(p, &block, &slot);
  for (int32_t e = threadIdx.x; e < layout.n_kv_heads * pairs; e += blockDim.x) {
    const int32_t h = e / pairs, i = e % pairs;
    const float2 kx = Rotated(*reinterpret_cast<const float2*>(k + h * head_dim + 2 * i), rot[i]);
    const float2 vx = *reinterpret_cast<const float2*>(v + h * head_dim + 2 * i);
    *reinterpret_cast<__half2*>(layer_kv + layout.Offset(block, 0, h, slot) + 2 * i) =
        __floats2half2_rn(kx.x, kx.y);
    *reinterpret_cast<__half2*>(layer_kv + layout.Offset(block, 1, h, slot) + 2 * i) =
        __floats2half2_rn(vx.x, vx.y);
  }
}

}  // namespace

cudaError_t RopeAndWriteKv(float* qkv, int64_t ld, int32_t n, int32_t n_heads, int32_t head_dim,
                           const int64_t* positions, const int64_t* cache_positions,
                           const double* inv_freq, float* q_sink, const KvAppend& kv,
                           cudaStream_t stream) {
  if (n <= 0 || head_dim <= 0 || head_dim % 2 != 0 || head_dim / 2 > kMaxPairs ||
      kv.layout.head_dim != head_dim || kv.layout.n_kv_heads < 1 || ld % 2 != 0 ||
      ld < static_cast<int64_t>(n_heads + 2 * kv.layout.n_kv_heads) * head_dim) {
    return cudaErrorInvalidValue;
  }
  RopeWriteKvKernel<<<n, kThreads, 0, stream>>>(qkv, ld, n_heads, head_dim, positions,
                                                cache_positions, inv_freq, q_sink, kv.layout,
                                                AsHalf(kv.layer_kv), kv.tables, kv.seq_of);
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
