// Embedding, AddRmsNorm, RoPE with the K/V append, SwiGLU and the fill/convert helpers against
// plain CPU references (float64 where it matters) on fresh random inputs; outputs poisoned first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cuda/kernels.h"
#include "tests/support/cuda_test_util.h"

namespace streamd::kernels::cuda {
namespace {

using testing::DeviceArray;

std::vector<float> Random(size_t n, uint64_t seed, float a = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<double> HalvesToDouble(const std::vector<uint16_t>& h) {
  std::vector<double> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = HalfToFloat(h[i]);
  return out;
}

TEST(EmbeddingTest, RowsOfTheTable) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const int32_t vocab = 1003, dim = 576, n = 19;
  std::vector<uint16_t> table(static_cast<size_t>(vocab) * dim);
  const std::vector<float> values = Random(table.size(), 1);
  for (size_t i = 0; i < table.size(); ++i) table[i] = FloatToHalf(values[i]);
  std::vector<int32_t> tokens(n);
  std::mt19937 rng(2);
  for (int32_t& t : tokens) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
  tokens[0] = vocab - 1;
  DeviceArray<uint16_t> d_table(table);
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<float> out(static_cast<size_t>(n) * dim);
  ASSERT_CUDA_OK(out.Poison());
  ASSERT_CUDA_OK(EmbeddingLookup(d_table.get(), d_tokens.get(), n, dim, out.get(), nullptr));
  const std::vector<float> got = out.Download();
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t i = 0; i < dim; ++i) {
      ASSERT_EQ(got[t * dim + i], HalfToFloat(table[static_cast<size_t>(tokens[t]) * dim + i]));
    }
  }
}

TEST(AddRmsNormTest, ResidualAddThenNormWithPackedRows) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  for (int32_t dim : {576, 4096, 100}) {
    const int32_t n = 7;
    std::vector<float> x = Random(static_cast<size_t>(n) * dim, 3, 2.0f);
    const std::vector<float> delta = Random(x.size(), 4);
    const std::vector<float> weight = Random(dim, 5);
    const std::vector<int32_t> rows = {-1, 0, -1, 1, 2, -1, 3};
    DeviceArray<float> d_x(x), d_delta(delta), d_w(weight);
    DeviceArray<int32_t> d_rows(rows);
    DeviceArray<uint16_t> out(static_cast<size_t>(4) * dim);
    ASSERT_CUDA_OK(out.Poison());
    ASSERT_CUDA_OK(AddRmsNorm(d_x.get(), d_delta.get(), d_w.get(), 1e-5f, n, dim, d_rows.get(),
                              out.get(), nullptr));
    const std::vector<float> new_x = d_x.Download();
    const std::vector<double> got = HalvesToDouble(out.Download());
    std::vector<double> ref(got.size()), ref_x(x.size()), got_x(new_x.begin(), new_x.end());
    for (int32_t t = 0; t < n; ++t) {
      double sq = 0;
      for (int32_t i = 0; i < dim; ++i) {
        ref_x[t * dim + i] = static_cast<double>(x[t * dim + i]) + delta[t * dim + i];
        sq += ref_x[t * dim + i] * ref_x[t * dim + i];
      }
      const double inv = 1.0 / std::sqrt(sq / dim + 1e-5);
      if (rows[t] < 0) continue;
      for (int32_t i = 0; i < dim; ++i) {
        ref[rows[t] * dim + i] = ref_x[t * dim + i] * inv * weight[i];
      }
    }
    EXPECT_LT(testing::RelativeError(got_x, ref_x), testing::kF32Tolerance) << "dim " << dim;
    EXPECT_LT(testing::RelativeError(got, ref), testing::kF16Tolerance) << "dim " << dim;
  }
}

// The float64 rotation of pair (in[0], in[1]) by position p at frequency inv_freq.
void Rotate(const float* in, double* out, int64_t p, double inv_freq) {
  const double a = std::fmod(static_cast<double>(p) * inv_freq, 2.0 * std::numbers::pi);
  const double c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
  out[0] = in[0] * c - in[1] * s;
  out[1] = in[0] * s + in[1] * c;
}

