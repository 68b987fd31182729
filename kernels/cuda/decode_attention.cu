// Decode attention over the paged sink + window cache: one query per token (session),
// GQA-aware, keys split across thread blocks so that even one session fills the GPU. Its job is
// to stream K/V at memory bandwidth (DESIGN.md fact 6), so the work is laid out for bytes in
// flight and few instructions per byte:
//
// - A thread block serves one (token, kv head, split) and up to 16 query heads of that kv head
//   (the M = 16 rows of a tensor-core tile; GQA groups are 3-8 heads, the rest are zero rows),
//   so each K/V byte is read once for the whole group.
// - Keys go in tiles of 16. Each warp owns every kWarps-th tile of the block's key range and
//   streams its tiles' K and V rows into shared memory with cp.async, kStages - 1 tiles ahead
//   of the one it computes: the bytes in flight cost no registers. Rows past the range are
//   zero-filled (a zero V row times p = 0 stays 0; garbage could be NaN).
// - Scores S = Q K^T and the update O += P V are mma.m16n8k16 (f16 in, f32 accumulate); K and V
//   tiles reach the fragments through ldmatrix (V transposed by ldmatrix.trans). Rows of 16-byte
//   chunks are XOR-swizzled in shared memory so the eight rows an ldmatrix reads sit in eight
//   different bank groups.
// - Online softmax per query head, once per tile: m = running max, l = sum exp(s - m),
//   acc = sum exp(s - m) V, in base 2 (scale * log2(e) is folded into q). The warps' states are
//   merged in shared memory, and the splits' states by MergeSplitsKernel, with the
//   log-sum-exp rule M = max m_k, L = sum l_k 2^(m_k - M), A = sum acc_k 2^(m_k - M),
//   out = A / L; an empty state (m = -inf, l = 0, acc = 0) drops out.
//
// Keys of token t (text position p), in order: index i < n_sinks is sink i (scored with the
// query rotated by its cache position), index i >= n_sinks is window position
// WindowStart(p) + (i - n_sinks) (scored with the query rotated by p); tables with span 0 only
// (kernels.h). Split j owns indices [j * keys_per_split, (j + 1) * keys_per_split); tiles start
// at the split's first index of each kind, so a tile never mixes sinks and window keys.
//
// Fragment layouts: kernels/cuda/mma_util.cuh. The C tile of two score mmas (keys 0-7 and
// 8-15) is, converted to f16, exactly the A tile of the P V mma.
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/mma_util.cuh"

