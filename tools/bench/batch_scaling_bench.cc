// Machine ceilings for docs/PERFORMANCE.md: what one decode step of SmolLM2-135M's matrix
// products costs per token as the batch grows from 1 to 64 tokens (one token per session,
// as in continuous batching). Single thread, random weights of the model's real shapes and
// types (30 layers of Q4_1 q/k/v/o/gate/up/down, the tied Q8_0 head), each matrix its own
// buffer so the ~96 MB working set streams from cache/DRAM as in the engine.
//
// Counters (per CPU second of the benchmark thread, so noisy neighbours matter less):
//   tok/s    = tokens per second of products alone; the best a decode step can do
//   GFLOP/s  = 2 * weights * tokens per second
// The ratio tok/s(n) / tok/s(1) is the most continuous batching can gain over one session
// when the products dominate the step (attention and the rest only add per-token work).
// Run: batch_scaling_bench [--benchmark_repetitions=3]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace streamd::kernels::cpu {
namespace {

struct Matrix {
  WeightType type;
  int64_t rows, k;
  std::vector<uint8_t> w;
};

// Random weights; bytes below 0x40 keep every f16 scale small and finite.
Matrix RandomMatrix(WeightType type, int64_t rows, int64_t k, std::mt19937& rng) {
  Matrix m{type, rows, k, std::vector<uint8_t>(WeightRowBytes(type, k) * rows)};
  for (uint8_t& b : m.w) b = static_cast<uint8_t>(rng() & 0x3f);
  return m;
}

const std::vector<Matrix>& ModelMatrices() {
  static const std::vector<Matrix> mats = [] {
    std::mt19937 rng(1);
    std::vector<Matrix> out;
    for (int layer = 0; layer < 30; ++layer) {
      for (auto [rows, k] : {std::pair<int64_t, int64_t>{576, 576},  // q
                             {192, 576},                             // k
                             {192, 576},                             // v
                             {576, 576},                             // o
                             {1536, 576},                            // gate
                             {1536, 576},                            // up
                             {576, 1536}}) {                         // down
        out.push_back(RandomMatrix(WeightType::kQ4_1, rows, k, rng));
      }
    }
    out.push_back(RandomMatrix(WeightType::kQ8_0, 49152, 576, rng));  // output head
    return out;
  }();
  return mats;
}

// Arg: tokens per step.
void BM_DecodeStepProducts(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<Matrix>& mats = ModelMatrices();
  std::vector<float> x(static_cast<size_t>(n) * 1536, 0.25f);
  std::vector<uint8_t> xq(ActivationBytes(WeightType::kQ4_1, n, 1536));
  std::vector<float> out(static_cast<size_t>(n) * 49152);
  double flops = 0;
  for (const Matrix& m : mats) flops += 2.0 * static_cast<double>(m.rows * m.k * n);
  for (auto _ : state) {
    for (const Matrix& m : mats) {
      PrepareActivations(m.type, x.data(), m.k, m.k, 0, n, xq.data());
      MatMulRows(m.type, m.w.data(), WeightRowBytes(m.type, m.k), m.k, xq.data(), n, out.data(),
                 m.rows, 0, m.rows);
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(IsaName(ActiveIsa()));
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeStepProducts)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace streamd::kernels::cpu