std::vector<double> InvFreq(int32_t head_dim) {
  std::vector<double> f(head_dim / 2);
  for (int32_t i = 0; i < head_dim / 2; ++i) f[i] = std::pow(100000.0, -2.0 * i / head_dim);
  return f;
}

// Five tokens of five sessions (each its own blocks) at positions up to 4e9.
TEST(RopeAndWriteKvTest, WindowSinkAndKeyRotationsAtLargePositions) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const int32_t n_heads = 9, n_kv = 3, hd = 64, n = 5, B = 7;
  const int64_t ld = (n_heads + 2 * n_kv) * hd;
  std::vector<float> qkv = Random(static_cast<size_t>(n) * ld, 6);
  const std::vector<int64_t> pos = {0, 1, 1023, 123456789, 4000000000LL};
  const std::vector<int64_t> cache_pos = {0, 1, 1023, 1023, 1020};
  const std::vector<double> inv_freq = InvFreq(hd);
  // Session t: S = 4 (one sink block), W = 20, R = 5 ring blocks: ids 6t .. 6t + 5.
  const KvPoolLayout layout{6 * n, 1, n_kv, hd, B};
  std::vector<int32_t> ids(6 * n);
  for (int32_t i = 0; i < 6 * n; ++i) ids[i] = (i * 7) % (6 * n);  // scattered, a permutation
  DeviceArray<int32_t> d_ids(ids);
  std::vector<SinkWindowTable> host, dev;
  for (int32_t t = 0; t < n; ++t) {
    host.push_back({ids.data() + 6 * t, ids.data() + 6 * t + 1, 4, 20, 5, B});
    dev.push_back({d_ids.get() + 6 * t, d_ids.get() + 6 * t + 1, 4, 20, 5, B});
  }
  std::vector<int32_t> seq(n);
  for (int32_t t = 0; t < n; ++t) seq[t] = t;
  DeviceArray<float> d_qkv(qkv), q_sink(static_cast<size_t>(n) * n_heads * hd);
  DeviceArray<int64_t> d_pos(pos), d_cache(cache_pos);
  DeviceArray<double> d_freq(inv_freq);
  DeviceArray<SinkWindowTable> tables(dev);
  DeviceArray<int32_t> seq_of(seq);
  DeviceArray<uint16_t> pool(layout.layer_elems());
  ASSERT_CUDA_OK(q_sink.Poison());
  ASSERT_CUDA_OK(pool.Poison());
  ASSERT_CUDA_OK(RopeAndWriteKv(d_qkv.get(), ld, n, n_heads, hd, d_pos.get(), d_cache.get(),
                                d_freq.get(), q_sink.get(),
                                {layout, pool.get(), tables.get(), seq_of.get()}, nullptr));
  const std::vector<float> got = d_qkv.Download();
  const std::vector<float> got_sink = q_sink.Download();
  const std::vector<uint16_t> got_pool = pool.Download();
  std::vector<double> ref(qkv.begin(), qkv.end()), ref_sink(got_sink.size());
  std::vector<double> got_k, ref_k;
  for (int32_t t = 0; t < n; ++t) {
    int32_t block, slot;
    host[t].Locate(pos[t], &block, &slot);
    for (int32_t i = 0; i < hd / 2; ++i) {
      for (int32_t h = 0; h < n_heads; ++h) {
        const float* in = &qkv[t * ld + h * hd + 2 * i];
        Rotate(in, &ref[t * ld + h * hd + 2 * i], pos[t], inv_freq[i]);
        Rotate(in, &ref_sink[(t * n_heads + h) * hd + 2 * i], cache_pos[t], inv_freq[i]);
      }
      for (int32_t h = 0; h < n_kv; ++h) {
        double rk[2];
        Rotate(&qkv[t * ld + (n_heads + h) * hd + 2 * i], rk, pos[t], inv_freq[i]);
        for (int32_t j = 0; j < 2; ++j) {
          ref_k.push_back(rk[j]);
          got_k.push_back(HalfToFloat(got_pool[layout.Offset(block, 0, h, slot) + 2 * i + j]));
          // V is not rotated: exactly the f16 of the input.
          EXPECT_EQ(got_pool[layout.Offset(block, 1, h, slot) + 2 * i + j],
                    FloatToHalf(qkv[t * ld + (n_heads + n_kv + h) * hd + 2 * i + j]));
        }
      }
    }
  }
  EXPECT_LT(testing::RelativeError(std::vector<double>(got.begin(), got.end()), ref),
            testing::kF32Tolerance)
      << "q (k and v columns of qkv must be left as they were)";
  EXPECT_LT(testing::RelativeError(std::vector<double>(got_sink.begin(), got_sink.end()), ref_sink),
            testing::kF32Tolerance);
  EXPECT_LT(testing::RelativeError(got_k, ref_k), testing::kF16Tolerance) << "stored keys";
}

