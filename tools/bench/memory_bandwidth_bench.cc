// Machine ceilings for docs/PERFORMANCE.md: how fast can one or two threads stream bytes?
// Decode reads every weight once per step, so (weight bytes per step) / (read bandwidth at the
// weights' size) bounds decode steps per second.
//
// BM_Read sums 64-bit words of a buffer (SSE2 loads, four accumulators: far from compute-bound);
// BM_ReadPrefetched is the same with a software prefetch 8 KiB ahead, as the product kernels
// issue (kernels/cpu/matmul_quant8_avx512.cc): on the AMD EPYC VM of 2026-12-06 a decode step
// streamed its weights at 60-78 GB/s while BM_Read's hardware-prefetched stream reached ~51, so
// BM_Read alone understates the ceiling a roofline divides by. BM_Copy is memcpy and counts bytes
// read + written. Each thread takes its own contiguous
// slice of one shared buffer; with two threads GB/s is their total per wall-clock second.
// Sizes: 1 MiB (per-core L2), 96 MiB (SmolLM2-135M Q4_1's weights; inside this machine's L3
// share, if the neighbours leave it), 2 GiB (beyond any L3: DRAM).
// Google Benchmark prints bytes_per_second in GiB/s ("47.1G/s" is 50.6 GB/s): convert before
// dividing byte counts in MB.
// Run: memory_bandwidth_bench [--benchmark_filter=Read] [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>
#include <emmintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kMaxBytes = 2048 * kMiB;

// One buffer for all benchmarks, touched once so page faults are not measured. Copy uses the
// first half as source and the second as destination.
uint8_t* Buffer() {
  static uint8_t* buffer = [] {
    auto* b = static_cast<uint8_t*>(std::aligned_alloc(64, 2 * kMaxBytes));
    std::memset(b, 1, 2 * kMaxBytes);
    return b;
  }();
  return buffer;
}

// [bytes] -> sum of its 64-bit words; bytes is a multiple of 64.
uint64_t SumWords(const uint8_t* p, int64_t bytes) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < bytes; i += 64) {
    a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(s)) +
         static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s)));
}

// [bytes] -> the same sum, each line asked for kPrefetchAhead bytes before it is read.
constexpr int64_t kPrefetchAhead = 8192;
uint64_t SumWordsPrefetched(const uint8_t* p, int64_t bytes) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < bytes; i += 64) {
    // Past the end of the slice it asks for lines of the neighbour's slice or the buffer's tail:
    // a prefetch never faults, and the buffer has kMaxBytes more after the last slice.
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchAhead), _MM_HINT_T0);
    a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(s)) +
         static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s)));
}

// Arg: total bytes over all threads.
void BM_Read(benchmark::State& state) {
  const int64_t slice = state.range(0) / state.threads() / 64 * 64;
  const uint8_t* p = Buffer() + slice * state.thread_index();
  for (auto _ : state) benchmark::DoNotOptimize(SumWords(p, slice));
  state.SetBytesProcessed(state.iterations() * slice);
}

void BM_ReadPrefetched(benchmark::State& state) {
  const int64_t slice = state.range(0) / state.threads() / 64 * 64;
  const uint8_t* p = Buffer() + slice * state.thread_index();
  for (auto _ : state) benchmark::DoNotOptimize(SumWordsPrefetched(p, slice));
  state.SetBytesProcessed(state.iterations() * slice);
}

void BM_Copy(benchmark::State& state) {
  const int64_t slice = state.range(0) / state.threads() / 64 * 64;
  const uint8_t* src = Buffer() + slice * state.thread_index();
  uint8_t* dst = Buffer() + kMaxBytes + slice * state.thread_index();
  for (auto _ : state) {
    std::memcpy(dst, src, static_cast<size_t>(slice));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(2 * state.iterations() * slice);
}

// One thread: bytes per CPU second of that thread (a noisy neighbour that takes the core away
// does not count). Two threads: bytes per wall-clock second of both together.
void OneThread(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {1 * kMiB, 96 * kMiB, kMaxBytes}) b->Arg(bytes);
  b->Unit(benchmark::kMillisecond);
}
void TwoThreads(benchmark::internal::Benchmark* b) {
  OneThread(b);
  b->Threads(2)->UseRealTime();
}

BENCHMARK(BM_Read)->Apply(OneThread);
BENCHMARK(BM_Read)->Apply(TwoThreads);
BENCHMARK(BM_ReadPrefetched)->Apply(OneThread);
BENCHMARK(BM_ReadPrefetched)->Apply(TwoThreads);
BENCHMARK(BM_Copy)->Apply(OneThread);
BENCHMARK(BM_Copy)->Apply(TwoThreads);

}  // namespace
