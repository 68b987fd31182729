// Single-threaded MatMulRows at SmolLM2-135M's shapes: decode (1 token) and prefill (64, 512).
// Counters: weight GB/s (weight bytes read once per call / time) and GFLOP/s (2 rows k tokens).
// Run: kernels_cpu_bench [--benchmark_filter=Q4_1]
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu {
namespace {

// Random bytes with every 16-bit scale replaced by a sane half; valid for all block types.
std::vector<uint8_t> RandomWeights(WeightType type, int64_t rows, int64_t k) {
  const size_t row_bytes = WeightRowBytes(type, k);
  std::vector<uint8_t> w(row_bytes * rows);
  std::mt19937 rng(42);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  auto set_half = [&](size_t offset) {
    const uint16_t h = FloatToHalf(0.01f + static_cast<float>(rng() % 100) * 1e-4f);
    std::memcpy(w.data() + offset, &h, 2);
  };
  for (int64_t r = 0; r < rows; ++r) {
    const size_t base = r * row_bytes;
    switch (type) {
      case WeightType::kQ4_0:
        for (int64_t b = 0; b < k / 32; ++b) set_half(base + b * sizeof(BlockQ4_0));
        break;
      case WeightType::kQ4_1:
        for (int64_t b = 0; b < k / 32; ++b) {
          set_half(base + b * sizeof(BlockQ4_1));
          set_half(base + b * sizeof(BlockQ4_1) + 2);
        }
        break;
      case WeightType::kQ5_1:
        for (int64_t b = 0; b < k / 32; ++b) {
          set_half(base + b * sizeof(BlockQ5_1));
          set_half(base + b * sizeof(BlockQ5_1) + 2);
        }
        break;
      case WeightType::kQ8_0:
        for (int64_t b = 0; b < k / 32; ++b) set_half(base + b * sizeof(BlockQ8_0));
        break;
      case WeightType::kQ5_0:
        for (int64_t b = 0; b < k / 32; ++b) set_half(base + b * sizeof(BlockQ5_0));
        break;
      case WeightType::kQ6_K:
        for (int64_t s = 0; s < k / kQ6_KValues; ++s) {
          set_half(base + s * sizeof(BlockQ6_K) + offsetof(BlockQ6_K, d));
        }
        break;
      case WeightType::kQ4_K:
        for (int64_t s = 0; s < k / kQ4_KValues; ++s) {
          set_half(base + s * sizeof(BlockQ4_K));
          set_half(base + s * sizeof(BlockQ4_K) + 2);
        }
        break;
      case WeightType::kF16:
        for (int64_t j = 0; j < k; ++j) set_half(base + 2 * j);
        break;
      case WeightType::kF32:
        for (int64_t j = 0; j < k; ++j) {
          const float v = 0.01f * static_cast<float>(rng() % 100);
          std::memcpy(w.data() + base + 4 * j, &v, 4);
        }
        break;
      case WeightType::kBF16:
        for (int64_t j = 0; j < k; ++j) w[base + 2 * j + 1] = 0x3c;  // exponent of ~0.01
        break;
    }
  }
  return w;
}

// Args: rows, k, n_tokens, isa.
void BM_MatMulRows(benchmark::State& state, WeightType type) {
  const int64_t rows = state.range(0), k = state.range(1), n = state.range(2);
  ForceIsa(static_cast<Isa>(state.range(3)));
  state.SetLabel(IsaName(ActiveIsa()));
  const std::vector<uint8_t> w = RandomWeights(type, rows, k);
  std::vector<float> x(n * k);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  std::vector<uint8_t> xq(ActivationBytes(type, n, k));
  PrepareActivations(type, x.data(), k, k, 0, n, xq.data());
  std::vector<float> out(n * rows);
  const size_t row_bytes = WeightRowBytes(type, k);
  for (auto _ : state) {
    MatMulRows(type, w.data(), row_bytes, k, xq.data(), n, out.data(), rows, 0, rows);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.size()) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * static_cast<double>(rows * k * n),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  ForceIsa(DetectIsa());
}

void BM_PrepareActivations(benchmark::State& state) {
  const int64_t k = state.range(0), n = state.range(1);
  ForceIsa(static_cast<Isa>(state.range(2)));
  state.SetLabel(IsaName(ActiveIsa()));
  std::vector<float> x(n * k, 0.5f);
  std::vector<uint8_t> xq(ActivationBytes(WeightType::kQ4_1, n, k));
  for (auto _ : state) {
    PrepareActivations(WeightType::kQ4_1, x.data(), k, k, 0, n, xq.data());
    benchmark::ClobberMemory();
  }
  state.counters["Gfloat/s"] = benchmark::Counter(1e-9 * static_cast<double>(n * k),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  ForceIsa(DetectIsa());
}

void ModelShapes(benchmark::internal::Benchmark* b, bool head) {
  const int isa = static_cast<int>(DetectIsa());
  for (int n : {1, 64, 512}) {
    if (head) {
      b->Args({49152, 576, n, isa});
    } else {
      b->Args({576, 576, n, isa});   // attn q / o
      b->Args({1536, 576, n, isa});  // ffn gate / up
      b->Args({576, 1536, n, isa});  // ffn down
    }
  }
  b->Unit(benchmark::kMicrosecond);
}

// One matrix of SmolLM2-135M with its own random weights, and optionally a packed copy.
struct ModelMatrix {
  WeightType type;
  int64_t rows, k;
  std::vector<uint8_t> w;
  std::vector<uint8_t> packed;  // 64 bytes of slack for alignment
  uint8_t* packed_at = nullptr;

  // A 64-byte aligned copy of `bytes`, written by pack(w, row bytes, rows, k, out).
  template <class Pack>
  void AddCopy(size_t bytes, Pack pack) {
    packed.resize(bytes + 64);
    const uintptr_t at = reinterpret_cast<uintptr_t>(packed.data());
    packed_at = packed.data() + (64 - at % 64) % 64;
    pack(type, w.data(), WeightRowBytes(type, k), rows, k, packed_at);
  }
};

// Every projection of the 30 layers (Q4_1), then the Q8_0 output head: the real ~96 MB, so
// weights stream from L3/DRAM as in the engine.
std::vector<ModelMatrix> SmolLm2Matrices() {
  std::vector<ModelMatrix> mats;
  for (int layer = 0; layer < 30; ++layer) {
    for (auto [rows, k] : {std::pair<int64_t, int64_t>{576, 576},
                           {192, 576},
                           {192, 576},
                           {576, 576},
                           {1536, 576},
                           {1536, 576},
                           {576, 1536}}) {
      mats.push_back({WeightType::kQ4_1, rows, k, RandomWeights(WeightType::kQ4_1, rows, k)});
    }
  }
  mats.push_back({WeightType::kQ8_0, 49152, 576, RandomWeights(WeightType::kQ8_0, 49152, 576)});
  return mats;
}

// SmolLm2Matrices at 12-bit activations. Reports model tokens/s of the matmuls alone (single
// thread). Args: n_tokens, isa,
// whether the 4-bit matrices also get their AMX-packed copies (read at the AMX level).
void BM_ModelMatmuls(benchmark::State& state) {
  const int64_t n = state.range(0);
  ForceIsa(static_cast<Isa>(state.range(1)));
  state.SetLabel(IsaName(ActiveIsa()));
  std::vector<ModelMatrix> mats = SmolLm2Matrices();
  if (state.range(2) != 0) {
    for (ModelMatrix& m : mats) {
      if (AmxPackable(m.type, m.rows, m.k)) {
        m.AddCopy(AmxPackedBytes(m.type, m.rows, m.k), PackForAmx);
      }
    }
  }
  std::vector<float> x(n * 1536, 0.25f);
  std::vector<uint8_t> xq(ActivationBytes(WeightType::kQ4_1, n, 1536));
  std::vector<float> out(n * 49152);
  double bytes = 0;
  for (const ModelMatrix& m : mats) bytes += static_cast<double>(m.w.size());
  for (auto _ : state) {
    for (const ModelMatrix& m : mats) {
      const int64_t nt = m.rows == 49152 ? 1 : n;  // the head only on a prompt's last token
      PrepareActivations(m.type, x.data(), m.k, m.k, 0, nt, xq.data());
      MatMulRows(m.type, m.w.data(), WeightRowBytes(m.type, m.k), m.k, xq.data(), nt, out.data(),
                 m.rows, 0, m.rows, m.packed_at);
    }
    benchmark::ClobberMemory();
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  ForceIsa(DetectIsa());
}
BENCHMARK(BM_ModelMatmuls)->Apply([](auto* b) {
  // Every supported level above portable, side by side: 1 token (decode of one session), 16
  // (a decode step of 16 sessions) and 64 (prefill-sized).
  for (int n : {1, 16, 64}) {
    for (Isa isa : kAllIsas) {
      if (isa != Isa::kPortable && IsaSupported(isa)) b->Args({n, static_cast<int>(isa), 0});
      if (isa == Isa::kAmx && IsaSupported(isa)) b->Args({n, static_cast<int>(isa), 1});
    }
  }
  b->Unit(benchmark::kMillisecond);
});

// The same matrices at 8-bit activations (MatMulRows8 on PackForVnni8 copies, the kernel a build
// plan takes at the AVX-512 VNNI level) as in a decode step of n sessions: every product,
// the head included, at n tokens. Single thread; the ~96 MB of copies stream from L3/DRAM.
// Counters: model tokens/s of the products alone and multiply-adds per ns.
void BM_ModelMatmuls8(benchmark::State& state) {
  const int64_t n = state.range(0);
  if (!FastInt8Activations(WeightType::kQ4_1)) {
    state.SkipWithError("no 8-bit kernel at this level (AVX-512 VNNI)");
    return;
  }
  std::vector<ModelMatrix> mats = SmolLm2Matrices();
  for (ModelMatrix& m : mats) m.AddCopy(Vnni8PackedBytes(m.type, m.rows, m.k), PackForVnni8);
  std::vector<float> x(n * 1536, 0.25f);
  std::vector<uint8_t> xq(ActivationBytes8(n, 1536));
  std::vector<float> out(n * 49152);
  double macs = 0;
  for (const ModelMatrix& m : mats) macs += static_cast<double>(m.rows * m.k * n);
  for (auto _ : state) {
    for (const ModelMatrix& m : mats) {
      PrepareActivations8(x.data(), m.k, m.k, 0, n, xq.data());
      // Every row is in a whole tile of 16: the kernel reads the copy only.
      MatMulRows8(m.type, m.w.data(), WeightRowBytes(m.type, m.k), m.k, xq.data(), n, out.data(),
                  m.rows, 0, m.rows, m.packed_at);
    }
    benchmark::ClobberMemory();
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MAC/ns"] =
      benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ModelMatmuls8)->Arg(1)->Arg(8)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond);

// The ceiling the 8-bit kernel divides by: vpdpbusd on zmm registers alone, 16 independent
// accumulators (more than latency x throughput on Zen 4/5 and Sapphire Rapids), no loads, no
// unpacking, no scales. One call is 64 byte multiply-adds per instruction; MAC/ns is directly
// comparable with BM_ModelMatmuls8's. Single thread; run two copies side by side (or
// --benchmark_perf_counters) to see whether this machine's two vCPUs share a core.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t VnniPeakLoop(int64_t iterations) {
  __m512i acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iterations; ++it) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    // Keeps the compiler from hoisting the chain: a and b change only in the register's view.
    __asm__ volatile("" : "+v"(a), "+v"(b));
  }
  __m512i s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_epi32(s, acc[i]);
  int32_t lanes[16];  // not _mm512_reduce_add_epi32: GCC 12's warns (-Wuninitialized) inside it
  _mm512_storeu_si512(lanes, s);
  int64_t total = 0;
  for (int32_t v : lanes) total += v;
  return total;
}
void BM_Int8PeakVnni(benchmark::State& state) {
  if (!IsaSupported(Isa::kAvx512Vnni)) {
    state.SkipWithError("no AVX-512 VNNI on this CPU");
    return;
  }
  constexpr int64_t kIterations = 1 << 16;
  for (auto _ : state) benchmark::DoNotOptimize(VnniPeakLoop(kIterations));
  state.counters["MAC/ns"] = benchmark::Counter(1e-9 * static_cast<double>(kIterations * 16 * 64),
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Int8PeakVnni)->Unit(benchmark::kMicrosecond);

// A matrix at 8-bit activations from its PackForVnni8 copy, what a build plan's 8-bit choice
// reads: Qwen2.5-Coder-0.5B's gate/up shape in Q5_0 (Q8_0's layout, 576 bytes per 16 rows and
// block, against the file's 352) and Qwen2.5-Coder-1.5B's ffn_down in Q6_K (576 against 420),
// each against BM_MatMulRows at 12 bits on the file's rows (Q5_0_qwen, Q6_K_qwen15_down).
// Args: rows, k, n_tokens.
void BM_MatMulRows8Packed(benchmark::State& state, WeightType type) {
  const int64_t rows = state.range(0), k = state.range(1), n = state.range(2);
  if (!FastInt8Activations(type)) {
    state.SkipWithError("no 8-bit kernel at this level (AVX-512 VNNI)");
    return;
  }
  const std::vector<uint8_t> w = RandomWeights(type, rows, k);
  std::vector<uint8_t> storage(Vnni8PackedBytes(type, rows, k) + 64);
  uint8_t* packed = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  PackForVnni8(type, w.data(), WeightRowBytes(type, k), rows, k, packed);
  std::vector<float> x(n * k, 0.25f);
  std::vector<uint8_t> xq(ActivationBytes8(n, k));
  PrepareActivations8(x.data(), k, k, 0, n, xq.data());
  std::vector<float> out(n * rows);
  for (auto _ : state) {
    MatMulRows8(type, w.data(), WeightRowBytes(type, k), k, xq.data(), n, out.data(), rows, 0, rows,
                packed);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * static_cast<double>(rows * k * n),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_MatMulRows8Packed, Q5_0_qwen, WeightType::kQ5_0)
    ->Args({4864, 896, 1})
    ->Args({4864, 896, 16})
    ->Args({4864, 896, 64})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatMulRows8Packed, Q6_K_qwen15_down, WeightType::kQ6_K)
    ->Args({1536, 8960, 1})
    ->Args({1536, 8960, 16})
    ->Args({1536, 8960, 64})
    ->Unit(benchmark::kMicrosecond);
// The 1.5B's Q4_K matrices (gate / up [8960, 1536], down [1536, 8960]) from Q4_K's records (4.625
// bits per weight) against the Q4_1 records of their conversion (5).
void Qwen15Q4Shapes(benchmark::internal::Benchmark* b) {
  for (int n : {1, 4, 16, 64}) {
    b->Args({8960, 1536, n});
    b->Args({1536, 8960, n});
  }
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK_CAPTURE(BM_MatMulRows8Packed, Q4_K_qwen15, WeightType::kQ4_K)->Apply(Qwen15Q4Shapes);
BENCHMARK_CAPTURE(BM_MatMulRows8Packed, Q4_1_qwen15, WeightType::kQ4_1)->Apply(Qwen15Q4Shapes);

// The same records streamed from DRAM as a decode step streams them: half the 1.5B's Q4_K layer
// matrices (14 gate-or-up and 14 down: ~250 MB of copies, past any L3), one product after
// another at n tokens. Run with two threads, each streaming its own set, as both cores do in a
// decode step. Counter: GB/s of copies read.
void BM_MatMulRows8Stream(benchmark::State& state, WeightType type) {
  const int64_t n = state.range(0);
  if (!FastInt8Activations(type)) {
    state.SkipWithError("no 8-bit kernel at this level (AVX-512 VNNI)");
    return;
  }
  std::vector<ModelMatrix> mats;
  double bytes = 0;
  for (int i = 0; i < 14; ++i) {
    for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{8960, 1536}, {1536, 8960}}) {
      mats.push_back({type, rows, k, RandomWeights(type, rows, k)});
      mats.back().AddCopy(Vnni8PackedBytes(type, rows, k), PackForVnni8);
      mats.back().w = {};  // the kernel reads the copy only
      bytes += static_cast<double>(Vnni8PackedBytes(type, rows, k));
    }
  }
  std::vector<float> x(n * 8960, 0.25f);
  std::vector<uint8_t> xq(ActivationBytes8(n, 8960));
  std::vector<float> out(n * 8960);
  for (auto _ : state) {
    for (const ModelMatrix& m : mats) {
      PrepareActivations8(x.data(), m.k, m.k, 0, n, xq.data());
      // Every row is in a whole tile of 16: the kernel reads the copy only.
      MatMulRows8(type, nullptr, WeightRowBytes(type, m.k), m.k, xq.data(), n, out.data(), m.rows,
                  0, m.rows, m.packed_at);
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void StreamArgs(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(4)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_MatMulRows8Stream, Q4_K_qwen15, WeightType::kQ4_K)->Apply(StreamArgs);
BENCHMARK_CAPTURE(BM_MatMulRows8Stream, Q4_1_qwen15, WeightType::kQ4_1)->Apply(StreamArgs);
BENCHMARK_CAPTURE(BM_MatMulRows8Stream, Q6_K_qwen15, WeightType::kQ6_K)->Apply(StreamArgs);

BENCHMARK_CAPTURE(BM_MatMulRows, Q4_1, WeightType::kQ4_1)->Apply([](auto* b) {
  ModelShapes(b, false);
});
BENCHMARK_CAPTURE(BM_MatMulRows, Q8_0_head, WeightType::kQ8_0)->Apply([](auto* b) {
  ModelShapes(b, true);
});
BENCHMARK_CAPTURE(BM_MatMulRows, Q4_0, WeightType::kQ4_0)->Apply([](auto* b) {
  ModelShapes(b, false);
});
BENCHMARK_CAPTURE(BM_MatMulRows, Q8_0, WeightType::kQ8_0)->Apply([](auto* b) {
  ModelShapes(b, false);
});
BENCHMARK_CAPTURE(BM_MatMulRows, F16, WeightType::kF16)->Apply([](auto* b) {
  ModelShapes(b, false);
});
BENCHMARK_CAPTURE(BM_MatMulRows, BF16, WeightType::kBF16)->Apply([](auto* b) {
  ModelShapes(b, false);
});
BENCHMARK_CAPTURE(BM_MatMulRows, F32, WeightType::kF32)->Apply([](auto* b) {
  ModelShapes(b, false);
});
// Weights far beyond L2 (and, at 70 MB, beyond the L3 share): streaming-bound GEMV.
BENCHMARK_CAPTURE(BM_MatMulRows, Q4_1_stream, WeightType::kQ4_1)
    ->Args({49152, 576, 1, static_cast<int>(DetectIsa())})
    ->Args({196608, 576, 1, static_cast<int>(DetectIsa())})
    ->Args({589824, 576, 1, static_cast<int>(DetectIsa())})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatMulRows, Q8_0_stream, WeightType::kQ8_0)
    ->Args({196608, 576, 1, static_cast<int>(DetectIsa())})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatMulRows, F16_stream, WeightType::kF16)
    ->Args({65536, 576, 1, static_cast<int>(DetectIsa())})
    ->Unit(benchmark::kMicrosecond);
// Qwen2.5-Coder-0.5B's Q5_0 matrices read as stored against their Q8_0 conversion (what the
// load made of them before the native kernel), at every level this CPU has: q [896, 896], gate /
// up [4864, 896], down-sized [896, 4864].
void QwenShapes(benchmark::internal::Benchmark* b) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!IsaSupported(isa)) continue;
    for (int n : {1, 4, 16, 64}) {
      b->Args({896, 896, n, static_cast<int>(isa)});
      b->Args({4864, 896, n, static_cast<int>(isa)});
      b->Args({896, 4864, n, static_cast<int>(isa)});
    }
  }
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK_CAPTURE(BM_MatMulRows, Q5_0_qwen, WeightType::kQ5_0)->Apply(QwenShapes);
// Q5_1 read as stored against the Q8_0 it was re-quantized to before (and Q5_K's Q5_1 now).
BENCHMARK_CAPTURE(BM_MatMulRows, Q5_1_qwen, WeightType::kQ5_1)->Apply(QwenShapes);
BENCHMARK_CAPTURE(BM_MatMulRows, Q8_0_qwen, WeightType::kQ8_0)->Apply(QwenShapes);
// Qwen2.5-Coder-0.5B's Q6_K matrices (half the layers' ffn_down, [896, 4864]; the other shapes
// have k = 896, no whole super-blocks) read as stored against their Q8_0 conversion.
void QwenDownShapes(benchmark::internal::Benchmark* b) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!IsaSupported(isa)) continue;
    for (int n : {1, 4, 16, 64}) b->Args({896, 4864, n, static_cast<int>(isa)});
  }
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK_CAPTURE(BM_MatMulRows, Q6_K_qwen_down, WeightType::kQ6_K)->Apply(QwenDownShapes);
BENCHMARK_CAPTURE(BM_MatMulRows, Q8_0_qwen_down, WeightType::kQ8_0)->Apply(QwenDownShapes);
// Qwen2.5-Coder-1.5B's Q6_K ffn_down [1536, 8960] at 12 bits, against BM_MatMulRows8Packed's:
// decode steps of 1 and 4 sessions, 16 sessions, a prefill chunk.
BENCHMARK_CAPTURE(BM_MatMulRows, Q6_K_qwen15_down, WeightType::kQ6_K)
    ->Args({1536, 8960, 1, static_cast<int>(DetectIsa())})
    ->Args({1536, 8960, 4, static_cast<int>(DetectIsa())})
    ->Args({1536, 8960, 16, static_cast<int>(DetectIsa())})
    ->Args({1536, 8960, 64, static_cast<int>(DetectIsa())})
    ->Unit(benchmark::kMicrosecond);
