// Machine ceilings for docs/PERFORMANCE.md: how many integer multiply-adds per second can one or
// two threads issue through the 512-bit VNNI dot products the product kernels are built on?
// A product that is compute-bound (prefill, or a decode step of many sessions) is judged
// against this, as a memory-bound one is against memory_bandwidth_bench.
//
// BM_Dpwssd: vpdpwssd, 16 lanes x 2 i16 products each (32 multiply-adds), the instruction of the
// default 12-bit activations (kernels/cpu/matmul_quant_avx512.cc). BM_Dpbusd: vpdpbusd, 16 lanes
// x 4 u8 x s8 products (64), that of the 8-bit activations a build plan may choose
// (kernels/cpu/matmul_quant8_avx512.cc). Each thread runs 12 independent accumulators held in
// registers, enough to cover the instruction's latency; nothing is loaded or stored in the loop.
// The kernels also widen weights, scale and accumulate in f32, so they reach a share of this.
// Counter "MAC/s": multiply-adds per wall-clock second, all threads together.
// Run: vnni_peak_bench [--benchmark_repetitions=3]
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>

namespace {

constexpr int64_t kChains = 12;

#define STREAMD_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

// Runs `rounds` rounds of kChains independent Op(acc, x, y) and returns a value that depends
// on every result (so that none is dropped).
template <class Op>
STREAMD_VNNI_TARGET int32_t Chains(int64_t rounds, Op op) {
  __m512i x = _mm512_set1_epi32(0x00030002), y = _mm512_set1_epi32(0x00050001);
  // Different starting values: identical chains would be computed once.
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2),
          a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5),
          a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8),
          a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
  for (int64_t n = 0; n < rounds; ++n) {
    a0 = op(a0, x, y);
    a1 = op(a1, x, y);
    a2 = op(a2, x, y);
    a3 = op(a3, x, y);
    a4 = op(a4, x, y);
    a5 = op(a5, x, y);
    a6 = op(a6, x, y);
    a7 = op(a7, x, y);
    a8 = op(a8, x, y);
    a9 = op(a9, x, y);
    a10 = op(a10, x, y);
    a11 = op(a11, x, y);
    // The operands are opaque to the compiler: it cannot fold the rounds together.
    asm volatile("" : "+v"(x), "+v"(y));
  }
  const __m512i s = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
      _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  alignas(64) int32_t lanes[16];  // not _mm512_reduce_add_epi32: GCC 12 warns inside it
  _mm512_store_si512(lanes, s);
  int32_t sum = 0;
  for (int32_t lane : lanes) sum += lane;
  return sum;
}

bool HasVnni() { return __builtin_cpu_supports("avx512vnni") != 0; }

template <class Op>
void Run(benchmark::State& state, int64_t macs_per_op, Op op) {
  if (!HasVnni()) {
    state.SkipWithError("this CPU has no AVX512-VNNI");
    return;
  }
  constexpr int64_t kRounds = 1 << 20;
  for (auto _ : state) benchmark::DoNotOptimize(Chains(kRounds, op));
  state.counters["MAC/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kRounds * kChains * macs_per_op,
                         benchmark::Counter::kIsRate);
}

struct Dpwssd {
  STREAMD_VNNI_TARGET __m512i operator()(__m512i acc, __m512i a, __m512i b) const {
    return _mm512_dpwssd_epi32(acc, a, b);
  }
};
struct Dpbusd {
  STREAMD_VNNI_TARGET __m512i operator()(__m512i acc, __m512i a, __m512i b) const {
    return _mm512_dpbusd_epi32(acc, a, b);
  }
};

void BM_Dpwssd(benchmark::State& state) { Run(state, 32, Dpwssd{}); }
void BM_Dpbusd(benchmark::State& state) { Run(state, 64, Dpbusd{}); }

BENCHMARK(BM_Dpwssd)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Dpbusd)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
