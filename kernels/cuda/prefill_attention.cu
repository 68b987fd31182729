// Chunked-prefill attention over the paged sink + window cache, with each query's own mask.
// A chunk's K/V are all written before this runs (DESIGN.md fact 5), so query p of the chunk
// sees the sinks [0, VisibleSinks(p)) and its window [WindowStart(p), p]: keys the chunk
// itself evicts for later queries are still visible to earlier ones, and later tokens of the
// chunk are masked out (causality).
//
// One thread block per (tile, kv head): a tile is up to PrefillTileQueries(group) consecutive
// queries of one session; rows = (query, head) pairs of that kv head's group, at most 32.
// The block streams the union of the tile's keys (its sinks, then [lo, p_last]) through
// shared memory in tiles of 32 keys, so every K/V vector is read once per tile of queries.
// Scores: lane j of a warp owns key j of the key tile; the output dims are spread over lanes
// (head_dim / 32 per lane). Online softmax per row (m, l, acc; see decode_attention.cu).
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRows = 32;  // (query, head) rows per block
constexpr int kRowsPerWarp = kRows / kWarps;
constexpr int kKeyTile = 32;
constexpr int kHeadsPerBlock = 4;

template <int kHeadDim>
__global__ void __launch_bounds__(kWarps * 32)
    PrefillAttentionKernel(KvPoolLayout layout, const __half* layer_kv, AttentionBatch batch,
                           const PrefillTile* tiles, const float* q, int64_t q_ld,
                           const float* q_sink, int32_t n_heads, float scale, __half* out) {
  constexpr int kDimsPerLane = kHeadDim / 32;
  __shared__ float sh_q[kRows][kHeadDim];
  __shared__ float sh_k[kKeyTile][kHeadDim + 1];  // +1: lanes read different rows, no conflicts
  __shared__ __align__(16) __half sh_v[kKeyTile][kHeadDim];

  const int32_t group = n_heads / layout.n_kv_heads;
  const int32_t chunks = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const int32_t kv_head = blockIdx.x / chunks;
  const int32_t head0 = kv_head * group + (blockIdx.x % chunks) * kHeadsPerBlock;
  const int32_t n_local = min(kHeadsPerBlock, kv_head * group + group - head0);
  const PrefillTile tile = tiles[blockIdx.y];
  const int32_t n_rows = tile.n_tokens * n_local;
  const SinkWindowTable table = batch.tables[batch.seq_of[tile.first_token]];
  const int64_t p_first = batch.positions[tile.first_token];
  const int64_t p_last = batch.positions[tile.first_token + tile.n_tokens - 1];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
  int64_t row_p[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) acc[rr][j] = 0.0f;
    const int r = warp * kRowsPerWarp + rr;
    row_p[rr] = r < n_rows ? batch.positions[tile.first_token + r / n_local] : 0;
  }

  for (int phase = 0; phase < 2; ++phase) {
    // Phase 0: sinks [0, VisibleSinks(p_last)); phase 1: window keys [lo, p_last].
    const int64_t lo = phase == 0 ? 0 : max(static_cast<int64_t>(table.sinks),
                                            table.WindowStart(p_first));
    const int64_t hi = phase == 0 ? table.VisibleSinks(p_last) : p_last + 1;
    if (lo >= hi) continue;
    __syncthreads();  // the previous phase's readers of sh_q are done
    const float* src = phase == 0 ? q_sink : q;
    const int64_t src_ld = phase == 0 ? static_cast<int64_t>(n_heads) * kHeadDim : q_ld;
    for (int e = threadIdx.x; e < n_rows * kHeadDim; e += blockDim.x) {
      const int r = e / kHeadDim, d = e % kHeadDim;
      const int64_t tok = tile.first_token + r / n_local;
      sh_q[r][d] = src[tok * src_ld + (head0 + r % n_local) * kHeadDim + d] * scale;
    }
    for (int64_t key0 = lo; key0 < hi; key0 += kKeyTile) {
      __syncthreads();  // sh_q written / the previous key tile consumed
      for (int e = threadIdx.x; e < kKeyTile * (kHeadDim / 8); e += blockDim.x) {
        const int j = e / (kHeadDim / 8), c = (e % (kHeadDim / 8)) * 8;
        const int64_t key = key0 + j;
        float kf[8];
        uint4 vraw = make_uint4(0, 0, 0, 0);
        if (key < hi) {
          int32_t block, slot;
          table.Locate(key, &block, &slot);
          LoadHalf8(layer_kv + layout.Offset(block, 0, kv_head, slot) + c, kf);
          vraw = *reinterpret_cast<const uint4*>(layer_kv + layout.Offset(block, 1, kv_head, slot) + c);
        } else {
#pragma unroll
          for (int x = 0; x < 8; ++x) kf[x] = 0.0f;
        }
#pragma unroll
        for (int x = 0; x < 8; ++x) sh_k[j][c + x] = kf[x];
        *reinterpret_cast<uint4*>(&sh_v[j][c]) = vraw;
      }
      __syncthreads();
      const int64_t key = key0 + lane;
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int r = warp * kRowsPerWarp + rr;
        if (r >= n_rows) continue;  // warp-uniform
        const int64_t p = row_p[rr];
        const bool visible = key < hi && (phase == 0 ? key < table.VisibleSinks(p)
                                                     : key >= table.WindowStart(p) && key <= p);
        float s = 0.0f;
#pragma unroll 16
        for (int d = 0; d < kHeadDim; ++d) s += sh_q[r][d] * sh_k[lane][d];
        s = visible ? s : -INFINITY;
        const float tile_max = WarpMax(s);
        if (tile_max == -INFINITY) continue;  // warp-uniform: nothing visible in this tile
        const float m_new = fmaxf(m[rr], tile_max);
        const float corr = __expf(m[rr] - m_new);
        const float pr = visible ? __expf(s - m_new) : 0.0f;
        l[rr] = l[rr] * corr + WarpSum(pr);
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) acc[rr][j] *= corr;
        for (int jj = 0; jj < kKeyTile; ++jj) {
          const float pj = __shfl_sync(kFullMask, pr, jj);
#pragma unroll
          for (int j = 0; j < kDimsPerLane; ++j) {
            acc[rr][j] += pj * __half2float(sh_v[jj][lane + 32 * j]);
          }
        }
        m[rr] = m_new;
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp * kRowsPerWarp + rr;
    if (r >= n_rows) continue;
    const int64_t tok = tile.first_token + r / n_local;
    __half* dst = out + (tok * n_heads + head0 + r % n_local) * kHeadDim;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) dst[lane + 32 * j] = __float2half(acc[rr][j] / l[rr]);
  }
}

}  // namespace

