// PagedAttentionGroup on fresh random pools, per instruction-set level, against a plain float64
// recomputation of the sink + window attention and against one PagedAttentionHead call per query
// head at the portable level (bit-identical there). Cases: group sizes 1, 2, 3, 4 and 8, head
// sizes 64, 128 and 40, block sizes 1, 7 and 16, windows that are not a multiple of the block
// size, S = 0, queries before eviction, at its start and far past it (window blocks far from block
// 0). A table's span (a layer's native sliding window, Gemma 3's local layers): spans shorter and
// longer than the window, ones that hide some but not all sinks, f16 and int8, against the key
// set written out from its definition (not from the table's helpers), and the helpers
// SinkBegin / WindowStart / CachePosition themselves.
#include "kernels/cpu/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"
#include "tests/support/kernels_cpu_test_util.h"

namespace streamd::kernels::cpu {
namespace {

using testing::ScopedIsa;
using testing::SeedTrace;
using testing::SupportedIsas;
using testing::TestSeed;

// One KV head's cache for one session, blocks scattered over a pool with one other KV head.
struct Cache {
  KvPoolLayout layout;
  std::vector<uint16_t> pool;  // one layer, f16
  std::vector<int32_t> blocks;
  SinkWindowTable table;
  // The table as the engine would plan it for a query at p: its window blocks start at the
  // block of the oldest key p sees. With a span: the blocks of the unspanned window, which the
  // engine keeps for every layer, or (tight) only from the oldest key the span leaves, so that a
  // kernel reading a key it must not see reads a wrong block.
  SinkWindowTable At(int64_t p, int32_t span = 0, bool tight = false) const {
    SinkWindowTable t = table;
    t.span = tight ? span : 0;
    if (p >= t.sinks) t.first_window_block = (t.WindowStart(p) - t.sinks) / t.block_size;
    t.span = span;
    return t;
  }
};

Cache MakeCache(int32_t hd, int32_t block, int32_t sinks, int32_t window, std::mt19937_64& rng) {
  Cache c;
  const int32_t n_sink = (sinks + block - 1) / block;
  const int32_t ring = (window + block - 1) / block + 1;
  c.layout = {n_sink + ring + 3, 1, 2, hd, block};
  std::vector<int32_t> perm(c.layout.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.blocks.assign(perm.begin(), perm.begin() + n_sink + ring);
  c.pool.resize(c.layout.layer_elems());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (uint16_t& h : c.pool) h = FloatToHalf(u(rng));
  c.table.sink_blocks = c.blocks.data();
  c.table.window_blocks = c.blocks.data() + n_sink;
  c.table.sinks = sinks;
  c.table.window = window;
  c.table.block_size = block;
  return c;
}

// The value of pool element `offset` (a layer-relative Offset() plus d) of K (kv = 0) or V.
using ValueAt = std::function<double(int32_t kv, int64_t offset, int32_t d)>;

// The text positions a query at p sees, straight from the definition: the sinks j < S up to p,
// and the last W tokens after the sinks, j > p - W; with a span N > 0, only those with
// j > p - N. Sinks first, each part ascending.
std::vector<int64_t> VisibleKeysByDefinition(int64_t p, int32_t sinks, int32_t window,
                                             int32_t span) {
  std::vector<int64_t> keys;
  const auto spanned_out = [&](int64_t j) { return span > 0 && j <= p - span; };
  for (int64_t j = 0; j < sinks && j <= p; ++j) {
    if (!spanned_out(j)) keys.push_back(j);
  }
  for (int64_t j = std::max<int64_t>(sinks, p - window + 1); j <= p; ++j) {
    if (!spanned_out(j)) keys.push_back(j);
  }
  return keys;
}

// Query i of the group at position p, straight from the definition, in float64, over the
// values `value` reads (by default the f16 pool's). kernel_table: the table the kernel gets
// (its shape and span; its blocks for Locate), by default c.At(p).
std::vector<double> ReferenceAttention(const Cache& c, int64_t p, int32_t kv_head, int32_t n_q,
                                       const std::vector<float>& q_window,
                                       const std::vector<float>& q_sink, float scale,
                                       ValueAt value = {},
                                       const SinkWindowTable* kernel_table = nullptr) {
  if (!value) {
    value = [&c](int32_t, int64_t offset, int32_t) { return double{HalfToFloat(c.pool[offset])}; };
  }
  const int32_t hd = c.layout.head_dim;
  const SinkWindowTable table = kernel_table != nullptr ? *kernel_table : c.At(p);
  const std::vector<int64_t> keys =
      VisibleKeysByDefinition(p, table.sinks, table.window, table.span);
  std::vector<double> out(static_cast<size_t>(n_q) * hd, 0.0);
  for (int32_t i = 0; i < n_q; ++i) {
    std::vector<double> s(keys.size());
    for (size_t j = 0; j < keys.size(); ++j) {
      int32_t block, slot;
      table.Locate(keys[j], &block, &slot);
      const int64_t k = c.layout.Offset(block, 0, kv_head, slot);
      const float* q = (keys[j] < table.sinks ? q_sink : q_window).data() + i * hd;
      double dot = 0;
      for (int32_t d = 0; d < hd; ++d) dot += double{q[d]} * value(0, k + d, d);
      s[j] = dot * scale;
    }
    const double max = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - max));
    for (size_t j = 0; j < keys.size(); ++j) {
      int32_t block, slot;
      table.Locate(keys[j], &block, &slot);
      const int64_t v = c.layout.Offset(block, 1, kv_head, slot);
      for (int32_t d = 0; d < hd; ++d) out[i * hd + d] += s[j] / sum * value(1, v + d, d);
    }
  }
  return out;
}

struct Shape {
  int32_t sinks, window, block;
};

TEST(PagedAttentionTest, GroupMatchesReferenceAndPerHeadCalls) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Shape sh :
       {Shape{4, 37, 16}, Shape{4, 37, 7}, Shape{3, 21, 1}, Shape{0, 29, 16}, Shape{4, 192, 16}}) {
    for (int32_t hd : {64, 128, 40}) {
      const Cache c = MakeCache(hd, sh.block, sh.sinks, sh.window, rng);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      // Before eviction, the last position before it, the first after, and far past it.
      const int64_t full = sh.sinks + sh.window;
      for (int64_t p : {int64_t{0}, int64_t{5}, full - 1, full, full + 1, 1000 * full + 13}) {
        for (int32_t n_q : {1, 2, 3, 4, 8}) {
          SCOPED_TRACE(::testing::Message()
                       << "S " << sh.sinks << " W " << sh.window << " B " << sh.block << " hd "
                       << hd << " p " << p << " n_q " << n_q);
          const int32_t kv_head = 1;
          std::vector<float> q_window(n_q * hd), q_sink(n_q * hd);
          for (float& x : q_window) x = 4 * u(rng);  // large enough for a peaked softmax
          for (float& x : q_sink) x = 4 * u(rng);
          const std::vector<double> ref =
              ReferenceAttention(c, p, kv_head, n_q, q_window, q_sink, scale);
          // Per-head calls at the portable level.
          std::vector<float> heads(n_q * hd);
          std::vector<float> scratch(static_cast<size_t>(n_q) * full + 1);
          {
            ScopedIsa portable(Isa::kPortable);
            for (int32_t i = 0; i < n_q; ++i) {
              PagedAttentionHead(c.layout, c.pool.data(), c.At(p), p, kv_head, &q_window[i * hd],
                                 &q_sink[i * hd], scale, scratch.data(), &heads[i * hd]);
            }
          }
          for (Isa isa : SupportedIsas()) {
            SCOPED_TRACE(IsaName(isa));
            ScopedIsa scoped(isa);
            std::vector<float> out(n_q * hd + 1, NAN);
            out[n_q * hd] = 7.0f;
            scratch.back() = 7.0f;
            PagedAttentionGroup(c.layout, c.pool.data(), c.At(p), p, kv_head, n_q, q_window.data(),
                                q_sink.data(), scale, scratch.data(), out.data());
            ASSERT_EQ(out[n_q * hd], 7.0f);
            ASSERT_EQ(scratch.back(), 7.0f);
            for (int64_t e = 0; e < n_q * hd; ++e) {
              if (isa == Isa::kPortable) {
                ASSERT_EQ(out[e], heads[e]) << "element " << e;
              }
              // Outputs are convex combinations of values in [-1, 1]; f32 rounding of the scores,
              // exps and sums stays far under 1e-5 of them.
              ASSERT_NEAR(out[e], ref[e], 1e-5) << "element " << e;
              ASSERT_NEAR(out[e], heads[e], 1e-5) << "element " << e;
            }
          }
        }
      }
    }
  }
}

