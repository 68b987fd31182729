#include "tools/bench_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/cache/session_cache.h"
#include "tools/commands.h"

namespace streamd::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int32_t kBlockSize = 16;
constexpr int32_t kMaxChunk = 256;

struct Row {
  int64_t sessions = 0;
  bool fits = true;
  std::string error;
  double step_ms_p50 = 0, step_ms_min = 0;
  double tokens_per_s = 0;
  double kv_bytes = 0, total_bytes = 0, gbps = 0, x_ideal = 0;
};

StatusOr<Row> RunOne(ModelBackend& model, const DecodeStepBenchOptions& o, int64_t n) {
  const LlamaConfig& c = model.config();
  const CacheSpec spec = SessionCache::Effective(
      {CacheMode::kSink, static_cast<int32_t>(o.sinks), static_cast<int32_t>(o.window),
       std::min(kMaxChunk, c.context_length)},
      c.context_length);
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  const int64_t pool_bytes = n * SessionCache::PeakBlocks(spec, kBlockSize) *
                             BlockPool::BlockBytes(shape, kBlockSize);
  Row row;
  row.sessions = n;
  auto pool = model.CreatePool(shape, kBlockSize, pool_bytes);
  if (!pool.ok()) {
    row.fits = false;
    row.error = pool.status().message();
    return row;
  }
  std::vector<std::unique_ptr<SessionCache>> caches;
  for (int64_t s = 0; s < n; ++s) {
    STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SessionCache> cache,
                             SessionCache::Create(pool->get(), spec, c.context_length));
    // Fast-forward past S + W (eviction has begun), staggered so sessions differ: the
    // bookkeeping only (the K/V stay whatever the pool holds, which is all a timing needs).
    int64_t left = spec.sinks + spec.window + 1 + s % kBlockSize;
    const std::vector<int32_t> zeros(static_cast<size_t>(spec.max_chunk), 0);
    while (left > 0) {
      const int32_t chunk = static_cast<int32_t>(std::min<int64_t>(left, spec.max_chunk));
      STREAMD_RETURN_IF_ERROR(cache->BeginChunk({zeros.data(), static_cast<size_t>(chunk)}));
      cache->Commit(chunk);
      left -= chunk;
    }
    caches.push_back(std::move(cache));
  }
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, c.vocab_size - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::vector<SequenceInput> seqs;
  for (auto& cache : caches) seqs.push_back({cache.get(), 1, LogitsMode::kLast});
  for (int32_t& t : tokens) t = pick(rng);
  std::vector<int32_t> next(tokens.size());
  std::vector<double> ms;
  // Greedy decode: each step's argmax ids are the next step's input (picked on the device by
  // the CUDA backend, so only ids cross PCIe).
  for (int64_t step = 0; step < o.steps + 3; ++step) {  // 3 warm-up steps (graph capture)
    const auto t0 = Clock::now();
    STREAMD_RETURN_IF_ERROR(model.ForwardGreedy(tokens, seqs, next.data()));
    tokens.swap(next);
    const auto t1 = Clock::now();
    if (step >= 3) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  row.step_ms_p50 = ms[ms.size() / 2];
  row.step_ms_min = ms.front();
  row.tokens_per_s = 1e3 * static_cast<double>(n) / row.step_ms_p50;
  // Per step: every weight once, every session's S + W cached keys and values once.
  row.kv_bytes = static_cast<double>(n) * (spec.sinks + spec.window) *
                 static_cast<double>((*pool)->bytes_per_token());
  row.total_bytes = static_cast<double>(model.weight_bytes()) + row.kv_bytes;
  row.gbps = row.total_bytes / (row.step_ms_p50 * 1e6);
  if (o.reference_gbps > 0) row.x_ideal = row.step_ms_p50 * 1e6 / (row.total_bytes / o.reference_gbps);
  caches.clear();  // blocks back before the pool goes
  return row;
}

}  // namespace

int RunDecodeStepBench(const DecodeStepBenchOptions& o) {
  auto loaded = LoadBenchModel(o.source, /*with_tokenizer=*/false);
  if (!loaded.ok()) return Fail(loaded.status(), o.source.synthetic.empty() ? o.source.model_path : "");
  ModelBackend& model = *loaded->model;
  model.set_threads(o.threads > 0 ? static_cast<int32_t>(o.threads)
                                  : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  std::printf("decode step: model %s on %s; sinks %lld window %lld; median of %lld steps\n",
              loaded->name.c_str(), model.device_description().c_str(),
              static_cast<long long>(o.sinks), static_cast<long long>(o.window),
              static_cast<long long>(o.steps));
  std::printf("%8s %10s %10s %12s %10s %10s %9s %8s\n", "sessions", "step ms", "min ms",
              "tok/s", "weights GB", "KV GB", "GB/s", "x ideal");
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t n : o.sessions) {
    auto row = RunOne(model, o, n);
    if (!row.ok()) return Fail(row.status());
    if (!row->fits) {
      std::printf("%8lld  does not fit: %s\n", static_cast<long long>(n), row->error.c_str());
      rows.push_back({{"sessions", n}, {"fits", false}, {"error", row->error}});
      continue;
    }
    std::printf("%8lld %10.3f %10.3f %12.1f %10.3f %10.3f %9.1f %8.2f\n",
                static_cast<long long>(n), row->step_ms_p50, row->step_ms_min, row->tokens_per_s,
                model.weight_bytes() / 1e9, row->kv_bytes / 1e9, row->gbps, row->x_ideal);
    rows.push_back({{"sessions", n},
                    {"fits", true},
                    {"step_ms_p50", row->step_ms_p50},
                    {"step_ms_min", row->step_ms_min},
                    {"tokens_per_s", row->tokens_per_s},
                    {"weight_bytes", model.weight_bytes()},
                    {"kv_bytes", row->kv_bytes},
                    {"gbps", row->gbps},
                    {"x_ideal", row->x_ideal}});
  }
  if (o.json) {
    const nlohmann::json out = {{"model", loaded->name},
                                {"backend", std::string(model.backend_name())},
                                {"device", model.device_description()},
                                {"sinks", o.sinks},
                                {"window", o.window},
                                {"steps", o.steps},
                                {"reference_gbps", o.reference_gbps},
                                {"results", rows}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
