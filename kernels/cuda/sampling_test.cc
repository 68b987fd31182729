// Argmax and top-k / top-p sampling on the device against float64 CPU references on fresh
// random logits (with planted ties and -inf entries); the draws use given uniforms, so both
// sides make the same choice unless a uniform falls within 1e-6 of a cumulative boundary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/kernels.h"
#include "tests/support/cuda_test_util.h"

namespace streamd::kernels::cuda {
namespace {

using testing::DeviceArray;

std::vector<float> Logits(int32_t rows, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(rows) * vocab);
  for (float& x : v) x = g(rng);
  for (int32_t r = 0; r < rows; ++r) {
    float* row = &v[static_cast<size_t>(r) * vocab];
    // Ties at the top (the first index must win) and masked entries.
    const float top = *std::max_element(row, row + vocab) + 1.0f;
    row[(r * 7919) % vocab] = top;
    row[(r * 7919 + 13) % vocab] = top;
    row[(r * 31) % vocab] = -INFINITY;
  }
  return v;
}

// Returns the pick, or -1 when `uniform` is too close to a boundary to call.
int32_t ReferenceSample(const float* row, int32_t vocab, const SampleParams& p) {
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  const int32_t k = std::min(p.top_k, vocab);
  std::vector<double> w(k);
  double total = 0;
  for (int32_t c = 0; c < k; ++c)
    total += w[c] = std::exp((row[idx[c]] - row[idx[0]]) / p.temperature);
  double kept = 0;
  int32_t n = 0;
  while (n < k) {
    kept += w[n++];
    if (kept >= p.top_p * total) break;
  }
  const double target = p.uniform * kept;
  double cum = 0;
  for (int32_t c = 0; c < n; ++c) {
    cum += w[c];
    if (std::fabs(cum - target) < 1e-6 * kept) return -1;
    if (cum > target) return idx[c];
  }
  return idx[n - 1];
}

TEST(ArgmaxTest, FirstIndexOfTheMaximum) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  for (int32_t vocab : {49152, 128256, 5}) {
    const int32_t rows = 37;
    const std::vector<float> logits = Logits(rows, vocab, vocab);
    DeviceArray<float> d(logits);
    DeviceArray<int32_t> out(rows);
    ASSERT_CUDA_OK(out.Poison());
    ASSERT_CUDA_OK(ArgmaxRows(d.get(), rows, vocab, out.get(), nullptr));
    const std::vector<int32_t> got = out.Download();
    for (int32_t r = 0; r < rows; ++r) {
      const float* row = &logits[static_cast<size_t>(r) * vocab];
      EXPECT_EQ(got[r], std::max_element(row, row + vocab) - row) << "row " << r;
    }
  }
}

TEST(SampleTopKTopPTest, MatchesTheReferenceDraw) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  const int32_t rows = 64, vocab = 49152;
  const std::vector<float> logits = Logits(rows, vocab, 11);
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<SampleParams> params(rows);
  const int32_t ks[] = {1, 2, 40, 50, 1024, 7};
  const float ps[] = {1.0f, 0.9f, 0.5f, 0.01f};
  for (int32_t r = 0; r < rows; ++r) {
    params[r] = {0.3f + 1.2f * u(rng), ks[r % 6], ps[r % 4], std::min(u(rng), 0.999f)};
    ASSERT_EQ(SampleCanImplement(params[r]), nullptr);
  }
  DeviceArray<float> d(logits);
  DeviceArray<SampleParams> d_params(params);
  DeviceArray<int32_t> out(rows);
  ASSERT_CUDA_OK(out.Poison());
  ASSERT_CUDA_OK(SampleTopKTopP(d.get(), rows, vocab, d_params.get(), out.get(), nullptr));
  const std::vector<int32_t> got = out.Download();
  int32_t compared = 0;
  for (int32_t r = 0; r < rows; ++r) {
    const int32_t want = ReferenceSample(&logits[static_cast<size_t>(r) * vocab], vocab, params[r]);
    if (want < 0) continue;
    ++compared;
    EXPECT_EQ(got[r], want) << "row " << r << " top_k " << params[r].top_k << " top_p "
                            << params[r].top_p << " u " << params[r].uniform;
  }
  EXPECT_GT(compared, rows / 2);
}

TEST(SampleCanImplementTest, RejectsOutOfRangeParameters) {
  EXPECT_NE(SampleCanImplement({0.0f, 40, 1.0f, 0.5f}), nullptr);
  EXPECT_NE(SampleCanImplement({1.0f, 0, 1.0f, 0.5f}), nullptr);
  EXPECT_NE(SampleCanImplement({1.0f, kMaxTopK + 1, 1.0f, 0.5f}), nullptr);
  EXPECT_NE(SampleCanImplement({1.0f, 40, 0.0f, 0.5f}), nullptr);
  EXPECT_NE(SampleCanImplement({1.0f, 40, 1.0f, 1.0f}), nullptr);
  EXPECT_EQ(SampleCanImplement({1.0f, 40, 1.0f, 0.0f}), nullptr);
}

}  // namespace
}  // namespace streamd::kernels::cuda