namespace streamd::kernels::cuda {
namespace {

constexpr int kTileKeys = 16;  // keys per tile: the k of the P V mma
constexpr int kTileRows = 16;  // query heads per block: the M of both mmas
constexpr float kLog2e = 1.4426950408889634f;

// Shapes per head_dim. Static shared memory stays within the 48 KB that needs no opt-in (an
// attribute call would have to happen outside graph capture): 4 blocks per SM.
template <int kHeadDim>
struct DecodeConfig {
  static constexpr int kWarps = kHeadDim == 128 ? 2 : 4;
  static constexpr int kBlocksPerSm = 4;  // what the registers are budgeted for (228 KB smem / 48)
  static constexpr int kStages = 3;       // tiles in flight + the one computed
  static constexpr int kRowBytes = kHeadDim * 2;            // one key's K (or V), f16
  static constexpr int kChunks = kHeadDim / 8;              // 16-byte chunks per row
  static constexpr int kTileBytes = kTileKeys * kRowBytes;  // K (or V) of one tile
  static constexpr int kStageBytes = 2 * kTileBytes;        // K then V
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int kSmemBytes = kWarps * kWarpBytes;
  static constexpr int kDimSteps = kHeadDim / 16;  // k-steps of the score mma, n-pairs of P V
  // The block-level merge reuses the same bytes: per warp 16 rows of acc, then m and l.
  static_assert(kWarps * kTileRows * (kHeadDim + 2) * 4 <= kSmemBytes, "merge buffer");
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
};

template <int kHeadDim>
__global__ void __launch_bounds__(DecodeConfig<kHeadDim>::kWarps * 32,
                                  DecodeConfig<kHeadDim>::kBlocksPerSm)
    DecodeAttentionKernel(KvPoolLayout layout, const __half* layer_kv, AttentionBatch batch,
                          const float* q, int64_t q_ld, const float* q_sink, int32_t n_heads,
                          float scale, int32_t keys_per_split, int32_t n_splits,
                          float* part_acc,  // [n_tokens, n_heads, n_splits, head_dim]
                          float* part_ml,   // [n_tokens, n_heads, n_splits, 2]: M, L
                          __half* out) {    // [n_tokens, n_heads, head_dim]
  using Config = DecodeConfig<kHeadDim>;
  constexpr int kWarps = Config::kWarps, kStages = Config::kStages;
  constexpr int kDimSteps = Config::kDimSteps;
  __shared__ __align__(128) unsigned char smem[Config::kSmemBytes];

  const int32_t group = n_heads / layout.n_kv_heads;
  const int32_t chunks = (group + kTileRows - 1) / kTileRows;
  const int32_t kv_head = blockIdx.x / chunks;
  const int32_t head0 = kv_head * group + (blockIdx.x % chunks) * kTileRows;
  const int32_t n_local = min(kTileRows, kv_head * group + group - head0);
  const int32_t split = blockIdx.y;
  const int64_t t = blockIdx.z;

  const SinkWindowTable table = batch.tables[batch.seq_of[t]];
  TrapIfSpanned(table.span);  // sinks from 0: no native sliding window (kernels.h)
  const int64_t p = batch.positions[t];
  const int64_t n_sinks = table.VisibleSinks(p);
  const int64_t w_start = table.WindowStart(p);
  const int64_t n_keys = n_sinks + (p - w_start + 1);
  const int64_t k_begin = static_cast<int64_t>(split) * keys_per_split;
  const int64_t k_end = min(k_begin + keys_per_split, n_keys);

  // Tiles: first the split's sinks [lo0, hi0), then its window keys [lo1, hi1).
  const int64_t lo0 = k_begin, hi0 = min(k_end, n_sinks);
  const int64_t lo1 = max(k_begin, n_sinks), hi1 = k_end;
  const int32_t tiles0 = TilesCovering(lo0, hi0, kTileKeys);
  const int32_t tiles1 = TilesCovering(lo1, hi1, kTileKeys);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  // This warp's tiles are block tiles warp, warp + kWarps, ...
  const int32_t n_tiles = tiles0 + tiles1;
  const int32_t my_tiles = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;
  // First key index and end of the kind of block tile j.
  auto tile_range = [&](int32_t j, int64_t* first, int64_t* end) {
    if (j < tiles0) {
      *first = lo0 + static_cast<int64_t>(j) * kTileKeys;
      *end = hi0;
    } else {
      *first = lo1 + static_cast<int64_t>(j - tiles0) * kTileKeys;
      *end = hi1;
    }
  };

  const int64_t v_minus_k = layout.n_kv_heads * layout.head_elems();  // elements
  const uint32_t warp_smem = SharedAddress(smem) + warp * Config::kWarpBytes;

  // Starts the copies of this warp's tile i (or nothing past the last) and commits a group, so
  // that group n always belongs to tile n.
  auto issue = [&](int32_t i) {
    if (i < my_tiles) {
      int64_t first, end;
      const int32_t j = warp + kWarps * i;
      tile_range(j, &first, &end);
      const int64_t to_text = j < tiles0 ? 0 : w_start - n_sinks;  // key index -> position
      // Lane r < 16 locates row r once; the copies fetch the row offsets by shuffle.
      long long row_offset = -1;
      if (lane < kTileKeys && first + lane < end) {
        int32_t block, slot;
        table.Locate(first + lane + to_text, &block, &slot);
        row_offset = layout.Offset(block, 0, kv_head, slot);
      }
      const uint32_t stage = warp_smem + (i % kStages) * Config::kStageBytes;
#pragma unroll
      for (int k = 0; k < Config::kChunks / 2; ++k) {  // 16 rows x kChunks chunks / 32 lanes
        const int e = k * 32 + lane;
        const int row = e / Config::kChunks, chunk = e % Config::kChunks;
        CopyKvChunk<Config::kRowBytes, Config::kTileBytes>(
            stage, row, chunk, layer_kv, __shfl_sync(kFullMask, row_offset, row), v_minus_k);
      }
    }
    CopyAsyncCommit();
  };

  // Query fragments (A tiles, one per 16 dims) of the kind of key being scored, scaled by
  // scale * log2(e) and rounded to f16. Rows past the block's heads are zero.
  uint32_t qa[kDimSteps][4];
  int q_kind = -1;
  auto load_queries = [&](int kind) {
    const float* q_row = kind == 0 ? q_sink + t * n_heads * kHeadDim : q + t * q_ld;
    const float qs = scale * kLog2e;
#pragma unroll
    for (int s = 0; s < kDimSteps; ++s) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = g + (r % 2) * 8, d = s * 16 + (r / 2) * 8 + 2 * c;
        float2 v = make_float2(0.0f, 0.0f);
        if (row < n_local) {
          v = *reinterpret_cast<const float2*>(q_row + (head0 + row) * kHeadDim + d);
        }
        qa[s][r] = PackHalves(v.x * qs, v.y * qs);
      }
    }
    q_kind = kind;
  };