// q_sink equal to q_window (no eviction yet), as the model passes it.
TEST(PagedAttentionTest, SharedSinkQuery) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const Cache c = MakeCache(64, 16, 4, 100, rng);
  const int32_t n_q = 3;
  std::vector<float> q(n_q * 64), scratch(n_q * 104), out(n_q * 64);
  for (float& x : q) x = 4 * u(rng);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    PagedAttentionGroup(c.layout, c.pool.data(), c.At(70), 70, 0, n_q, q.data(), q.data(), 0.125f,
                        scratch.data(), out.data());
    const std::vector<double> ref = ReferenceAttention(c, 70, 0, n_q, q, q, 0.125f);
    for (size_t e = 0; e < out.size(); ++e) ASSERT_NEAR(out[e], ref[e], 1e-5) << e;
  }
}

// The prefetch distance is a speed choice only: every distance, 0 (none) to the largest, gives
// the default's result bit for bit, f16 and int8, at every level, across runs and evictions.
TEST(PagedAttentionTest, EveryPrefetchDistanceGivesTheSameBits) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> i8(-127, 127);
  for (const Shape sh : {Shape{4, 37, 16}, Shape{3, 21, 1}, Shape{4, 192, 16}}) {
    const int32_t hd = 64;
    const Cache c = MakeCache(hd, sh.block, sh.sinks, sh.window, rng);
    KvPoolLayout layout_i8 = c.layout;
    layout_i8.dtype = KvDtype::kInt8;
    std::vector<int8_t> pool_i8(layout_i8.layer_elems());
    for (int8_t& x : pool_i8) x = static_cast<int8_t>(i8(rng));
    std::vector<float> k_scale(c.layout.n_kv_heads * hd), v_scale(c.layout.n_kv_heads * hd);
    for (float& x : k_scale) x = 0.01f + 0.01f * (u(rng) + 1.0f);
    for (float& x : v_scale) x = 0.01f + 0.01f * (u(rng) + 1.0f);
    const int64_t full = sh.sinks + sh.window;
    for (int64_t p : {int64_t{5}, full + 1, 1000 * full + 13}) {
      const int32_t n_q = 3;
      std::vector<float> q(n_q * hd), q_sink(n_q * hd);
      for (float& x : q) x = 4 * u(rng);
      for (float& x : q_sink) x = 4 * u(rng);
      for (Isa isa : SupportedIsas()) {
        SCOPED_TRACE(::testing::Message() << IsaName(isa) << " S " << sh.sinks << " W " << sh.window
                                          << " B " << sh.block << " p " << p);
        ScopedIsa scoped(isa);
        std::vector<float> scratch(static_cast<size_t>(n_q) * (full + 2 * hd));
        std::vector<float> want(n_q * hd), want_i8(n_q * hd), got(n_q * hd);
        PagedAttentionGroup(c.layout, c.pool.data(), c.At(p), p, 1, n_q, q.data(), q_sink.data(),
                            0.125f, scratch.data(), want.data());
        PagedAttentionGroupI8(layout_i8, pool_i8.data(), k_scale.data(), v_scale.data(), c.At(p), p,
                              1, n_q, q.data(), q_sink.data(), 0.125f, scratch.data(),
                              want_i8.data());
        for (int32_t runs = 0; runs <= kMaxPrefetchRuns; ++runs) {
          PagedAttentionGroup(c.layout, c.pool.data(), c.At(p), p, 1, n_q, q.data(), q_sink.data(),
                              0.125f, scratch.data(), got.data(), runs);
          ASSERT_EQ(got, want) << "prefetch_runs " << runs;
          PagedAttentionGroupI8(layout_i8, pool_i8.data(), k_scale.data(), v_scale.data(), c.At(p),
                                p, 1, n_q, q.data(), q_sink.data(), 0.125f, scratch.data(),
                                got.data(), runs);
          ASSERT_EQ(got, want_i8) << "int8, prefetch_runs " << runs;
        }
      }
    }
  }
}

