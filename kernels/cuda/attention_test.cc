// Decode and prefill attention kernels against two references on fresh random inputs: a plain
// float64 recomputation of the sink + window attention, and the CPU backend's
// PagedAttentionHead. Cases: ragged batches, GQA groups 1/3/4/8/32, head_dim 64 and 128, block
// sizes 1, 7 and 16, windows that are not a multiple of the block size, sessions many times
// longer than the window (window blocks far from block 0), S = 0, queries before eviction starts,
// and chunks that cross the window boundary. Outputs are poisoned (NaN) before each launch.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cuda/kernels.h"
#include "tests/support/cuda_test_util.h"

namespace streamd::kernels::cuda {
namespace {

using testing::DeviceArray;

struct SessionSpec {
  int32_t sinks;
  int32_t window;
  int64_t first_position;  // of the session's first query in the batch
};

struct Case {
  int32_t n_heads, n_kv_heads, head_dim, block_size;
  std::vector<SessionSpec> sessions;
  int32_t chunk;  // queries per session: 1 = decode
  uint64_t seed;
};

// Host and device copies of one random problem.
struct Problem {
  KvPoolLayout layout;
  int32_t n_tokens = 0, q_dim = 0, q_ld = 0;
  float scale = 0;
  std::vector<uint16_t> pool;      // one layer, f16
  std::vector<int32_t> block_ids;  // every session's sink then window ids
  std::vector<SinkWindowTable> host_tables, device_tables;
  std::vector<int32_t> seq_of;
  std::vector<int64_t> positions;
  std::vector<float> q, q_sink;  // [n, q_ld], [n, q_dim]
};

Problem Make(const Case& c, DeviceArray<int32_t>** ids_out) {
  Problem pr;
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int32_t B = c.block_size;
  std::vector<int32_t> sink_n, ring_n;
  int32_t total = 0;
  for (const SessionSpec& s : c.sessions) {
    sink_n.push_back((s.sinks + B - 1) / B);
    ring_n.push_back((s.window + c.chunk - 1 + B - 1) / B + 1);
    total += sink_n.back() + ring_n.back();
  }
  pr.layout = {total + 5, 1, c.n_kv_heads, c.head_dim, B};
  std::vector<int32_t> perm(pr.layout.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  pr.block_ids.assign(perm.begin(), perm.begin() + total);
  pr.pool.resize(pr.layout.layer_elems());
  for (uint16_t& h : pr.pool) h = FloatToHalf(u(rng));

  pr.q_dim = c.n_heads * c.head_dim;
  pr.q_ld = pr.q_dim + 2 * c.n_kv_heads * c.head_dim;  // as in the model's fused qkv rows
  pr.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  *ids_out = new DeviceArray<int32_t>(pr.block_ids);
  int32_t offset = 0;
  for (size_t s = 0; s < c.sessions.size(); ++s) {
    SinkWindowTable t;
    t.sinks = c.sessions[s].sinks;
    t.window = c.sessions[s].window;
    t.block_size = B;
    // The window blocks start at the block of the oldest key the first query sees, as the
    // engine's step plan lays them out; ring_n[s] blocks cover the chunk's last query.
    const int64_t p0 = c.sessions[s].first_position;
    if (p0 >= t.sinks) t.first_window_block = (t.WindowStart(p0) - t.sinks) / B;
    SinkWindowTable h = t, d = t;
    h.sink_blocks = pr.block_ids.data() + offset;
    d.sink_blocks = (*ids_out)->get() + offset;
    h.window_blocks = h.sink_blocks + sink_n[s];
    d.window_blocks = d.sink_blocks + sink_n[s];
    offset += sink_n[s] + ring_n[s];
    pr.host_tables.push_back(h);
    pr.device_tables.push_back(d);
    for (int32_t i = 0; i < c.chunk; ++i) {
      pr.seq_of.push_back(static_cast<int32_t>(s));
      pr.positions.push_back(c.sessions[s].first_position + i);
    }
  }
  pr.n_tokens = static_cast<int32_t>(pr.positions.size());
  pr.q.resize(static_cast<size_t>(pr.n_tokens) * pr.q_ld);
  pr.q_sink.resize(static_cast<size_t>(pr.n_tokens) * pr.q_dim);
  for (float& x : pr.q) x = u(rng);
  for (float& x : pr.q_sink) x = u(rng);
  return pr;
}

// Plain float64 sink + window attention, straight from the definition.
std::vector<double> Reference(const Problem& pr, int32_t n_heads) {
  const KvPoolLayout& L = pr.layout;
  const int32_t hd = L.head_dim, group = n_heads / L.n_kv_heads;
  std::vector<double> out(static_cast<size_t>(pr.n_tokens) * pr.q_dim);
  for (int32_t t = 0; t < pr.n_tokens; ++t) {
    const SinkWindowTable& tab = pr.host_tables[pr.seq_of[t]];
    const int64_t p = pr.positions[t];
    std::vector<int64_t> keys;
    for (int64_t j = 0; j < tab.VisibleSinks(p); ++j) keys.push_back(j);
    for (int64_t j = tab.WindowStart(p); j <= p; ++j) keys.push_back(j);
    for (int32_t h = 0; h < n_heads; ++h) {
      const int32_t kvh = h / group;
      std::vector<double> s(keys.size());
      double big = -INFINITY;
      for (size_t i = 0; i < keys.size(); ++i) {
        int32_t block, slot;
        tab.Locate(keys[i], &block, &slot);
        const uint16_t* k = pr.pool.data() + L.Offset(block, 0, kvh, slot);
        const float* q =
            keys[i] < tab.sinks ? &pr.q_sink[t * pr.q_dim + h * hd] : &pr.q[t * pr.q_ld + h * hd];
        double dot = 0;
        for (int32_t d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * HalfToFloat(k[d]);
        s[i] = dot * pr.scale;
        big = std::max(big, s[i]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - big));
      double* o = &out[static_cast<size_t>(t) * pr.q_dim + h * hd];
      for (size_t i = 0; i < keys.size(); ++i) {
        int32_t block, slot;
        tab.Locate(keys[i], &block, &slot);
        const uint16_t* v = pr.pool.data() + L.Offset(block, 1, kvh, slot);
        for (int32_t d = 0; d < hd; ++d) o[d] += s[i] / sum * HalfToFloat(v[d]);
      }
    }
  }
  return out;
}

// The CPU backend's kernel on the same inputs.
std::vector<double> CpuBackend(const Problem& pr, int32_t n_heads) {
  const int32_t hd = pr.layout.head_dim, group = n_heads / pr.layout.n_kv_heads;
  std::vector<double> out(static_cast<size_t>(pr.n_tokens) * pr.q_dim);
  std::vector<float> scratch(1 << 20), o(hd);
  for (int32_t t = 0; t < pr.n_tokens; ++t) {
    for (int32_t h = 0; h < n_heads; ++h) {
      cpu::PagedAttentionHead(pr.layout, pr.pool.data(), pr.host_tables[pr.seq_of[t]],
                              pr.positions[t], h / group, &pr.q[t * pr.q_ld + h * hd],
                              &pr.q_sink[t * pr.q_dim + h * hd], pr.scale, scratch.data(),
                              o.data());
      for (int32_t d = 0; d < hd; ++d) out[static_cast<size_t>(t) * pr.q_dim + h * hd + d] = o[d];
    }
  }
  return out;
}

std::vector<double> ToDouble(const std::vector<uint16_t>& halves) {
  std::vector<double> out(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) out[i] = HalfToFloat(halves[i]);
  return out;
}

// Runs the decode (chunk == 1, every split choice in `splits`; 0 = ChooseDecodeSplits) or the
// prefill kernel and checks both references.
void Check(const Case& c, const std::vector<int32_t>& splits) {
  DeviceArray<int32_t>* ids_raw = nullptr;
  const Problem pr = Make(c, &ids_raw);
  std::unique_ptr<DeviceArray<int32_t>> ids(ids_raw);
  const std::vector<double> ref = Reference(pr, c.n_heads);
  const std::vector<double> cpu_ref = CpuBackend(pr, c.n_heads);
  EXPECT_LT(testing::RelativeError(cpu_ref, ref), testing::kF16Tolerance) << "CPU backend";

  DeviceArray<uint16_t> pool(pr.pool);
  DeviceArray<SinkWindowTable> tables(pr.device_tables);
  DeviceArray<int32_t> seq_of(pr.seq_of);
  DeviceArray<int64_t> positions(pr.positions);
  DeviceArray<float> q(pr.q), q_sink(pr.q_sink);
  DeviceArray<uint16_t> out(static_cast<size_t>(pr.n_tokens) * pr.q_dim);
  const AttentionBatch batch{tables.get(), seq_of.get(), positions.get(), pr.n_tokens};
  const AttentionShape shape{c.n_heads, c.head_dim, pr.scale};
  ASSERT_EQ(AttentionCanImplement(pr.layout, shape), nullptr);

  if (c.chunk > 1) {
    std::vector<PrefillTile> host_tiles;
    const int32_t per = PrefillTileQueries(c.n_heads / c.n_kv_heads);
    for (size_t s = 0; s < c.sessions.size(); ++s) {
      for (int32_t i = 0; i < c.chunk; i += per) {
        host_tiles.push_back({static_cast<int32_t>(s) * c.chunk + i, std::min(per, c.chunk - i)});
      }
    }
    DeviceArray<PrefillTile> tiles(host_tiles);
    ASSERT_CUDA_OK(out.Poison());
    ASSERT_CUDA_OK(PrefillAttention(pr.layout, pool.get(), batch, tiles.get(),
                                    static_cast<int32_t>(host_tiles.size()), q.get(), pr.q_ld,
                                    q_sink.get(), shape, out.get(), nullptr));
    const std::vector<double> got = ToDouble(out.Download());
    EXPECT_LT(testing::RelativeError(got, ref), testing::kF16Tolerance) << "prefill";
    EXPECT_LT(testing::RelativeError(got, cpu_ref), testing::kF16Tolerance) << "prefill vs CPU";
    return;
  }
  int32_t max_keys = 0;
  for (const SessionSpec& s : c.sessions) max_keys = std::max(max_keys, s.sinks + s.window);
  int sm_count = 0;
  ASSERT_CUDA_OK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  for (int32_t want : splits) {
    int32_t per = 0, n_splits = 0;
    if (want == 0) {
      n_splits = ChooseDecodeSplits(pr.n_tokens, c.n_kv_heads, max_keys, sm_count, &per);
    } else {
      per = (max_keys + want - 1) / want;
      n_splits = (max_keys + per - 1) / per;
    }
    ASSERT_GE(static_cast<int64_t>(n_splits) * per, max_keys);
    DeviceArray<uint8_t> workspace(
        DecodeAttentionWorkspaceBytes(pr.n_tokens, c.n_heads, c.head_dim, n_splits));
    ASSERT_CUDA_OK(out.Poison());
    ASSERT_CUDA_OK(DecodeAttention(pr.layout, pool.get(), batch, q.get(), pr.q_ld, q_sink.get(),
                                   shape, n_splits, per, workspace.get(), out.get(), nullptr));
    const std::vector<double> got = ToDouble(out.Download());
    EXPECT_LT(testing::RelativeError(got, ref), testing::kF16Tolerance)
        << "decode, " << n_splits << " splits of " << per << " keys";
    EXPECT_LT(testing::RelativeError(got, cpu_ref), testing::kF16Tolerance)
        << "decode vs CPU, " << n_splits << " splits";
  }
}

// A ragged decode batch: before eviction, at the boundary, and many windows in.
std::vector<SessionSpec> DecodeSessions(int32_t sinks, int32_t window) {
  return {{sinks, window, 0},
          {sinks, window, 2},
          {sinks, window, sinks + window - 1},
          {sinks, window, sinks + window},
          {sinks, window, 37LL * window + 11},
          {sinks, window, 1000003},
          {0, window, 5LL * window + 3},
          {sinks, std::max(1, window / 3), 777}};
}

TEST(DecodeAttentionTest, SmolLm2ShapeGroup3) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  Check({9, 3, 64, 16, DecodeSessions(4, 1020), 1, 1}, {0, 1, 3, 16});
}

TEST(DecodeAttentionTest, Llama3ShapeGroup4HeadDim128BlockNotDividingWindow) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  Check({32, 8, 128, 7, DecodeSessions(4, 100), 1, 2}, {0, 1, 5});
}

TEST(DecodeAttentionTest, Group8BlockSizeThree) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  Check({16, 2, 64, 3, DecodeSessions(5, 61), 1, 3}, {0, 2});
}

// A block serves at most 16 query heads (one tensor-core tile of rows): 32 take two.
TEST(DecodeAttentionTest, Group32TakesTwoBlocksPerKvHead) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  Check({32, 1, 128, 5, DecodeSessions(4, 45), 1, 6}, {0, 3});
}