  // Per-thread softmax state of rows g (index 0) and g + 8 (index 1); l is this thread's
  // partial sum (its columns), summed over the four lanes of a row at the end.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float acc[2 * kDimSteps][4] = {};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  for (int32_t i = 0; i < my_tiles; ++i) {
    issue(i + kStages - 1);
    CopyAsyncWait<kStages - 1>();  // tile i's group has landed (this lane's copies)
    __syncwarp();                  // ... and every lane's
    const int32_t j = warp + kWarps * i;
    int64_t first, end;
    tile_range(j, &first, &end);
    const int kind = j < tiles0 ? 0 : 1;
    if (kind != q_kind) load_queries(kind);
    const int valid_keys = static_cast<int>(min(static_cast<int64_t>(kTileKeys), end - first));
    const uint32_t k_tile = warp_smem + (i % kStages) * Config::kStageBytes;
    const uint32_t v_tile = k_tile + Config::kTileBytes;
    // Scores of keys 0-7 (s[0]) and 8-15 (s[1]); columns past the tile's keys are -inf.
    float s[2][4] = {};
    ScoreKeys16<Config::kRowBytes, kDimSteps>(k_tile, 0, qa, lane, s[0], s[1]);
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (n * 8 + 2 * c + (e % 2) >= valid_keys) s[n][e] = -INFINITY;
      }
    }
    OnlineSoftmaxTile(s, m, l, acc);
    AccumulatePv<Config::kRowBytes, kDimSteps>(v_tile, 0, s[0], s[1], lane, acc);
    __syncwarp();  // every lane has read this stage before a later issue() refills it
  }
  CopyAsyncWait<0>();
  for (float& row_l : l) row_l = GroupSum<4>(row_l);  // the four lanes of a row

  // Merge the warps' states per head (log-sum-exp), then write the split's state, or the final
  // output when there is one split. The stages' bytes are reused once every warp is done.
  __syncthreads();
  float* sh_acc = reinterpret_cast<float*>(smem);        // [kWarps][16][kHeadDim]
  float* sh_m = sh_acc + kWarps * kTileRows * kHeadDim;  // [kWarps][16]
  float* sh_l = sh_m + kWarps * kTileRows;               // [kWarps][16]
#pragma unroll
  for (int n = 0; n < 2 * kDimSteps; ++n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* dst = sh_acc + (warp * kTileRows + g + 8 * h) * kHeadDim + n * 8 + 2 * c;
      dst[0] = acc[n][2 * h];
      dst[1] = acc[n][2 * h + 1];
    }
  }
  if (c == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sh_m[warp * kTileRows + g + 8 * h] = m[h];
      sh_l[warp * kTileRows + g + 8 * h] = l[h];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_local * kHeadDim; e += blockDim.x) {
    const int row = e / kHeadDim, d = e % kHeadDim;
    float big = -INFINITY;
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, sh_m[w * kTileRows + row]);
    float sum_l = 0.0f, sum_a = 0.0f;
    if (big != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(sh_m[w * kTileRows + row] - big);
        sum_l += sh_l[w * kTileRows + row] * f;
        sum_a += sh_acc[(w * kTileRows + row) * kHeadDim + d] * f;
      }
    }
    const int64_t th = t * n_heads + head0 + row;
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