TEST(SwiGluTest, SiluGateTimesUp) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const int32_t n = 9, ffn = 1536;
  const std::vector<float> gu = Random(static_cast<size_t>(n) * 2 * ffn, 7, 6.0f);
  DeviceArray<float> d_gu(gu);
  DeviceArray<uint16_t> out(static_cast<size_t>(n) * ffn);
  ASSERT_CUDA_OK(out.Poison());
  ASSERT_CUDA_OK(SwiGlu(d_gu.get(), n, ffn, out.get(), nullptr));
  const std::vector<double> got = HalvesToDouble(out.Download());
  std::vector<double> ref(got.size());
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t i = 0; i < ffn; ++i) {
      const double g = gu[t * 2 * ffn + i], u = gu[t * 2 * ffn + ffn + i];
      ref[t * ffn + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  EXPECT_LT(testing::RelativeError(got, ref), testing::kF16Tolerance);
}

TEST(RopeAndWriteKvTest, TokensLandInTheirBlocksAndSlotsAndNowhereElse) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const KvPoolLayout layout{12, 1, 3, 64, 7};
  // One session, S = 4 (one sink block), W = 20, R = 5: positions far past the window wrap.
  const std::vector<int32_t> ids = {9, 2, 11, 0, 5, 7};
  DeviceArray<int32_t> d_ids(ids);
  SinkWindowTable host{ids.data(), ids.data() + 1, 4, 20, 5, 7};
  SinkWindowTable dev{d_ids.get(), d_ids.get() + 1, 4, 20, 5, 7};
  const std::vector<int64_t> pos = {0, 3, 4, 10, 1000, 1001, 1002};
  std::vector<int64_t> cache_pos;
  for (int64_t p : pos) cache_pos.push_back(host.CachePosition(p));
  const int32_t n = static_cast<int32_t>(pos.size());
  const int64_t ld = (4 + 2 * 3) * 64;  // q | k | v rows of a 4-head model
  const std::vector<float> qkv = Random(static_cast<size_t>(n) * ld, 8);
  const std::vector<double> inv_freq = InvFreq(64);
  DeviceArray<float> d_qkv(qkv), q_sink(static_cast<size_t>(n) * 4 * 64);
  DeviceArray<SinkWindowTable> tables(std::vector<SinkWindowTable>{dev});
  DeviceArray<int32_t> seq_of(std::vector<int32_t>(n, 0));
  DeviceArray<int64_t> d_pos(pos), d_cache(cache_pos);
  DeviceArray<double> d_freq(inv_freq);
  DeviceArray<uint16_t> pool(layout.layer_elems());
  ASSERT_CUDA_OK(pool.Poison());
  ASSERT_CUDA_OK(RopeAndWriteKv(d_qkv.get(), ld, n, 4, 64, d_pos.get(), d_cache.get(), d_freq.get(),
                                q_sink.get(), {layout, pool.get(), tables.get(), seq_of.get()},
                                nullptr));
  const std::vector<uint16_t> got = pool.Download();
  std::vector<double> got_k, ref_k;
  for (int32_t t = 0; t < n; ++t) {
    int32_t block, slot;
    host.Locate(pos[t], &block, &slot);
    for (int32_t h = 0; h < 3; ++h) {
      for (int32_t d = 0; d < 64; d += 2) {
        double rk[2];
        Rotate(&qkv[t * ld + (4 + h) * 64 + d], rk, pos[t], inv_freq[d / 2]);
        for (int32_t j = 0; j < 2; ++j) {
          ref_k.push_back(rk[j]);
          got_k.push_back(HalfToFloat(got[layout.Offset(block, 0, h, slot) + d + j]));
          EXPECT_EQ(got[layout.Offset(block, 1, h, slot) + d + j],
                    FloatToHalf(qkv[t * ld + (7 + h) * 64 + d + j]));
        }
      }
    }
  }
  EXPECT_LT(testing::RelativeError(got_k, ref_k), testing::kF16Tolerance);
  // Nothing but those n tokens' K and V was written (poison is all ones: f16 NaN).
  const size_t written = static_cast<size_t>(
      std::count_if(got.begin(), got.end(), [](uint16_t h) { return h != 0xffff; }));
  EXPECT_EQ(written, static_cast<size_t>(n) * 2 * 3 * 64);
}