TEST(DecodeAttentionTest, MultiHeadBlockSizeOne) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  Check({4, 4, 128, 1, DecodeSessions(3, 37), 1, 4}, {0, 1, 7});
}

TEST(DecodeAttentionTest, ManySessions) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<SessionSpec> sessions;
  for (int i = 0; i < 64; ++i) sessions.push_back({4, 252, 97LL * i * i + i});
  Check({9, 3, 64, 16, sessions, 1, 5}, {0});
}

TEST(PrefillAttentionTest, FreshPromptAndChunksCrossingTheWindow) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<SessionSpec> sessions = {
      {4, 100, 0}, {4, 100, 90}, {4, 100, 5000}, {0, 100, 333}, {2, 45, 1}};
  Check({9, 3, 64, 16, sessions, 37, 6}, {});
}

TEST(PrefillAttentionTest, Llama3ShapeBlockSeven) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<SessionSpec> sessions = {{4, 61, 0}, {4, 61, 50}, {4, 61, 100000}};
  Check({32, 8, 128, 7, sessions, 83, 7}, {});
}

TEST(PrefillAttentionTest, Group8AndSingleTokenChunks) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  Check({16, 2, 64, 3, DecodeSessions(5, 61), 1 + 1, 8}, {});
}

// 32 query heads per kv head take two blocks of 16; 4 queries per tile; S = 0 for one session.
TEST(PrefillAttentionTest, Group32TwoBlocksPerKvHead) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<SessionSpec> sessions = {{4, 50, 0}, {0, 50, 77}, {4, 50, 4000}};
  Check({32, 1, 128, 5, sessions, 29, 9}, {});
}

TEST(AttentionCanImplementTest, RejectsUnsupportedShapes) {
  // Pure host code: runs without a device.
  const KvPoolLayout layout{10, 1, 2, 64, 16};
  EXPECT_EQ(AttentionCanImplement(layout, {4, 64, 0.125f}), nullptr);
  EXPECT_NE(AttentionCanImplement(layout, {4, 96, 0.1f}), nullptr);
  EXPECT_NE(AttentionCanImplement(layout, {3, 64, 0.125f}), nullptr);
  EXPECT_NE(AttentionCanImplement({10, 1, 2, 128, 16}, {4, 64, 0.125f}), nullptr);
}

}  // namespace
}  // namespace streamd::kernels::cuda