// One block per (token, head), one thread per dimension: the log-sum-exp merge of the splits
// (their M are in base-2 units, like the kernel's scores).
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
    const float w = exp2f(ml[2 * s] - big);
    sum_l += ml[2 * s + 1] * w;
    sum_a += part_acc[(th * n_splits + s) * head_dim + d] * w;
  }
  out[th * head_dim + d] = __float2half(sum_a / sum_l);
}

template <int kHeadDim>
cudaError_t Launch(const KvPoolLayout& layout, const uint16_t* layer_kv,
                   const AttentionBatch& batch, const float* q, int64_t q_ld, const float* q_sink,
                   const AttentionShape& shape, int32_t n_splits, int32_t keys_per_split,
                   void* workspace, uint16_t* out, cudaStream_t stream) {
  const int32_t group = shape.n_heads / layout.n_kv_heads;
  const int32_t chunks = (group + kTileRows - 1) / kTileRows;
  // Partial states (only with several splits): [n_tokens, n_heads, n_splits] x (acc, then M, L).
  float* part_acc = n_splits > 1 ? static_cast<float*>(workspace) : nullptr;
  float* part_ml = n_splits > 1 ? part_acc + static_cast<int64_t>(batch.n_tokens) * shape.n_heads *
                                                 n_splits * kHeadDim
                                : nullptr;
  const dim3 grid(layout.n_kv_heads * chunks, n_splits, batch.n_tokens);
  DecodeAttentionKernel<kHeadDim><<<grid, DecodeConfig<kHeadDim>::kWarps * 32, 0, stream>>>(
      layout, AsHalf(layer_kv), batch, q, q_ld, q_sink, shape.n_heads, shape.scale, keys_per_split,
      n_splits, part_acc, part_ml, AsHalf(out));
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

int32_t ChooseDecodeSplits(int32_t n_tokens, int32_t n_kv_heads, int32_t max_keys, int32_t sm_count,
                           int32_t* keys_per_split) {
  constexpr int32_t kMinKeys = 64;
  const int64_t base = static_cast<int64_t>(n_tokens) * n_kv_heads;
  // About three blocks per SM, rounded to the nearest split count: each split adds a pass of
  // partial states and a merge, and a block streams best with many tiles per warp. Measured on
  // an H200 (kernels_cuda_bench's sweep, 2026-11-29): Llama-3-8B shape, 64 sessions, W 1020:
  // 1 split 77% of copy bandwidth, 2-4 splits 69-71%, 6 splits 67%; SmolLM2 shape, 64
  // sessions: 2 splits 47%, 1 split 44%, 4 splits 39%, 8 splits 35%.
  const int64_t target = 3LL * sm_count;
  const int64_t b = base > 0 ? base : 1;
  int64_t splits = (target + b / 2) / b;
  const int64_t most = max_keys / kMinKeys > 1 ? max_keys / kMinKeys : 1;  // >= 64 keys each
  splits = splits < 1 ? 1 : (splits > most ? most : splits);
  int64_t per = CeilDiv(max_keys > 0 ? max_keys : 1, splits);
  per = CeilDiv(per, 16) * 16;  // whole tiles of 16 keys
  *keys_per_split = static_cast<int32_t>(per);
  return static_cast<int32_t>(CeilDiv(max_keys > 0 ? max_keys : 1, per));
}

cudaError_t DecodeAttention(KvPoolLayout layout, const uint16_t* layer_kv, AttentionBatch batch,
                            const float* q, int64_t q_ld, const float* q_sink, AttentionShape shape,
                            int32_t n_splits, int32_t keys_per_split, void* workspace,
                            uint16_t* out, cudaStream_t stream) {
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