// The int8 cache: the same blocks holding int8 values with per-channel scales, against the
// float64 definition over the dequantized values (scale * int8), at every level. Scales differ
// per channel and between K and V, so folding them into the wrong side (or the wrong head's)
// fails; the second KV head's scales are other numbers.
TEST(PagedAttentionTest, Int8GroupMatchesReferenceOverDequantizedValues) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> i8(-127, 127);
  for (const Shape sh : {Shape{4, 37, 16}, Shape{3, 21, 1}, Shape{0, 29, 7}, Shape{4, 192, 16}}) {
    for (int32_t hd : {64, 40}) {
      Cache c = MakeCache(hd, sh.block, sh.sinks, sh.window, rng);
      c.layout.dtype = KvDtype::kInt8;
      std::vector<int8_t> pool(c.layout.layer_elems());
      for (int8_t& x : pool) x = static_cast<int8_t>(i8(rng));
      const int32_t n_heads = c.layout.n_kv_heads;
      std::vector<float> k_scale(n_heads * hd), v_scale(n_heads * hd);
      for (float& x : k_scale) x = 0.002f + 0.02f * (u(rng) + 1.0f);
      for (float& x : v_scale) x = 0.002f + 0.01f * (u(rng) + 1.0f);
      const ValueAt value = [&](int32_t kv, int64_t offset, int32_t d) {
        // offset's head: the layout puts (kv, head) runs of head_elems() in each block.
        const int64_t head = offset % c.layout.block_elems() / c.layout.head_elems() % n_heads;
        return double{(kv == 0 ? k_scale : v_scale)[head * hd + d]} * pool[offset];
      };
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const int64_t full = sh.sinks + sh.window;
      for (int64_t p : {int64_t{0}, full - 1, full, 1000 * full + 13}) {
        for (int32_t n_q : {1, 3, 4}) {
          for (bool shared_sink_query : {false, true}) {
            SCOPED_TRACE(::testing::Message()
                         << "S " << sh.sinks << " W " << sh.window << " B " << sh.block << " hd "
                         << hd << " p " << p << " n_q " << n_q << " shared " << shared_sink_query);
            const int32_t kv_head = 1;
            std::vector<float> q_window(n_q * hd), q_sink(n_q * hd);
            for (float& x : q_window) x = 4 * u(rng);
            for (float& x : q_sink) x = 4 * u(rng);
            if (shared_sink_query) q_sink = q_window;
            const std::vector<double> ref =
                ReferenceAttention(c, p, kv_head, n_q, q_window, q_sink, scale, value);
            for (Isa isa : SupportedIsas()) {
              SCOPED_TRACE(IsaName(isa));
              ScopedIsa scoped(isa);
              std::vector<float> scratch(static_cast<size_t>(n_q) * (full + 2 * hd) + 1, NAN);
              scratch.back() = 7.0f;
              std::vector<float> out(n_q * hd, NAN);
              PagedAttentionGroupI8(c.layout, pool.data(), k_scale.data(), v_scale.data(), c.At(p),
                                    p, kv_head, n_q, q_window.data(),
                                    shared_sink_query ? q_window.data() : q_sink.data(), scale,
                                    scratch.data(), out.data());
              ASSERT_EQ(scratch.back(), 7.0f);
              // Values are within 0.042 * 127 = 5.3; f32 rounding stays far under 1e-4 of them.
              for (int64_t e = 0; e < n_q * hd; ++e) {
                ASSERT_NEAR(out[e], ref[e], 1e-4) << "element " << e;
              }
            }
          }
        }
      }
    }
  }
}