// The 1.5B's Q4_K matrices as the load leaves them (Q4_1 rows) at a 16-session decode step and a
// prefill chunk: gate / up [8960, 1536], down [1536, 8960].
BENCHMARK_CAPTURE(BM_MatMulRows, Q4_1_qwen15, WeightType::kQ4_1)->Apply([](auto* b) {
  for (int n : {1, 16, 64}) {
    b->Args({8960, 1536, n, static_cast<int>(DetectIsa())});
    b->Args({1536, 8960, n, static_cast<int>(DetectIsa())});
  }
  b->Unit(benchmark::kMicrosecond);
});
// The AVX2 level at the Q4_1 shapes, where the detected level is higher (AVX-VNNI).
BENCHMARK_CAPTURE(BM_MatMulRows, Q4_1_avx2, WeightType::kQ4_1)->Apply([](auto* b) {
  if (DetectIsa() <= Isa::kAvx2) return;
  for (int n : {1, 64}) {
    b->Args({1536, 576, n, static_cast<int>(Isa::kAvx2)});
    b->Args({576, 1536, n, static_cast<int>(Isa::kAvx2)});
  }
  b->Unit(benchmark::kMicrosecond);
});
// Portable reference at the decode shapes, for scale.
BENCHMARK_CAPTURE(BM_MatMulRows, Q4_1_portable, WeightType::kQ4_1)
    ->Args({1536, 576, 1, static_cast<int>(Isa::kPortable)})
    ->Args({1536, 576, 64, static_cast<int>(Isa::kPortable)})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PrepareActivations)
    ->Args({576, 1, static_cast<int>(DetectIsa())})
    ->Args({576, 512, static_cast<int>(DetectIsa())})
    ->Args({576, 512, static_cast<int>(Isa::kPortable)})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace streamd::kernels::cpu
