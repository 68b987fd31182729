// The CUDA kernel lab's bandwidth printout (STYLE.md 10): device-to-device copy bandwidth
// first (the ceiling), then each kernel on the shapes that matter (SmolLM2-135M and
// Llama-3-8B; 1 to 256 sessions; windows 1020 and 4092), timed with CUDA events over
// repeated launches, as achieved GB/s (bytes the kernel must move: reads + writes) and as a
// fraction of the copy bandwidth. The last line is "copy_gbps=<value>" for scripts.
// Usage: kernels_cuda_bench [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/kernels.h"

namespace streamd::kernels::cuda {
namespace {

#define BENCH_CHECK(call)                                                                  \
  do {                                                                                     \
    const cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "kernels_cuda_bench: %s: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

void* DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, bytes));
  BENCH_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

// Median milliseconds of `reps` timed runs of fn (after 3 warm-up runs).
double TimeMs(const std::function<cudaError_t()>& fn, int reps = 20) {
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) BENCH_CHECK(fn());
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    BENCH_CHECK(cudaEventRecord(a));
    BENCH_CHECK(fn());
    BENCH_CHECK(cudaEventRecord(b));
    BENCH_CHECK(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double g_copy_gbps = 0;

void Report(const std::string& kernel, const std::string& shape, double ms, double bytes) {
  const double gbps = bytes / (ms * 1e6);
  std::printf("%-18s %-44s %10.1f %9.1f %6.0f%%\n", kernel.c_str(), shape.c_str(), ms * 1e3, gbps,
              100.0 * gbps / g_copy_gbps);
}

double CopyBandwidth() {
  const size_t bytes = size_t{2} << 30;
  void* a = DeviceAlloc(bytes);
  void* b = DeviceAlloc(bytes);
  const double ms = TimeMs([&] { return cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
  BENCH_CHECK(cudaFree(a));
  BENCH_CHECK(cudaFree(b));
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);  // read + write
}

struct ModelShape {
  const char* name;
  int32_t n_heads, n_kv_heads, head_dim, dim, ffn, vocab;
};
constexpr ModelShape kSmol{"smollm2", 9, 3, 64, 576, 1536, 49152};
constexpr ModelShape kLlama8B{"llama3-8b", 32, 8, 128, 4096, 14336, 128256};

// Decode attention of one layer: n sessions with full windows (S = 4, W), block size 16, random
// K/V. `forced_splits` > 0 overrides ChooseDecodeSplits (the sweep that tunes it).
void BenchDecodeAttention(const ModelShape& m, int32_t n, int32_t window, int sm_count,
                          int32_t forced_splits = 0) {
  const int32_t S = 4, B = 16;
  const int32_t ring = (window + B - 1) / B + 1, sink_blocks = 1;
  const int32_t per_session = sink_blocks + ring;
  const KvPoolLayout layout{n * per_session, 1, m.n_kv_heads, m.head_dim, B};
  uint16_t* pool = static_cast<uint16_t*>(DeviceAlloc(layout.layer_elems() * 2));
  BENCH_CHECK(FillUniformF16(pool, layout.layer_elems(), 1.0f, 7, nullptr));  // never zeros
  std::vector<int32_t> ids(static_cast<size_t>(n) * per_session);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(1));  // blocks scattered over the pool
  int32_t* d_ids = static_cast<int32_t*>(DeviceAlloc(ids.size() * 4));
  BENCH_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  std::vector<SinkWindowTable> tables(n);
  std::vector<int32_t> seq_of(n);
  std::vector<int64_t> pos(n);
  for (int32_t s = 0; s < n; ++s) {
    tables[s] = {
        d_ids + s * per_session, d_ids + s * per_session + sink_blocks, S, window, ring, B};
    seq_of[s] = s;
    pos[s] = 100000 + s;  // far past S + W: every session sees S + W keys
  }
  auto* d_tables = static_cast<SinkWindowTable*>(DeviceAlloc(n * sizeof(SinkWindowTable)));
  auto* d_seq = static_cast<int32_t*>(DeviceAlloc(n * 4));
  auto* d_pos = static_cast<int64_t*>(DeviceAlloc(n * 8));
  BENCH_CHECK(
      cudaMemcpy(d_tables, tables.data(), n * sizeof(SinkWindowTable), cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_seq, seq_of.data(), n * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_pos, pos.data(), n * 8, cudaMemcpyHostToDevice));
  const int64_t q_dim = static_cast<int64_t>(m.n_heads) * m.head_dim;
  float* q = static_cast<float*>(DeviceAlloc(n * q_dim * 4));
  float* q_sink = static_cast<float*>(DeviceAlloc(n * q_dim * 4));
  BENCH_CHECK(FillF32(q, n * q_dim, 0.5f, nullptr));
  BENCH_CHECK(FillF32(q_sink, n * q_dim, -0.25f, nullptr));
  uint16_t* out = static_cast<uint16_t*>(DeviceAlloc(n * q_dim * 2));
  int32_t per = 0;
  int32_t splits = ChooseDecodeSplits(n, m.n_kv_heads, S + window, sm_count, &per);
  if (forced_splits > 0) {
    per = (S + window + forced_splits - 1) / forced_splits;
    per = (per + 15) / 16 * 16;
    splits = (S + window + per - 1) / per;
  }
  void* ws = DeviceAlloc(
      std::max<size_t>(1, DecodeAttentionWorkspaceBytes(n, m.n_heads, m.head_dim, splits)));
  const AttentionBatch batch{d_tables, d_seq, d_pos, n};
  const AttentionShape shape{m.n_heads, m.head_dim, 0.088f};
  const double ms = TimeMs([&] {
    return DecodeAttention(layout, pool, batch, q, q_dim, q_sink, shape, splits, per, ws, out,
                           nullptr);
  });
  const double kv = static_cast<double>(n) * (S + window) * m.n_kv_heads * m.head_dim * 2 * 2;
  char desc[128];
  std::snprintf(desc, sizeof desc, "%s sessions=%d W=%d splits=%d", m.name, n, window, splits);
  Report(forced_splits > 0 ? "decode_attn_sweep" : "decode_attention", desc, ms,
         kv + n * q_dim * (8.0 + 2.0));
  for (void* p : {static_cast<void*>(pool), static_cast<void*>(d_ids), static_cast<void*>(d_tables),
                  static_cast<void*>(d_seq), static_cast<void*>(d_pos), static_cast<void*>(q),
                  static_cast<void*>(q_sink), static_cast<void*>(out), ws}) {
    BENCH_CHECK(cudaFree(p));
  }
}

// Chunked prefill of one layer: `n` sessions append a chunk of `chunk` tokens at W.
void BenchPrefillAttention(const ModelShape& m, int32_t n, int32_t chunk, int32_t window) {
  const int32_t S = 4, B = 16;
  const int32_t ring = (window + chunk - 1 + B - 1) / B + 1, per_session = 1 + ring;
  const KvPoolLayout layout{n * per_session, 1, m.n_kv_heads, m.head_dim, B};
  uint16_t* pool = static_cast<uint16_t*>(DeviceAlloc(layout.layer_elems() * 2));
  BENCH_CHECK(FillUniformF16(pool, layout.layer_elems(), 1.0f, 7, nullptr));  // never zeros
  std::vector<int32_t> ids(static_cast<size_t>(n) * per_session);
  std::iota(ids.begin(), ids.end(), 0);
  int32_t* d_ids = static_cast<int32_t*>(DeviceAlloc(ids.size() * 4));
  BENCH_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  std::vector<SinkWindowTable> tables(n);
  std::vector<int32_t> seq_of;
  std::vector<int64_t> pos;
  std::vector<PrefillTile> tiles;
  const int32_t per = PrefillTileQueries(m.n_heads / m.n_kv_heads);
  for (int32_t s = 0; s < n; ++s) {
    tables[s] = {d_ids + s * per_session, d_ids + s * per_session + 1, S, window, ring, B};
    for (int32_t i = 0; i < chunk; ++i) {
      if (i % per == 0)
        tiles.push_back({static_cast<int32_t>(seq_of.size()), std::min(per, chunk - i)});
      seq_of.push_back(s);
      pos.push_back(S + window + i);
    }
  }
  const int32_t n_tok = static_cast<int32_t>(pos.size());
  auto* d_tables = static_cast<SinkWindowTable*>(DeviceAlloc(n * sizeof(SinkWindowTable)));
  auto* d_seq = static_cast<int32_t*>(DeviceAlloc(n_tok * 4));
  auto* d_pos = static_cast<int64_t*>(DeviceAlloc(n_tok * 8));
  auto* d_tiles = static_cast<PrefillTile*>(DeviceAlloc(tiles.size() * sizeof(PrefillTile)));
  BENCH_CHECK(
      cudaMemcpy(d_tables, tables.data(), n * sizeof(SinkWindowTable), cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_seq, seq_of.data(), n_tok * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_pos, pos.data(), n_tok * 8, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_tiles, tiles.data(), tiles.size() * sizeof(PrefillTile),
                         cudaMemcpyHostToDevice));
  const int64_t q_dim = static_cast<int64_t>(m.n_heads) * m.head_dim;
  float* q = static_cast<float*>(DeviceAlloc(n_tok * q_dim * 4));
  float* q_sink = static_cast<float*>(DeviceAlloc(n_tok * q_dim * 4));
  uint16_t* out = static_cast<uint16_t*>(DeviceAlloc(n_tok * q_dim * 2));
  const AttentionBatch batch{d_tables, d_seq, d_pos, n_tok};
  const AttentionShape shape{m.n_heads, m.head_dim, 0.088f};
  const double ms = TimeMs(
      [&] {
        return PrefillAttention(layout, pool, batch, d_tiles, static_cast<int32_t>(tiles.size()), q,
                                q_dim, q_sink, shape, out, nullptr);
      },
      5);
  // Bytes: each tile streams its keys' K and V once (S + W + tile - 1 keys).
  const double kv = static_cast<double>(tiles.size()) * (S + window + per - 1) * m.n_kv_heads *
                    m.head_dim * 2 * 2;
  const double flops = 4.0 * n_tok * (S + window) * q_dim;
  char desc[128];
  std::snprintf(desc, sizeof desc, "%s sessions=%d chunk=%d W=%d (%.1f TFLOP/s)", m.name, n, chunk,
                window, flops / (ms * 1e9));
  Report("prefill_attention", desc, ms, kv);
  for (void* p : {static_cast<void*>(pool), static_cast<void*>(d_ids), static_cast<void*>(d_tables),
                  static_cast<void*>(d_seq), static_cast<void*>(d_pos), static_cast<void*>(d_tiles),
                  static_cast<void*>(q), static_cast<void*>(q_sink), static_cast<void*>(out)}) {
    BENCH_CHECK(cudaFree(p));
  }
}

void BenchElementwise(const ModelShape& m, int32_t n) {
  char desc[128];
  std::snprintf(desc, sizeof desc, "%s tokens=%d", m.name, n);
  const int64_t ld = static_cast<int64_t>(m.n_heads + 2 * m.n_kv_heads) * m.head_dim;
  float* x = static_cast<float*>(DeviceAlloc(static_cast<size_t>(n) * m.dim * 4));
  float* delta = static_cast<float*>(DeviceAlloc(static_cast<size_t>(n) * m.dim * 4));
  float* w = static_cast<float*>(DeviceAlloc(m.dim * 4));
  uint16_t* xb = static_cast<uint16_t*>(DeviceAlloc(static_cast<size_t>(n) * m.dim * 2));
  double ms =
      TimeMs([&] { return AddRmsNorm(x, delta, w, 1e-5f, n, m.dim, nullptr, xb, nullptr); });
  Report("add_rmsnorm", desc, ms, static_cast<double>(n) * m.dim * (4 + 4 + 4 + 2));

  float* gu = static_cast<float*>(DeviceAlloc(static_cast<size_t>(n) * 2 * m.ffn * 4));
  uint16_t* h = static_cast<uint16_t*>(DeviceAlloc(static_cast<size_t>(n) * m.ffn * 2));
  ms = TimeMs([&] { return SwiGlu(gu, n, m.ffn, h, nullptr); });
  Report("swiglu", desc, ms, static_cast<double>(n) * m.ffn * (8 + 2));

  float* qkv = static_cast<float*>(DeviceAlloc(static_cast<size_t>(n) * ld * 4));
  float* q_sink =
      static_cast<float*>(DeviceAlloc(static_cast<size_t>(n) * m.n_heads * m.head_dim * 4));
  auto* pos = static_cast<int64_t*>(DeviceAlloc(n * 8));
  auto* freq = static_cast<double*>(DeviceAlloc(m.head_dim / 2 * 8));
  const int32_t per_block = 16;
  const KvPoolLayout layout{n / per_block + 2, 1, m.n_kv_heads, m.head_dim, per_block};
  uint16_t* pool = static_cast<uint16_t*>(DeviceAlloc(layout.layer_elems() * 2));
  std::vector<int32_t> ids(layout.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  int32_t* d_ids = static_cast<int32_t*>(DeviceAlloc(ids.size() * 4));
  BENCH_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  const SinkWindowTable table{d_ids, d_ids, 0, n, layout.num_blocks, per_block};
  auto* d_table = static_cast<SinkWindowTable*>(DeviceAlloc(sizeof table));
  BENCH_CHECK(cudaMemcpy(d_table, &table, sizeof table, cudaMemcpyHostToDevice));
  auto* seq = static_cast<int32_t*>(DeviceAlloc(n * 4));  // all session 0
  std::vector<int64_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  BENCH_CHECK(cudaMemcpy(pos, positions.data(), n * 8, cudaMemcpyHostToDevice));
  const int64_t q_dim = static_cast<int64_t>(m.n_heads) * m.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(m.n_kv_heads) * m.head_dim;
  ms = TimeMs([&] {
    return RopeAndWriteKv(qkv, ld, n, m.n_heads, m.head_dim, pos, pos, freq, q_sink,
                          {layout, pool, d_table, seq}, nullptr);
  });
  // q read, rotated q and q_sink written; k, v read and written as f16.
  Report("rope_write_kv", desc, ms,
         static_cast<double>(n) * (q_dim * 3 * 4 + kv_dim * 2 * (4 + 2)));

  uint16_t* table_f16 =
      static_cast<uint16_t*>(DeviceAlloc(static_cast<size_t>(m.vocab) * m.dim * 2));
  auto* tokens = static_cast<int32_t*>(DeviceAlloc(n * 4));
  ms = TimeMs([&] { return EmbeddingLookup(table_f16, tokens, n, m.dim, x, nullptr); });
  Report("embedding", desc, ms, static_cast<double>(n) * m.dim * (2 + 4));

  float* logits = static_cast<float*>(DeviceAlloc(static_cast<size_t>(n) * m.vocab * 4));
  auto* ids_out = static_cast<int32_t*>(DeviceAlloc(n * 4));
  ms = TimeMs([&] { return ArgmaxRows(logits, n, m.vocab, ids_out, nullptr); });
  Report("argmax", desc, ms, static_cast<double>(n) * m.vocab * 4);
  std::vector<SampleParams> params(n, SampleParams{0.8f, 40, 0.95f, 0.5f});
  auto* d_params = static_cast<SampleParams*>(DeviceAlloc(n * sizeof(SampleParams)));
  BENCH_CHECK(
      cudaMemcpy(d_params, params.data(), n * sizeof(SampleParams), cudaMemcpyHostToDevice));
  // Random logits: radix select's passes depend on the values.
  std::vector<float> host(static_cast<size_t>(n) * m.vocab);
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (float& v : host) v = g(rng);
  BENCH_CHECK(cudaMemcpy(logits, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  ms = TimeMs([&] { return SampleTopKTopP(logits, n, m.vocab, d_params, ids_out, nullptr); });
  Report("top_k_top_p", desc, ms, static_cast<double>(n) * m.vocab * 4 * 6);  // ~6 row passes

  for (void* p :
       {static_cast<void*>(x), static_cast<void*>(delta), static_cast<void*>(w),
        static_cast<void*>(xb), static_cast<void*>(gu), static_cast<void*>(h),
        static_cast<void*>(qkv), static_cast<void*>(q_sink), static_cast<void*>(pos),
        static_cast<void*>(freq), static_cast<void*>(pool), static_cast<void*>(d_ids),
        static_cast<void*>(d_table), static_cast<void*>(seq), static_cast<void*>(table_f16),
        static_cast<void*>(tokens), static_cast<void*>(logits), static_cast<void*>(ids_out),
        static_cast<void*>(d_params)}) {
    BENCH_CHECK(cudaFree(p));
  }
}

int Main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int device = 0, sm_count = 0;
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDevice(&device));
  BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  sm_count = prop.multiProcessorCount;
  g_copy_gbps = CopyBandwidth();
  std::printf("device %d: %s, sm_%d%d, %d SMs\n", device, prop.name, prop.major, prop.minor,
              sm_count);
  std::printf("device-to-device copy: %.1f GB/s (read + write bytes)\n", g_copy_gbps);
  std::printf("%-18s %-44s %10s %9s %7s\n", "kernel", "shape", "us", "GB/s", "of copy");
  for (const ModelShape& m : {kSmol, kLlama8B}) {
    for (int32_t window : {1020, 4092}) {
      for (int32_t n : {1, 16, 64, 256}) {
        if (quick && n != 64) continue;
        BenchDecodeAttention(m, n, window, sm_count);
      }
    }
  }
  // How the split count moves the target shapes (ChooseDecodeSplits' choice is the line above).
  if (!quick) {
    for (int32_t n : {64, 256}) {
      for (int32_t splits : {1, 2, 3, 4, 6})
        BenchDecodeAttention(kLlama8B, n, 1020, sm_count, splits);
    }
    for (int32_t splits : {1, 2, 4, 8}) BenchDecodeAttention(kSmol, 64, 1020, sm_count, splits);
  }
  for (const ModelShape& m : {kSmol, kLlama8B}) BenchPrefillAttention(m, 4, 256, 1020);
  for (const ModelShape& m : {kSmol, kLlama8B}) BenchElementwise(m, 256);
  std::printf("copy_gbps=%.1f\n", g_copy_gbps);
  return 0;
}

}  // namespace
}  // namespace streamd::kernels::cuda

int main(int argc, char** argv) { return streamd::kernels::cuda::Main(argc, argv); }