// The key set of a table, as its helpers give it: the sinks [SinkBegin(p), VisibleSinks(p)),
// then the window [WindowStart(p), p].
std::vector<int64_t> VisibleKeysByHelpers(const SinkWindowTable& t, int64_t p) {
  std::vector<int64_t> keys;
  for (int64_t j = t.SinkBegin(p); j < t.VisibleSinks(p); ++j) keys.push_back(j);
  for (int64_t j = t.WindowStart(p); j <= p; ++j) keys.push_back(j);
  return keys;
}

SinkWindowTable TableOf(int32_t sinks, int32_t window, int32_t span) {
  SinkWindowTable t;
  t.sinks = sinks;
  t.window = window;
  t.block_size = 16;
  t.span = span;
  return t;
}

// Positions 0..399 and some far past eviction.
std::vector<int64_t> HelperPositions() {
  std::vector<int64_t> ps(400);
  std::iota(ps.begin(), ps.end(), int64_t{0});
  for (int64_t p : {int64_t{1000}, int64_t{4095}, int64_t{1} << 33}) ps.push_back(p);
  return ps;
}

// Span 0 (every model but Gemma 3's local layers): the StreamingLLM helpers as they always were.
TEST(SinkWindowTableTest, SpanZeroIsTheSinkAndWindowKeySet) {
  for (int32_t sinks : {0, 1, 4, 7}) {
    for (int32_t window : {1, 5, 37}) {
      const SinkWindowTable t = TableOf(sinks, window, 0);
      for (int64_t p : HelperPositions()) {
        SCOPED_TRACE(::testing::Message() << "S " << sinks << " W " << window << " p " << p);
        const int64_t start = p < sinks ? p + 1 : std::max<int64_t>(sinks, p - window + 1);
        ASSERT_EQ(t.SinkBegin(p), 0);
        ASSERT_EQ(t.VisibleSinks(p), std::min<int64_t>(sinks, p + 1));
        ASSERT_EQ(t.WindowStart(p), start);
        ASSERT_EQ(t.UnspannedWindowStart(p), start);
        ASSERT_EQ(t.CachePosition(p), p < sinks ? p : sinks + (p - start));
        ASSERT_EQ(VisibleKeysByHelpers(t, p), VisibleKeysByDefinition(p, sinks, window, 0));
      }
    }
  }
}

