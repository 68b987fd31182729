// Decode attention over the paged sink + window cache: one query per token (session), GQA-aware
// (a thread block serves up to four query heads of one kv head, so each K/V vector is loaded
// once for all of them), and the keys split across thread blocks so that even one session
// fills the GPU. This kernel's job is to stream K/V at memory bandwidth (DESIGN.md fact 6).
//
// Keys of token t (text position p), in order: index i < n_sinks is sink i (scored with the
// query rotated by its cache position), index i >= n_sinks is window position
// WindowStart(p) + (i - n_sinks) (scored with the query rotated by p). Split j owns indices
// [j * keys_per_split, (j + 1) * keys_per_split).
//
// Inside a block, lanes form groups of head_dim / 8 lanes; each group owns two keys per round
// (16-byte loads of K and V per lane) and keeps an online softmax state per head:
//   m = running max of scores, l = sum_j exp(s_j - m), acc = sum_j exp(s_j - m) V_j.
// States are merged (block end, then across splits) with the log-sum-exp rule:
//   M = max_k m_k,  L = sum_k l_k exp(m_k - M),  A = sum_k acc_k exp(m_k - M),  out = A / L.
// An empty state has m = -inf, l = 0, acc = 0 and drops out of the merge.
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kHeadsPerBlock = 4;  // query heads per block; larger groups take more blocks
// Resident blocks per SM the registers are budgeted for (128 registers a thread, no spills).
// The kernel is bound by memory latency times bytes in flight, so occupancy moves it. Measured
// on an H200 (kernels_cuda_bench, Llama-3-8B shape, 64-256 sessions, W 1020-4092, share of
// device-to-device copy bandwidth): 3 blocks (157 registers) 23-26%; 4 blocks 31-36%; 5 or 6
// blocks (spills) 26-30%; K and V rescaled once per round of 4 keys at 2 blocks 20-23%; the
// queries in shared memory instead of registers 24-30%.
constexpr int kBlocksPerSm = 4;

template <int kHeadDim>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSm)
    DecodeAttentionKernel(KvPoolLayout layout, const __half* layer_kv, AttentionBatch batch,
                          const float* q, int64_t q_ld, const float* q_sink, int32_t n_heads,
                          float scale, int32_t keys_per_split, int32_t n_splits,
                          float* part_acc,  // [n_tokens, n_heads, n_splits, head_dim]
                          float* part_ml,   // [n_tokens, n_heads, n_splits, 2]: M, L
                          __half* out) {    // [n_tokens, n_heads, head_dim]
  constexpr int kLanesPerKey = kHeadDim / 8;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kSlots = kWarps * kKeysPerWarp;
  const int32_t group = n_heads / layout.n_kv_heads;
  const int32_t chunks = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const int32_t kv_head = blockIdx.x / chunks;
  const int32_t head0 = kv_head * group + (blockIdx.x % chunks) * kHeadsPerBlock;
  const int32_t n_local = min(kHeadsPerBlock, kv_head * group + group - head0);
  const int32_t split = blockIdx.y;
  const int64_t t = blockIdx.z;

  const SinkWindowTable table = batch.tables[batch.seq_of[t]];
  const int64_t p = batch.positions[t];
  const int64_t n_sinks = table.VisibleSinks(p);
  const int64_t w_start = table.WindowStart(p);
  const int64_t n_keys = n_sinks + (p - w_start + 1);
  const int64_t k_begin = static_cast<int64_t>(split) * keys_per_split;
  const int64_t k_end = min(k_begin + keys_per_split, n_keys);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int key_in_warp = lane / kLanesPerKey;
  const int d0 = (lane % kLanesPerKey) * 8;
  const int slot = warp * kKeysPerWarp + key_in_warp;

  float m[kHeadsPerBlock], l[kHeadsPerBlock], acc[kHeadsPerBlock][8];
#pragma unroll
  for (int g = 0; g < kHeadsPerBlock; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.0f;
  }

  // Phase 0: the sink keys in this split, phase 1: the window keys. Bounds are block-uniform.
  for (int phase = 0; phase < 2; ++phase) {
    const int64_t lo = phase == 0 ? k_begin : max(k_begin, n_sinks);
    const int64_t hi = phase == 0 ? min(k_end, n_sinks) : k_end;
    if (lo >= hi) continue;
    const float* q_row = phase == 0 ? q_sink + t * n_heads * kHeadDim : q + t * q_ld;
    const int64_t to_text = phase == 0 ? 0 : w_start - n_sinks;  // key index -> position
    float qr[kHeadsPerBlock][8];
#pragma unroll
    for (int g = 0; g < kHeadsPerBlock; ++g) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        qr[g][j] = g < n_local ? q_row[(head0 + g) * kHeadDim + d0 + j] * scale : 0.0f;
      }
    }
    // Two keys per lane group per round, both loaded before either is used, so each warp has
    // 2 * kKeysPerWarp K/V vectors in flight (decode is bound by memory latency x bytes in
    // flight). The loop runs the same number of times in every lane of a warp (shuffles need
    // that); lanes past the end carry valid = false.
    for (int64_t base = lo + warp * kKeysPerWarp; base < hi; base += 2 * kSlots) {
      // Kept as raw halves until used: 8 registers per K/V pair instead of 16, which is what
      // lets four blocks share an SM without spills (see kBlocksPerSm).
      uint4 k_raw[2], v_raw[2];
      bool valid[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int64_t i = base + u * kSlots + key_in_warp;
        valid[u] = i < hi;
        k_raw[u] = v_raw[u] = make_uint4(0, 0, 0, 0);
        if (valid[u]) {
          int32_t block, bslot;
          table.Locate(i + to_text, &block, &bslot);
          k_raw[u] = *reinterpret_cast<const uint4*>(
              layer_kv + layout.Offset(block, 0, kv_head, bslot) + d0);
          v_raw[u] = *reinterpret_cast<const uint4*>(
              layer_kv + layout.Offset(block, 1, kv_head, bslot) + d0);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        float kf[8], vf[8];
        HalvesToFloat8(k_raw[u], kf);
        HalvesToFloat8(v_raw[u], vf);
#pragma unroll
        for (int g = 0; g < kHeadsPerBlock; ++g) {
          float s = 0.0f;
#pragma unroll
          for (int j = 0; j < 8; ++j) s += qr[g][j] * kf[j];
          s = GroupSum<kLanesPerKey>(s);
          if (valid[u] && g < n_local) {
            const float m_new = fmaxf(m[g], s);
            const float corr = __expf(m[g] - m_new);
            const float pr = __expf(s - m_new);
            l[g] = l[g] * corr + pr;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[g][j] = acc[g][j] * corr + pr * vf[j];
            m[g] = m_new;
          }
        }
      }
    }
  }

  // Merge the block's kSlots states per head (log-sum-exp), then write the split's state, or
  // the final output when there is one split.
  __shared__ float sh_acc[kSlots][kHeadsPerBlock][kHeadDim];
  __shared__ float sh_m[kSlots][kHeadsPerBlock];
  __shared__ float sh_l[kSlots][kHeadsPerBlock];
