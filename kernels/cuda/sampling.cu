// Sampling on the device: greedy argmax, and top-k / top-p with temperature. One thread block
// per row (a session's logits), so nothing but the chosen ids cross PCIe.
//
// Top-k finds the k-th largest logit exactly by radix select: logits are mapped to unsigned
// keys that sort like the floats, and four passes of 8-bit histograms fix the threshold key
// digit by digit (most significant first). The candidates are then every key above the
// threshold plus the lowest-index ties at it, ranked (value desc, index asc) in shared memory.
// Top-p and the draw run over those k sorted candidates (k <= kMaxTopK) in one thread: k is
// small, and one thread keeps the cumulative sums in a fixed order.
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

constexpr int kThreads = 1024;

// Monotone map float -> uint32: a < b  <=>  Key(a) < Key(b) (NaNs map above +inf or below
// -inf by sign; the argmax kernel skips them explicitly).
__device__ __forceinline__ uint32_t Key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void ArgmaxKernel(const float* logits, int32_t vocab, int32_t* out) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best = -INFINITY;
  int32_t best_i = -1;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (v > best || (best_i < 0 && !isnan(v))) {  // strictly greater: the first index wins
      best = v;
      best_i = i;
    }
  }
  __shared__ float sh_v[kThreads / 32];
  __shared__ int32_t sh_i[kThreads / 32];
  // Warp then block reduction; ties go to the lower index.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, best, o);
    const int32_t oi = __shfl_xor_sync(kFullMask, best_i, o);
    if (oi >= 0 && (best_i < 0 || ov > best || (ov == best && oi < best_i))) {
      best = ov;
      best_i = oi;
    }
  }
  if (threadIdx.x % 32 == 0) {
    sh_v[threadIdx.x / 32] = best;
    sh_i[threadIdx.x / 32] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      const float ov = sh_v[w];
      const int32_t oi = sh_i[w];
      if (oi >= 0 && (best_i < 0 || ov > best || (ov == best && oi < best_i))) {
        best = ov;
        best_i = oi;
      }
    }
    out[blockIdx.x] = best_i < 0 ? 0 : best_i;
  }
}

__global__ void __launch_bounds__(kThreads)
    TopKTopPKernel(const float* logits, int32_t vocab, const SampleParams* params, int32_t* out) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const SampleParams prm = params[blockIdx.x];
  const int32_t k = min(prm.top_k, vocab);

  __shared__ uint32_t hist[256];
  __shared__ uint32_t sh_prefix, sh_need;
  __shared__ uint32_t sh_count;
  __shared__ float cand_v[kMaxTopK];
  __shared__ int32_t cand_i[kMaxTopK];
  __shared__ float sorted_v[kMaxTopK];
  __shared__ int32_t sorted_i[kMaxTopK];
  __shared__ uint32_t warp_counts[kThreads / 32];

  // Radix select: after pass b, sh_prefix holds the top (b+1)*8 bits of the k-th largest key
  // and sh_need how many keys with that prefix are still wanted.
  if (threadIdx.x == 0) {
    sh_prefix = 0;
    sh_need = static_cast<uint32_t>(k);
  }
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    const uint32_t high_mask = pass == 0 ? 0u : (0xffffffffu << (shift + 8));
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = sh_prefix;
    for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint32_t key = Key(row[i]);
      if ((key & high_mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xff], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t need = sh_need;
      for (int b = 255; b >= 0; --b) {
        if (hist[b] >= need) {
          sh_prefix = prefix | (static_cast<uint32_t>(b) << shift);
          break;
        }
        need -= hist[b];
      }
      sh_need = need;  // keys equal to the threshold still to take (lowest indices first)
    }
    __syncthreads();
  }
  const uint32_t threshold = sh_prefix;
  const uint32_t ties = sh_need;

  // Gather: every key above the threshold (order by atomics does not matter: ranked below),
  // then the first `ties` keys equal to it in index order (a block-wide prefix count).
  if (threadIdx.x == 0) sh_count = 0;
  __syncthreads();
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (Key(row[i]) > threshold) {
      const uint32_t at = atomicAdd(&sh_count, 1u);
      cand_v[at] = row[i];
      cand_i[at] = i;
    }
  }
  __syncthreads();
  const uint32_t above = sh_count;
  uint32_t taken = 0;  // ties taken in earlier rounds (block-uniform)
  for (int32_t base = 0; base < vocab && taken < ties; base += blockDim.x) {
    const int32_t i = base + threadIdx.x;
    const bool eq = i < vocab && Key(row[i]) == threshold;
    const unsigned ballot = __ballot_sync(kFullMask, eq);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    uint32_t before = taken;
    for (int w = 0; w < warp; ++w) before += warp_counts[w];
    before += __popc(ballot & ((1u << lane) - 1u));
    if (eq && before < ties) {
      cand_v[above + before] = row[i];
      cand_i[above + before] = i;
    }
    __syncthreads();
    uint32_t round = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) round += warp_counts[w];
    taken += round;
    __syncthreads();
  }

  // Rank sort: candidate c goes to the number of candidates that beat it.
  for (int32_t c = threadIdx.x; c < k; c += blockDim.x) {
    int32_t rank = 0;
    for (int32_t o = 0; o < k; ++o) {
      rank += cand_v[o] > cand_v[c] || (cand_v[o] == cand_v[c] && cand_i[o] < cand_i[c]);
    }
    sorted_v[rank] = cand_v[c];
    sorted_i[rank] = cand_i[c];
  }
  __syncthreads();

  if (threadIdx.x == 0) {
    // Probabilities relative to the best candidate (exp(0) = 1), in double for the sums.
    const double inv_t = 1.0 / static_cast<double>(prm.temperature);
    double total = 0.0;
    for (int32_t c = 0; c < k; ++c) total += exp((sorted_v[c] - sorted_v[0]) * inv_t);
    double kept = 0.0;
    int32_t n_kept = 0;
    while (n_kept < k) {
      kept += exp((sorted_v[n_kept] - sorted_v[0]) * inv_t);
      ++n_kept;
      if (kept >= static_cast<double>(prm.top_p) * total) break;
    }
    const double target = static_cast<double>(prm.uniform) * kept;
    double cum = 0.0;
    int32_t pick = sorted_i[n_kept - 1];
    for (int32_t c = 0; c < n_kept; ++c) {
      cum += exp((sorted_v[c] - sorted_v[0]) * inv_t);
      if (cum > target) {
        pick = sorted_i[c];
        break;
      }
    }
    out[blockIdx.x] = pick;
  }
}

}  // namespace

cudaError_t ArgmaxRows(const float* logits, int32_t rows, int32_t vocab, int32_t* out,
                       cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return cudaErrorInvalidValue;
  ArgmaxKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, out);
  return cudaGetLastError();
}

const char* SampleCanImplement(const SampleParams& p) {
  if (!(p.temperature > 0.0f)) return "temperature must be > 0 (use ArgmaxRows for greedy)";
  if (p.top_k < 1 || p.top_k > kMaxTopK) return "top_k must be in [1, 1024]";
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return "top_p must be in (0, 1]";
  if (!(p.uniform >= 0.0f && p.uniform < 1.0f)) return "uniform must be in [0, 1)";
  return nullptr;
}

cudaError_t SampleTopKTopP(const float* logits, int32_t rows, int32_t vocab,
                           const SampleParams* params, int32_t* out, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return cudaErrorInvalidValue;
  TopKTopPKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, params, out);
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