// A span N > 0 leaves exactly the keys j > p - N of the span-0 set, sinks and window alike, and
// never moves the query's cache position (its rotation against the sinks).
TEST(SinkWindowTableTest, SpanNarrowsTheKeysButNotTheCachePosition) {
  for (int32_t sinks : {0, 1, 4, 16}) {
    for (int32_t window : {1, 5, 37, 64}) {
      for (int32_t span : {1, 2, 3, 8, 37, 100}) {
        const SinkWindowTable t = TableOf(sinks, window, span);
        const SinkWindowTable wide = TableOf(sinks, window, 0);
        for (int64_t p : HelperPositions()) {
          SCOPED_TRACE(::testing::Message()
                       << "S " << sinks << " W " << window << " N " << span << " p " << p);
          ASSERT_EQ(VisibleKeysByHelpers(t, p), VisibleKeysByDefinition(p, sinks, window, span));
          ASSERT_LE(t.SinkBegin(p), t.VisibleSinks(p));
          ASSERT_EQ(t.VisibleSinks(p), wide.VisibleSinks(p));
          ASSERT_GE(t.WindowStart(p), wide.WindowStart(p));
          ASSERT_EQ(t.UnspannedWindowStart(p), wide.WindowStart(p));
          ASSERT_EQ(t.CachePosition(p), wide.CachePosition(p));
        }
      }
    }
  }
}

// The cases by hand. S = 4, W = 37, N = 8: p = 9 and 10 see some sinks, p = 11 none.
TEST(SinkWindowTableTest, SpanExamples) {
  const SinkWindowTable t = TableOf(4, 37, 8);
  EXPECT_EQ(t.SinkBegin(3), 0);  // p < S: sinks 0..3, no window
  EXPECT_EQ(t.WindowStart(3), 4);
  EXPECT_EQ(t.SinkBegin(7), 0);  // j > -1: all sinks, window 4..7
  EXPECT_EQ(t.WindowStart(7), 4);
  EXPECT_EQ(t.SinkBegin(9), 2);  // j > 1: sinks 2, 3; window 4..9
  EXPECT_EQ(t.WindowStart(9), 4);
  EXPECT_EQ(t.CachePosition(9), 9);
  EXPECT_EQ(t.SinkBegin(10), 3);  // sink 3 only
  EXPECT_EQ(t.SinkBegin(11), 4);  // no sinks; window 4..11
  EXPECT_EQ(t.VisibleSinks(11), 4);
  EXPECT_EQ(t.WindowStart(11), 4);
  EXPECT_EQ(t.WindowStart(12), 5);  // the span, not W, starts the window
  EXPECT_EQ(t.CachePosition(12), 12);
  EXPECT_EQ(t.WindowStart(100), 93);
  EXPECT_EQ(t.CachePosition(100), 40);  // S + W - 1, as without a span
  // N < S: before eviction the span scrolls over the sinks themselves.
  const SinkWindowTable few = TableOf(4, 37, 2);
  EXPECT_EQ(few.SinkBegin(2), 1);
  EXPECT_EQ(few.VisibleSinks(2), 3);
  EXPECT_EQ(few.WindowStart(2), 3);
  EXPECT_EQ(few.SinkBegin(4), 3);  // sink 3 and window 4..4
  EXPECT_EQ(few.WindowStart(4), 4);
  EXPECT_EQ(few.SinkBegin(5), 4);  // no sinks; window 4..5
  EXPECT_EQ(few.WindowStart(5), 4);
  EXPECT_EQ(few.WindowStart(6), 5);
  // N > W: the window is W's, the span only hides the sinks (all of them from p = 23).
  const SinkWindowTable wide = TableOf(4, 8, 20);
  EXPECT_EQ(wide.WindowStart(30), 23);
  EXPECT_EQ(wide.SinkBegin(21), 2);
  EXPECT_EQ(wide.SinkBegin(22), 3);
  EXPECT_EQ(wide.SinkBegin(23), 4);
  EXPECT_EQ(wide.CachePosition(30), 11);
}