#pragma unroll
  for (int g = 0; g < kHeadsPerBlock; ++g) {
#pragma unroll
    for (int j = 0; j < 8; ++j) sh_acc[slot][g][d0 + j] = acc[g][j];
    if (lane % kLanesPerKey == 0) {
      sh_m[slot][g] = m[g];
      sh_l[slot][g] = l[g];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_local * kHeadDim; e += blockDim.x) {
    const int g = e / kHeadDim, d = e % kHeadDim;
    float big = -INFINITY;
    for (int s = 0; s < kSlots; ++s) big = fmaxf(big, sh_m[s][g]);
    float sum_l = 0.0f, sum_a = 0.0f;
    if (big != -INFINITY) {
      for (int s = 0; s < kSlots; ++s) {
        const float w = __expf(sh_m[s][g] - big);
        sum_l += sh_l[s][g] * w;
        sum_a += sh_acc[s][g][d] * w;
      }
    }
    const int64_t th = t * n_heads + head0 + g;
    if (n_splits == 1) {
      out[th * kHeadDim + d] = __float2half(sum_a / sum_l);
    } else {
      part_acc[(th * n_splits + split) * kHeadDim + d] = sum_a;
      if (d == 0) {
        part_ml[(th * n_splits + split) * 2] = big;
        part_ml[(th * n_splits + split) * 2 + 1] = sum_l;
      }
    }
  }
}

// One block per (token, head), one thread per dimension: the log-sum-exp merge of the splits.
__global__ void MergeSplitsKernel(const float* part_acc, const float* part_ml, int32_t n_splits,
                                  int32_t head_dim, __half* out) {
  const int64_t th = blockIdx.x;
  const int d = threadIdx.x;
  const float* ml = part_ml + th * n_splits * 2;
  float big = -INFINITY;
  for (int s = 0; s < n_splits; ++s) big = fmaxf(big, ml[2 * s]);
  float sum_l = 0.0f, sum_a = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    if (ml[2 * s] == -INFINITY) continue;  // a split past this token's keys
    const float w = __expf(ml[2 * s] - big);
    sum_l += ml[2 * s + 1] * w;
    sum_a += part_acc[(th * n_splits + s) * head_dim + d] * w;
  }
  out[th * head_dim + d] = __float2half(sum_a / sum_l);
}

