// Chunked-prefill attention over the paged sink + window cache, with each query's own mask.
// A chunk's K/V are all written before this runs (DESIGN.md fact 5), so query p of the chunk
// sees the sinks [0, VisibleSinks(p)) and its window [WindowStart(p), p] (tables with span 0
// only, kernels.h): keys the chunk itself evicts for later queries are still visible to earlier
// ones, and later tokens of the chunk are masked out (causality).
//
// One thread block per (tile, kv head): a tile is up to PrefillTileQueries(group) consecutive
// queries of one session; its rows are the (query, head) pairs of that kv head's group, at
// most 64: 16 per warp, the M of a tensor-core tile. The block streams the union of the tile's
// keys (its sinks, then [lo, p_last]) through shared memory in tiles of 32 keys, copied with
// cp.async kStages - 1 tiles ahead of the one computed, so every K/V row is read once per tile
// of queries. Each warp then computes its rows' scores S = Q K^T and O += P V with
// mma.m16n8k16 (f16 in, f32 accumulate; fragments in kernels/cuda/mma_util.cuh), masks each
// row by its own query's sinks and window, and keeps an online softmax per row in base 2
// (m, l, acc; see decode_attention.cu). A warp owns whole rows, so no merge is needed.
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/mma_util.cuh"

namespace streamd::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // (query, head) rows per block
constexpr int kHeadsPerBlock = 16;  // query heads of one kv head per block; more take more blocks
constexpr int kKeys = 32;           // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

template <int kHeadDim>
struct PrefillConfig {
  static constexpr int kRowBytes = kHeadDim * 2;           // one key's K (or V), f16
  static constexpr int kChunks = kHeadDim / 8;             // 16-byte chunks per row
  static constexpr int kTileBytes = kKeys * kRowBytes;     // K (or V) of one tile
  static constexpr int kStageBytes = 2 * kTileBytes;       // K then V
  static constexpr int kStages = kHeadDim == 128 ? 3 : 4;  // 48 KB / 32 KB of static memory
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kDimSteps = kHeadDim / 16;
  // One copy instruction of the block moves kCopyRows rows of K (and of V); a warp's share is
  // kWarpRows rows of kChunks lanes each, and a tile takes kCopies instructions.
  static constexpr int kCopyRows = kWarps * 32 * 16 / kRowBytes;
  static constexpr int kWarpRows = kCopyRows / kWarps;
  static constexpr int kCopies = kKeys / kCopyRows;
  static_assert(kWarpRows * kChunks == 32, "a warp copies whole rows");
  static_assert(kCopies * kWarpRows == 8, "lanes 0..7 locate a warp's rows of a tile");
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
};