TEST(RopeAndWriteKvTest, RejectsShapesItCannotServe) {
  const KvPoolLayout layout{4, 1, 2, 64, 16};
  const KvAppend kv{layout, nullptr, nullptr, nullptr};
  const int64_t ld = (4 + 2 * 2) * 64;
  EXPECT_EQ(RopeAndWriteKv(nullptr, ld, 1, 4, 63, nullptr, nullptr, nullptr, nullptr, kv, nullptr),
            cudaErrorInvalidValue);  // odd head_dim
  EXPECT_EQ(RopeAndWriteKv(nullptr, ld, 1, 4, 128, nullptr, nullptr, nullptr, nullptr, kv, nullptr),
            cudaErrorInvalidValue);  // the pool's head_dim differs
  EXPECT_EQ(
      RopeAndWriteKv(nullptr, ld - 2, 1, 4, 64, nullptr, nullptr, nullptr, nullptr, kv, nullptr),
      cudaErrorInvalidValue);  // rows too short for q | k | v
  EXPECT_EQ(RopeAndWriteKv(nullptr, ld, 0, 4, 64, nullptr, nullptr, nullptr, nullptr, kv, nullptr),
            cudaErrorInvalidValue);  // no tokens
}

TEST(FillTest, UniformIsBoundedReproducibleAndCentred) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t n = 1 << 20;
  DeviceArray<uint16_t> a(n), b(n);
  ASSERT_CUDA_OK(FillUniformF16(a.get(), n, 0.25f, 42, nullptr));
  ASSERT_CUDA_OK(FillUniformF16(b.get(), n, 0.25f, 42, nullptr));
  const std::vector<uint16_t> ha = a.Download(), hb = b.Download();
  EXPECT_EQ(ha, hb);
  double sum = 0, sq = 0;
  for (uint16_t h : ha) {
    const double v = HalfToFloat(h);
    ASSERT_LE(std::fabs(v), 0.25);
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 1e-3);
  EXPECT_NEAR(sq / n, 0.25 * 0.25 / 3.0, 1e-3);  // variance of U(-a, a) = a^2 / 3
  DeviceArray<float> f(1000);
  DeviceArray<uint16_t> h(1000);
  ASSERT_CUDA_OK(FillF32(f.get(), 1000, 1.5f, nullptr));
  ASSERT_CUDA_OK(ConvertF32ToF16(f.get(), 1000, h.get(), nullptr));
  for (uint16_t x : h.Download()) ASSERT_EQ(HalfToFloat(x), 1.5f);
}

}  // namespace
}  // namespace streamd::kernels::cuda