// A table and span, and the positions it is queried at: around S and N, where the span starts
// hiding sinks (S + N - 3 .. S + N: some, then none), around eviction and far past it.
struct SpanCase {
  Shape shape;
  int32_t span;
};
constexpr SpanCase kSpanCases[] = {
    {{4, 37, 16}, 8},   // N < W; p = 9, 10 see some sinks, p = 11 none
    {{4, 37, 16}, 1},   // the query alone
    {{4, 37, 7}, 20},   // N < W, blocks of 7
    {{4, 37, 16}, 37},  // N = W: the window is W's; sinks go from p = 40
    {{4, 37, 16}, 60},  // N > S + W: only the sinks, from p = 60
    {{3, 21, 1}, 5},    // blocks of 1
    {{3, 21, 1}, 2},    // N < S
    {{16, 37, 16}, 8},  // N < S: the span scrolls over the sinks before eviction
    {{0, 29, 16}, 10},  // no sinks
    {{4, 192, 16}, 64}, {{4, 192, 16}, 512},  // Gemma 3's span, past S + W
};

std::vector<int64_t> SpanPositions(const SpanCase& sc) {
  const int64_t s = sc.shape.sinks, n = sc.span, full = s + sc.shape.window;
  std::vector<int64_t> ps;
  for (int64_t p : {int64_t{0}, int64_t{1}, s - 1, s, n - 1, n, n + 1, s + n - 3, s + n - 2,
                    s + n - 1, s + n, full - 1, full, full + 1, 1000 * full + 13}) {
    if (p >= 0 && std::find(ps.begin(), ps.end(), p) == ps.end()) ps.push_back(p);
  }
  return ps;
}

// What a case covers, counted so the test can say it covered it.
struct SpanCoverage {
  int partial_sinks = 0;   // some of the sinks the span-0 query sees, not all
  int no_sinks = 0;        // none of them (the span-0 query sees some)
  int shorter_window = 0;  // a window the span shortens
  int unchanged = 0;       // the same keys as span 0

  void Count(const SinkWindowTable& t, int64_t p) {
    const int64_t sinks = t.VisibleSinks(p), first = t.SinkBegin(p);
    if (first > 0 && first < sinks) ++partial_sinks;
    if (sinks > 0 && first == sinks) ++no_sinks;
    if (t.WindowStart(p) > t.UnspannedWindowStart(p)) ++shorter_window;
    if (first == 0 && t.WindowStart(p) == t.UnspannedWindowStart(p)) ++unchanged;
  }
  void ExpectAll() const {
    EXPECT_GT(partial_sinks, 0);
    EXPECT_GT(no_sinks, 0);
    EXPECT_GT(shorter_window, 0);
    EXPECT_GT(unchanged, 0);
  }
};