template <int kHeadDim>
__global__ void __launch_bounds__(kWarps * 32)
    PrefillAttentionKernel(KvPoolLayout layout, const __half* layer_kv, AttentionBatch batch,
                           const PrefillTile* tiles, const float* q, int64_t q_ld,
                           const float* q_sink, int32_t n_heads, float scale, __half* out) {
  using Config = PrefillConfig<kHeadDim>;
  constexpr int kStages = Config::kStages, kDimSteps = Config::kDimSteps;
  __shared__ __align__(128) unsigned char smem[Config::kSmemBytes];

  const int32_t group = n_heads / layout.n_kv_heads;
  const int32_t chunks = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const int32_t kv_head = blockIdx.x / chunks;
  const int32_t head0 = kv_head * group + (blockIdx.x % chunks) * kHeadsPerBlock;
  const int32_t n_local = min(kHeadsPerBlock, kv_head * group + group - head0);
  const PrefillTile tile = tiles[blockIdx.y];
  const int32_t n_rows = tile.n_tokens * n_local;
  const SinkWindowTable table = batch.tables[batch.seq_of[tile.first_token]];
  TrapIfSpanned(table.span);  // sinks from 0: no native sliding window (kernels.h)
  const int64_t p_first = batch.positions[tile.first_token];
  const int64_t p_last = batch.positions[tile.first_token + tile.n_tokens - 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  // This thread's two rows, g and g + 8 of its warp's 16: query token, head and mask.
  bool row_valid[2];
  int64_t row_token[2], row_p[2], row_sinks[2], row_window[2];
  int32_t row_head[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    row_valid[h] = r < n_rows;
    row_token[h] = tile.first_token + (row_valid[h] ? r / n_local : 0);
    row_head[h] = head0 + (row_valid[h] ? r % n_local : 0);
    row_p[h] = batch.positions[row_token[h]];
    row_sinks[h] = table.VisibleSinks(row_p[h]);
    row_window[h] = table.WindowStart(row_p[h]);
  }

  // Key tiles: the sinks any query sees, [0, VisibleSinks(p_last)), then the union of the
  // windows, [lo1, p_last]; a key's index is its text position.
  const int64_t hi0 = table.VisibleSinks(p_last);
  const int64_t lo1 = max(static_cast<int64_t>(table.sinks), table.WindowStart(p_first));
  const int64_t hi1 = p_last + 1;
  const int32_t tiles0 = TilesCovering(0, hi0, kKeys);
  const int32_t n_tiles = tiles0 + TilesCovering(lo1, hi1, kKeys);
  auto tile_range = [&](int32_t j, int64_t* first, int64_t* end) {
    *first = j < tiles0 ? static_cast<int64_t>(j) * kKeys
                        : lo1 + static_cast<int64_t>(j - tiles0) * kKeys;
    *end = j < tiles0 ? hi0 : hi1;
  };

  const int64_t v_minus_k = layout.n_kv_heads * layout.head_elems();  // elements
  const uint32_t smem_base = SharedAddress(smem);
  // Starts the copies of key tile j (or nothing past the last) and commits a group: group n
  // always belongs to tile n. Lanes 0..7 of each warp locate the warp's eight rows of the tile.
  auto issue = [&](int32_t j) {
    if (j < n_tiles) {
      int64_t first, end;
      tile_range(j, &first, &end);
      long long row_offset = -1;
      if (lane < 8) {
        const int row = (lane / Config::kWarpRows) * Config::kCopyRows + warp * Config::kWarpRows +
                        lane % Config::kWarpRows;
        if (first + row < end) {
          int32_t block, slot;
          table.Locate(first + row, &block, &slot);
          row_offset = layout.Offset(block, 0, kv_head, slot);
        }
      }
      const uint32_t stage = smem_base + (j % kStages) * Config::kStageBytes;
#pragma unroll
      for (int k = 0; k < Config::kCopies; ++k) {
        const int in_warp = lane / Config::kChunks, chunk = lane % Config::kChunks;
        const int row = k * Config::kCopyRows + warp * Config::kWarpRows + in_warp;
        CopyKvChunk<Config::kRowBytes, Config::kTileBytes>(
            stage, row, chunk, layer_kv,
            __shfl_sync(kFullMask, row_offset, k * Config::kWarpRows + in_warp), v_minus_k);
      }
    }
    CopyAsyncCommit();
  };

  // Query fragments of the kind of key being scored (0: sinks, rotated by the cache position;
  // 1: window, by the text position), scaled by scale * log2(e), f16. Invalid rows are zero.
  uint32_t qa[kDimSteps][4];
  int q_kind = -1;
  auto load_queries = [&](int kind) {
    const float qs = scale * kLog2e;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* row_q = kind == 0 ? q_sink + (row_token[h] * n_heads + row_head[h]) * kHeadDim
                                     : q + row_token[h] * q_ld + row_head[h] * kHeadDim;
#pragma unroll
      for (int s = 0; s < kDimSteps; ++s) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float2 v = make_float2(0.0f, 0.0f);
          if (row_valid[h]) {
            v = *reinterpret_cast<const float2*>(row_q + s * 16 + half * 8 + 2 * c);
          }
          qa[s][h + 2 * half] = PackHalves(v.x * qs, v.y * qs);
        }
      }
    }
    q_kind = kind;
  };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[2 * kDimSteps][4] = {};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  for (int32_t j = 0; j < n_tiles; ++j) {
    issue(j + kStages - 1);
    CopyAsyncWait<kStages - 1>();  // tile j's group has landed (this thread's copies)
    __syncthreads();               // ... and every thread's
    int64_t first, end;
    tile_range(j, &first, &end);
    const int kind = j < tiles0 ? 0 : 1;
    if (kind != q_kind) load_queries(kind);
    const uint32_t k_tile = smem_base + (j % kStages) * Config::kStageBytes;
    const uint32_t v_tile = k_tile + Config::kTileBytes;

    // Scores of keys 8n .. 8n + 7 in s[n], then each row's own mask.
    float s[4][4] = {};
    ScoreKeys16<Config::kRowBytes, kDimSteps>(k_tile, 0, qa, lane, s[0], s[1]);
    ScoreKeys16<Config::kRowBytes, kDimSteps>(k_tile, 16, qa, lane, s[2], s[3]);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const int64_t key = first + n * 8 + 2 * c + (e % 2);
        const bool visible =
            row_valid[h] && key < end &&
            (kind == 0 ? key < row_sinks[h] : key >= row_window[h] && key <= row_p[h]);
        if (!visible) s[n][e] = -INFINITY;
      }
    }
    OnlineSoftmaxTile(s, m, l, acc);
    // acc += P V over the tile's two halves of 16 keys (the k of the mma).
    AccumulatePv<Config::kRowBytes, kDimSteps>(v_tile, 0, s[0], s[1], lane, acc);
    AccumulatePv<Config::kRowBytes, kDimSteps>(v_tile, 16, s[2], s[3], lane, acc);
    __syncthreads();  // every warp has read this stage before a later issue() refills it
  }
  CopyAsyncWait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = GroupSum<4>(l[h]);  // the four lanes of a row
    if (!row_valid[h]) continue;
    __half* dst = out + (row_token[h] * n_heads + row_head[h]) * kHeadDim;
    const float inv = 1.0f / l[h];  // > 0: a query always sees itself
