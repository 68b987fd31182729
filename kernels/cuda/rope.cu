// Rotary position embedding on the device, the streaming cache's way (docs/ARCHITECTURE.md,
// "Positions from the cache"): keys and the window query rotate by the text position, a copy
// of the query by its cache position for the sink keys. Angles are computed in double and
// reduced modulo 2*pi, like RopeTable::Angles on the CPU, so a position of 10^9 rotates as
// precisely as 10 and the two backends agree to float rounding.
// One thread per (token, dimension pair); it rotates that pair in every head.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

__device__ __forceinline__ void Rotate(float* v, float c, float s) {
  const float a = v[0], b = v[1];
  v[0] = a * c - b * s;
  v[1] = a * s + b * c;
}

__global__ void RopeKernel(float* qkv, int64_t ld, int32_t n, int32_t n_heads,
                           int32_t n_kv_heads, int32_t head_dim, const int64_t* positions,
                           const int64_t* cache_positions, const double* inv_freq,
                           float* q_sink) {
  const int32_t half = head_dim / 2;
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= static_cast<int64_t>(n) * half) return;
  const int64_t t = e / half;
  const int32_t i = static_cast<int32_t>(e - t * half);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double a = fmod(static_cast<double>(positions[t]) * inv_freq[i], kTwoPi);
  const double b = fmod(static_cast<double>(cache_positions[t]) * inv_freq[i], kTwoPi);
  const float c = static_cast<float>(cos(a)), s = static_cast<float>(sin(a));
  const float cs = static_cast<float>(cos(b)), ss = static_cast<float>(sin(b));
  float* q = qkv + t * ld;
  float* k = q + static_cast<int64_t>(n_heads) * head_dim;
  float* qs = q_sink + t * static_cast<int64_t>(n_heads) * head_dim;
  for (int32_t h = 0; h < n_heads; ++h) {
    float* pair = q + h * head_dim + 2 * i;
    float* sink_pair = qs + h * head_dim + 2 * i;
    sink_pair[0] = pair[0];
    sink_pair[1] = pair[1];
    Rotate(sink_pair, cs, ss);
    Rotate(pair, c, s);
  }
  for (int32_t h = 0; h < n_kv_heads; ++h) Rotate(k + h * head_dim + 2 * i, c, s);
}

}  // namespace

cudaError_t Rope(float* qkv, int64_t ld, int32_t n, int32_t n_heads, int32_t n_kv_heads,
                 int32_t head_dim, const int64_t* positions, const int64_t* cache_positions,
                 const double* inv_freq, float* q_sink, cudaStream_t stream) {
  if (n <= 0 || head_dim <= 0 || head_dim % 2 != 0) return cudaErrorInvalidValue;
  const int64_t total = static_cast<int64_t>(n) * (head_dim / 2);
  RopeKernel<<<static_cast<unsigned>(CeilDiv(total, 128)), 128, 0, stream>>>(
      qkv, ld, n, n_heads, n_kv_heads, head_dim, positions, cache_positions, inv_freq, q_sink);
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