int32_t PrefillTileQueries(int32_t group) {
  const int32_t per_block = group < kHeadsPerBlock ? group : kHeadsPerBlock;
  return kRows / (per_block > 0 ? per_block : 1);
}

cudaError_t PrefillAttention(KvPoolLayout layout, const uint16_t* layer_kv, AttentionBatch batch,
                             const PrefillTile* tiles, int32_t n_tiles, const float* q,
                             int64_t q_ld, const float* q_sink, AttentionShape shape,
                             uint16_t* out, cudaStream_t stream) {
  if (AttentionCanImplement(layout, shape) != nullptr || n_tiles <= 0) {
    return cudaErrorInvalidValue;
  }
  const int32_t group = shape.n_heads / layout.n_kv_heads;
  const int32_t chunks = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const dim3 grid(layout.n_kv_heads * chunks, n_tiles);
  if (shape.head_dim == 64) {
    PrefillAttentionKernel<64><<<grid, kWarps * 32, 0, stream>>>(
        layout, AsHalf(layer_kv), batch, tiles, q, q_ld, q_sink, shape.n_heads, shape.scale,
        AsHalf(out));
  } else {
    PrefillAttentionKernel<128><<<grid, kWarps * 32, 0, stream>>>(
        layout, AsHalf(layer_kv), batch, tiles, q, q_ld, q_sink, shape.n_heads, shape.scale,
        AsHalf(out));
  }
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