template <int kHeadDim>
cudaError_t Launch(const KvPoolLayout& layout, const uint16_t* layer_kv,
                   const AttentionBatch& batch, const float* q, int64_t q_ld,
                   const float* q_sink, const AttentionShape& shape, int32_t n_splits,
                   int32_t keys_per_split, void* workspace, uint16_t* out,
                   cudaStream_t stream) {
  const int32_t group = shape.n_heads / layout.n_kv_heads;
  const int32_t chunks = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  // Partial states (only with several splits): [n_tokens, n_heads, n_splits] x (acc, then M, L).
  float* part_acc = n_splits > 1 ? static_cast<float*>(workspace) : nullptr;
  float* part_ml = n_splits > 1 ? part_acc + static_cast<int64_t>(batch.n_tokens) *
                                                 shape.n_heads * n_splits * kHeadDim
                                : nullptr;
  const dim3 grid(layout.n_kv_heads * chunks, n_splits, batch.n_tokens);
  DecodeAttentionKernel<kHeadDim><<<grid, kWarps * 32, 0, stream>>>(
      layout, AsHalf(layer_kv), batch, q, q_ld, q_sink, shape.n_heads, shape.scale,
      keys_per_split, n_splits, part_acc, part_ml, AsHalf(out));
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || n_splits == 1) return e;
  MergeSplitsKernel<<<batch.n_tokens * shape.n_heads, kHeadDim, 0, stream>>>(
      part_acc, part_ml, n_splits, kHeadDim, AsHalf(out));
  return cudaGetLastError();
}

}  // namespace

const char* AttentionCanImplement(const KvPoolLayout& layout, const AttentionShape& shape) {
  if (shape.head_dim != 64 && shape.head_dim != 128) return "head_dim must be 64 or 128";
  if (layout.head_dim != shape.head_dim) return "the pool's head_dim differs from the model's";
  if (layout.n_kv_heads < 1 || shape.n_heads % layout.n_kv_heads != 0) {
    return "n_heads must be a multiple of n_kv_heads";
  }
  if (layout.block_size < 1) return "block_size must be >= 1";
  return nullptr;
}

size_t DecodeAttentionWorkspaceBytes(int32_t n_tokens, int32_t n_heads, int32_t head_dim,
                                     int32_t n_splits) {
  if (n_splits <= 1) return 0;
  return static_cast<size_t>(n_tokens) * n_heads * n_splits * (head_dim + 2) * sizeof(float);
}

int32_t ChooseDecodeSplits(int32_t n_tokens, int32_t n_kv_heads, int32_t max_keys,
                           int32_t sm_count, int32_t* keys_per_split) {
  constexpr int32_t kMinKeys = 64;
  const int64_t base = static_cast<int64_t>(n_tokens) * n_kv_heads;
  // About eight blocks per SM (two to three waves at three resident blocks per SM): enough
  // that the last wave's tail is a small part of the kernel.
  int64_t splits = CeilDiv(8LL * sm_count, base > 0 ? base : 1);
  const int64_t most = max_keys / kMinKeys > 1 ? max_keys / kMinKeys : 1;  // >= 64 keys each
  splits = splits < 1 ? 1 : (splits > most ? most : splits);
  int64_t per = CeilDiv(max_keys > 0 ? max_keys : 1, splits);
  per = CeilDiv(per, 16) * 16;  // whole rounds of the block's key slots
  *keys_per_split = static_cast<int32_t>(per);
  return static_cast<int32_t>(CeilDiv(max_keys > 0 ? max_keys : 1, per));
}

cudaError_t DecodeAttention(KvPoolLayout layout, const uint16_t* layer_kv, AttentionBatch batch,
                            const float* q, int64_t q_ld, const float* q_sink,
                            AttentionShape shape, int32_t n_splits, int32_t keys_per_split,
                            void* workspace, uint16_t* out, cudaStream_t stream) {
  if (AttentionCanImplement(layout, shape) != nullptr || batch.n_tokens <= 0 || n_splits < 1 ||
      keys_per_split < 1 || (n_splits > 1 && workspace == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (shape.head_dim == 64) {
    return Launch<64>(layout, layer_kv, batch, q, q_ld, q_sink, shape, n_splits, keys_per_split,
                      workspace, out, stream);
  }
  return Launch<128>(layout, layer_kv, batch, q, q_ld, q_sink, shape, n_splits, keys_per_split,
                     workspace, out, stream);
}

}  // namespace streamd::kernels::cuda