// f16 with a span: the group against the float64 definition at every level and, at the
// portable level, bit for bit against per-head calls; where the span reaches no key (N > p) bit
// for bit the span-0 result. Group sizes 1 to 8, both ways of planning the window blocks.
TEST(PagedAttentionTest, SpanGroupMatchesReference) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  SpanCoverage coverage;
  for (const SpanCase& sc : kSpanCases) {
    const Shape sh = sc.shape;
    for (int32_t hd : {64, 40}) {
      const Cache c = MakeCache(hd, sh.block, sh.sinks, sh.window, rng);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const int64_t full = sh.sinks + sh.window;
      for (int64_t p : SpanPositions(sc)) {
        for (bool tight : {false, true}) {
          const SinkWindowTable table = c.At(p, sc.span, tight);
          if (hd == 64 && !tight) coverage.Count(table, p);
          for (int32_t n_q : {1, 3, 4, 8}) {
            SCOPED_TRACE(::testing::Message()
                         << "S " << sh.sinks << " W " << sh.window << " B " << sh.block << " N "
                         << sc.span << " hd " << hd << " p " << p << " tight " << tight << " n_q "
                         << n_q);
            const int32_t kv_head = 1;
            std::vector<float> q_window(n_q * hd), q_sink(n_q * hd);
            for (float& x : q_window) x = 4 * u(rng);
            for (float& x : q_sink) x = 4 * u(rng);
            const std::vector<double> ref =
                ReferenceAttention(c, p, kv_head, n_q, q_window, q_sink, scale, {}, &table);
            std::vector<float> heads(n_q * hd);
            std::vector<float> scratch(static_cast<size_t>(n_q) * full + 1);
            {
              ScopedIsa portable(Isa::kPortable);
              for (int32_t i = 0; i < n_q; ++i) {
                PagedAttentionHead(c.layout, c.pool.data(), table, p, kv_head, &q_window[i * hd],
                                   &q_sink[i * hd], scale, scratch.data(), &heads[i * hd]);
              }
            }
            for (Isa isa : SupportedIsas()) {
              SCOPED_TRACE(IsaName(isa));
              ScopedIsa scoped(isa);
              std::vector<float> out(n_q * hd + 1, NAN);
              out[n_q * hd] = 7.0f;
              scratch.back() = 7.0f;
              PagedAttentionGroup(c.layout, c.pool.data(), table, p, kv_head, n_q, q_window.data(),
                                  q_sink.data(), scale, scratch.data(), out.data());
              ASSERT_EQ(out[n_q * hd], 7.0f);
              ASSERT_EQ(scratch.back(), 7.0f);
              for (int64_t e = 0; e < n_q * hd; ++e) {
                if (isa == Isa::kPortable) {
                  ASSERT_EQ(out[e], heads[e]) << "element " << e;
                }
                ASSERT_NEAR(out[e], ref[e], 1e-5) << "element " << e;
              }
              if (sc.span > p) {
                std::vector<float> unspanned(n_q * hd + 1, NAN);
                unspanned[n_q * hd] = 7.0f;
                PagedAttentionGroup(c.layout, c.pool.data(), c.At(p), p, kv_head, n_q,
                                    q_window.data(), q_sink.data(), scale, scratch.data(),
                                    unspanned.data());
                ASSERT_EQ(out, unspanned) << "a span that hides no key changed the result";
              }
            }
          }
        }
      }
    }
  }
  coverage.ExpectAll();
}

// int8 with a span: the group against the float64 definition over the dequantized values, at
// every level, with q_sink its own or q_window's.
TEST(PagedAttentionTest, SpanInt8GroupMatchesReference) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> i8(-127, 127);
  SpanCoverage coverage;
  for (const SpanCase& sc : kSpanCases) {
    const Shape sh = sc.shape;
    const int32_t hd = 64;
    Cache c = MakeCache(hd, sh.block, sh.sinks, sh.window, rng);
    c.layout.dtype = KvDtype::kInt8;
    std::vector<int8_t> pool(c.layout.layer_elems());
    for (int8_t& x : pool) x = static_cast<int8_t>(i8(rng));
    const int32_t n_heads = c.layout.n_kv_heads;
    std::vector<float> k_scale(n_heads * hd), v_scale(n_heads * hd);
    for (float& x : k_scale) x = 0.002f + 0.02f * (u(rng) + 1.0f);
    for (float& x : v_scale) x = 0.002f + 0.01f * (u(rng) + 1.0f);
    const ValueAt value = [&](int32_t kv, int64_t offset, int32_t d) {
      const int64_t head = offset % c.layout.block_elems() / c.layout.head_elems() % n_heads;
      return double{(kv == 0 ? k_scale : v_scale)[head * hd + d]} * pool[offset];
    };
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int64_t full = sh.sinks + sh.window;
    for (int64_t p : SpanPositions(sc)) {
      for (bool tight : {false, true}) {
        const SinkWindowTable table = c.At(p, sc.span, tight);
        if (!tight) coverage.Count(table, p);
        for (int32_t n_q : {1, 3, 4}) {
          for (bool shared_sink_query : {false, true}) {
            SCOPED_TRACE(::testing::Message()
                         << "S " << sh.sinks << " W " << sh.window << " B " << sh.block << " N "
                         << sc.span << " p " << p << " tight " << tight << " n_q " << n_q
                         << " shared " << shared_sink_query);
            const int32_t kv_head = 1;
            std::vector<float> q_window(n_q * hd), q_sink(n_q * hd);
            for (float& x : q_window) x = 4 * u(rng);
            for (float& x : q_sink) x = 4 * u(rng);
            if (shared_sink_query) q_sink = q_window;
            const std::vector<double> ref =
                ReferenceAttention(c, p, kv_head, n_q, q_window, q_sink, scale, value, &table);
            for (Isa isa : SupportedIsas()) {
              SCOPED_TRACE(IsaName(isa));
              ScopedIsa scoped(isa);
              std::vector<float> scratch(static_cast<size_t>(n_q) * (full + 2 * hd) + 1, NAN);
              scratch.back() = 7.0f;
              std::vector<float> out(n_q * hd, NAN);
              PagedAttentionGroupI8(c.layout, pool.data(), k_scale.data(), v_scale.data(), table, p,
                                    kv_head, n_q, q_window.data(),
                                    shared_sink_query ? q_window.data() : q_sink.data(), scale,
                                    scratch.data(), out.data());
              ASSERT_EQ(scratch.back(), 7.0f);
              for (int64_t e = 0; e < n_q * hd; ++e) {
                ASSERT_NEAR(out[e], ref[e], 1e-4) << "element " << e;
              }
            }
          }
        }
      }
    }
  }
  coverage.ExpectAll();
}