#pragma unroll
    for (int n = 0; n < 2 * kDimSteps; ++n) {
      *reinterpret_cast<__half2*>(dst + n * 8 + 2 * c) =
          __floats2half2_rn(acc[n][2 * h] * inv, acc[n][2 * h + 1] * inv);
    }
  }
}

}  // namespace

int32_t PrefillTileQueries(int32_t group) {
  const int32_t per_block = group < kHeadsPerBlock ? group : kHeadsPerBlock;
  return kRows / (per_block > 0 ? per_block : 1);
}

cudaError_t PrefillAttention(KvPoolLayout layout, const uint16_t* layer_kv, AttentionBatch batch,
                             const PrefillTile* tiles, int32_t n_tiles, const float* q,
                             int64_t q_ld, const float* q_sink, AttentionShape shape, uint16_t* out,
                             cudaStream_t stream) {
  if (AttentionCanImplement(layout, shape) != nullptr || n_tiles <= 0) {
    return cudaErrorInvalidValue;
  }
  const int32_t group = shape.n_heads / layout.n_kv_heads;
  const int32_t chunks = (group + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const dim3 grid(layout.n_kv_heads * chunks, n_tiles);
  if (shape.head_dim == 64) {
    PrefillAttentionKernel<64>
        <<<grid, kWarps * 32, 0, stream>>>(layout, AsHalf(layer_kv), batch, tiles, q, q_ld, q_sink,
                                           shape.n_heads, shape.scale, AsHalf(out));
  } else {
    PrefillAttentionKernel<128>
        <<<grid, kWarps * 32, 0, stream>>>(layout, AsHalf(layer_kv), batch, tiles, q, q_ld, q_sink,
                                           shape.n_heads, shape.scale, AsHalf(out));
  }
  return cudaGetLastError();
}

}  // namespace streamd::kernels::cuda