// WriteKvI8 stores round(x / scale) saturated to [-127, 127] in the slot of position t, per
// channel scale, K and V each with their own, and touches nothing else, at every level.
TEST(PagedAttentionTest, WriteKvI8RoundsSaturatesAndPlacesEachValue) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Cache c = MakeCache(40, 7, 4, 30, rng);
  c.layout.dtype = KvDtype::kInt8;
  const int32_t hd = 40, heads = c.layout.n_kv_heads;
  std::vector<int8_t> pool(c.layout.layer_elems(), 55);
  std::vector<float> k_inv(heads * hd), v_inv(heads * hd), k(heads * hd), v(heads * hd);
  for (float& x : k_inv) x = 50.0f + 100.0f * (u(rng) + 1.0f);
  for (float& x : v_inv) x = 20.0f + 50.0f * (u(rng) + 1.0f);
  for (float& x : k) x = 1.2f * u(rng);  // some saturate
  for (float& x : v) x = 1.2f * u(rng);
  k_inv[3] = k_inv[4] = 128.0f;  // exact ties: round to even
  k[3] = 0.5f / 128.0f;          // -> 0
  k[4] = 1.5f / 128.0f;          // -> 2
  v[7] = NAN;                    // a broken model's value: stored as -127, never UB
  const int64_t t = 40;          // in the window, past block 0 of it
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsa scoped(isa);
    std::fill(pool.begin(), pool.end(), int8_t{55});
    WriteKvI8(c.layout, pool.data(), k_inv.data(), v_inv.data(), c.At(t), t, k.data(), v.data());
    int32_t block, slot;
    c.At(t).Locate(t, &block, &slot);
    std::vector<bool> written(pool.size(), false);
    for (int32_t kv = 0; kv < 2; ++kv) {
      for (int32_t h = 0; h < heads; ++h) {
        for (int32_t d = 0; d < hd; ++d) {
          const int64_t at = c.layout.Offset(block, kv, h, slot) + d;
          const float x = (kv == 0 ? k : v)[h * hd + d] * (kv == 0 ? k_inv : v_inv)[h * hd + d];
          const double want =
              std::isnan(x) ? -127.0 : std::clamp(std::nearbyint(double{x}), -127.0, 127.0);
          ASSERT_EQ(pool[at], static_cast<int8_t>(want)) << "kv " << kv << " h " << h << " d " << d;
          written[at] = true;
        }
      }
    }
    EXPECT_EQ(pool[c.layout.Offset(block, 0, 0, slot) + 3], 0);
    EXPECT_EQ(pool[c.layout.Offset(block, 0, 0, slot) + 4], 2);
    EXPECT_EQ(pool[c.layout.Offset(block, 1, 0, slot) + 7], -127);
    for (size_t e = 0; e < pool.size(); ++e) {
      if (!written[e]) {
        ASSERT_EQ(pool[e], 55) << "element " << e << " was touched";
      }
    }
  }
}

}  // namespace
}  // namespace streamd::kernels::cpu
