// `streamd bench-memory`: memory stays flat. Streams N tokens (default 1,000,000) through one
// sink session (S sinks + a window of W, chunks of C) and every K tokens records the process's
// resident set (/proc/self/statm) and the blocks the session holds. After the window fills,
// blocks_held must stay at its bound and RSS must not creep: eviction recycles ring blocks and
// the pool was allocated (and touched) once at start-up.
//
// Model: --model PATH (tokens from --text, repeated to length N, or random ids), or
// --synthetic: random weights with the default model's cache shape (30 layers, 3 kv heads,
// head_dim 64) but tiny elsewhere, so the run is dominated by the cache machinery.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "engine/tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/model_path.h"
#include "tools/plot.h"

namespace streamd::tools {
namespace {

// Resident set size of this process in bytes (/proc/self/statm, field 2), or -1.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return -1;
  return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// Peak resident set size (VmHWM of /proc/self/status) in bytes, or -1.
int64_t PeakResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// The default model's cache shape with everything else tiny.
SyntheticModelSpec TinySmolLm2CacheShape() {
  SyntheticModelSpec spec;
  spec.n_layers = 30;
  spec.dim = 192;
  spec.n_heads = 3;
  spec.n_kv_heads = 3;  // head_dim = 192 / 3 = 64, as SmolLM2-135M
  spec.ffn_dim = 256;
  spec.vocab_size = 512;
  spec.context_length = 8192;
  return spec;
}

struct Sample {
  int64_t tokens = 0;
  int64_t rss_bytes = 0;
  int32_t blocks_held = 0;
  int64_t tokens_cached = 0;
  double seconds = 0;
};

double MiB(int64_t bytes) { return bytes / 1048576.0; }

}  // namespace

int BenchMemoryCommand(int argc, char** argv) {
  std::string model_path = DefaultModelPath();
  std::string text_path, csv_path, plot_path;
  int64_t n_tokens = 1'000'000, sinks = 4, window = 1020, chunk = 64, every = 10'000;
  int64_t block_size = 16, threads = 0, seed = 1;
  double max_growth_mib = -1;
  bool synthetic = false, json = false;
  FlagParser flags(
      "streamd bench-memory [--model PATH | --synthetic] [--text FILE] [--tokens N]\n"
      "                     [--sinks S] [--window W] [--chunk C] [--every K] [--csv F]\n"
      "                     [--plot F.png] [--max-growth-mib M] [--json]\n"
      "Streams N tokens through one sink session and records the process RSS and the blocks\n"
      "the session holds every K tokens: both must stay flat once the window is full.");
  flags.String("model", &model_path, "GGUF model file");
  flags.Bool("synthetic", &synthetic,
             "random-weight model with the default model's cache shape (30 layers, 3 kv heads, "
             "head_dim 64), tiny elsewhere (dim 192, ffn 256, vocab 512)");
  flags.String("text", &text_path, "feed this file's tokens (repeated) instead of random ids");
  flags.Int("tokens", &n_tokens, 1, int64_t{1} << 40, "tokens to stream");
  flags.Int("sinks", &sinks, 0, 1 << 20, "attention sinks S");
  flags.Int("window", &window, 1, 1 << 24, "window W");
  flags.Int("chunk", &chunk, 1, 8192, "tokens per forward pass");
  flags.Int("every", &every, 1, int64_t{1} << 40, "record a sample every K tokens");
  flags.Int("block-size", &block_size, 1, kMaxBlockSize, "tokens per KV block");
  flags.Int("threads", &threads, 0, 256, "worker threads; 0 = all cores");
  flags.Int("seed", &seed, 0, INT64_MAX, "seed of the random token ids");
  flags.String(
      "csv", &csv_path,
      "write rows: tokens,rss_bytes,rss_mib,blocks_held,cache_bytes,tokens_cached,seconds");
  flags.String("plot", &plot_path, "write a PNG of RSS and cache MiB vs tokens (needs gnuplot)");
  flags.Float("max-growth-mib", &max_growth_mib, 0, 1e9,
              "fail (exit 1) when RSS grows by more than M MiB between the first sample with a "
              "full window and the last (default: report only)");
  flags.Bool("json", &json, "print one JSON object with the samples as the last line");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) return PrintHelp(flags);
  if (synthetic && (flags.was_set("model") || flags.was_set("text"))) {
    return Fail(InvalidArgumentError("--synthetic takes no --model or --text"));
  }
  if (!plot_path.empty()) {
    if (Status s = CheckGnuplot(plot_path); !s.ok()) return Fail(s, "--plot");
  }
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    if (!csv)
      return Fail(InvalidArgumentError("cannot write " + csv_path + ": " + std::strerror(errno)));
  }

  auto model_or =
      synthetic ? MakeSyntheticModel(TinySmolLm2CacheShape()) : LlamaModel::Load(model_path);
  if (!model_or.ok()) return Fail(model_or.status(), synthetic ? "--synthetic" : model_path);
  LlamaModel& model = **model_or;
  if (threads > 0) model.set_threads(static_cast<int32_t>(threads));
  const LlamaConfig& c = model.config();
  if (sinks + window > c.context_length) {
    return Fail(InvalidArgumentError("--sinks + --window = " + std::to_string(sinks + window) +
                                     " is over the model context of " +
                                     std::to_string(c.context_length) + " tokens"));
  }

  // The token source: a text's tokens, cycled, or random ids.
  std::vector<int32_t> source;
  if (!text_path.empty()) {
    std::ifstream in(text_path, std::ios::binary);
    if (!in)
      return Fail(NotFoundError("cannot read --text " + text_path + ": " + std::strerror(errno)));
    std::ostringstream buf;
    buf << in.rdbuf();
    auto vocab = tokenizer::Tokenizer::FromGguf(model.file());
    if (!vocab.ok()) return Fail(vocab.status(), model_path);
    auto ids = (*vocab)->Encode(buf.str(), (*vocab)->add_bos(), false);
    if (!ids.ok()) return Fail(ids.status(), "--text " + text_path);
    if (ids->empty()) return Fail(InvalidArgumentError("--text " + text_path + " has no tokens"));
    source = std::move(ids).value();
  } else {
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    std::uniform_int_distribution<int32_t> pick(0, c.vocab_size - 1);
    source.resize(static_cast<size_t>(std::min<int64_t>(n_tokens, 1 << 20)));
    for (int32_t& t : source) t = pick(rng);
  }

  const CacheSpec spec{CacheMode::kSink, static_cast<int32_t>(sinks), static_cast<int32_t>(window),
                       static_cast<int32_t>(chunk)};
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  const int32_t b = static_cast<int32_t>(block_size);
  const int32_t bound =
      SessionCache::PeakBlocks(SessionCache::Effective(spec, c.context_length), b);
  auto pool = BlockPool::Create(shape, b, bound * BlockPool::BlockBytes(shape, b));
  if (!pool.ok()) return Fail(pool.status());
  auto cache_or = SessionCache::Create(pool->get(), spec, c.context_length);
  if (!cache_or.ok()) return Fail(cache_or.status());
  SessionCache& cache = **cache_or;
  const int64_t block_bytes = BlockPool::BlockBytes(shape, b);

  std::printf(
      "model %s, sink cache S %lld + W %lld, chunks of %lld, blocks of %d: bound %d "
      "blocks = %.2f MiB; pool %.2f MiB; %d thread(s)\n",
      synthetic ? "synthetic (30 layers, 3 kv heads, head_dim 64)" : c.name.c_str(),
      static_cast<long long>(sinks), static_cast<long long>(window), static_cast<long long>(chunk),
      b, bound, MiB(bound * block_bytes), MiB((*pool)->total_bytes()), model.threads());
  std::printf("%12s %12s %12s %12s %10s\n", "tokens", "rss MiB", "blocks", "cached", "seconds");
  if (csv.is_open()) {
    csv << "tokens,rss_bytes,rss_mib,blocks_held,cache_bytes,tokens_cached,seconds\n";
  }

  using Clock = std::chrono::steady_clock;
  StepRunner step(model);
  std::vector<float> logits(c.vocab_size);
  std::vector<int32_t> batch;
  std::vector<Sample> samples;
  const auto t0 = Clock::now();
  auto record = [&](int64_t seen) {
    Sample s{seen, ResidentBytes(), cache.blocks_held(), cache.tokens_cached(),
             std::chrono::duration<double>(Clock::now() - t0).count()};
    samples.push_back(s);
    std::printf("%12lld %12.2f %12d %12lld %10.1f\n", static_cast<long long>(s.tokens),
                MiB(s.rss_bytes), s.blocks_held, static_cast<long long>(s.tokens_cached),
                s.seconds);
    std::fflush(stdout);
    if (csv.is_open()) {
      char mib[32];
      std::snprintf(mib, sizeof(mib), "%.3f", MiB(s.rss_bytes));
      csv << s.tokens << ',' << s.rss_bytes << ',' << mib << ',' << s.blocks_held << ','
          << static_cast<int64_t>(s.blocks_held) * block_bytes << ',' << s.tokens_cached << ','
          << s.seconds << '\n';
      csv.flush();
    }
  };
  record(0);
  int64_t seen = 0;
  while (seen < n_tokens) {
    // Chunks end exactly on sample points.
    const int64_t next_sample = (seen / every + 1) * every;
    const int64_t len = std::min({chunk, n_tokens - seen, next_sample - seen});
    batch.resize(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) {
      batch[i] = source[static_cast<size_t>((seen + i) % static_cast<int64_t>(source.size()))];
    }
    if (Status s = step.Run(batch, cache, LogitsMode::kLast, logits.data()); !s.ok()) {
      return Fail(s, "at token " + std::to_string(seen));
    }
    seen += len;
    if (cache.blocks_held() > bound) {
      return Fail(InternalError("the session holds " + std::to_string(cache.blocks_held()) +
                                " blocks, over its bound of " + std::to_string(bound)));
    }
    if (seen % every == 0 || seen == n_tokens) record(seen);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  // Growth from the first sample whose window was full (the cache cannot grow after it).
  const int64_t full = sinks + window + chunk;
  const Sample* first_full = nullptr;
  for (const Sample& s : samples) {
    if (s.tokens >= full) {
      first_full = &s;
      break;
    }
  }
  const Sample& last = samples.back();
  int32_t max_blocks = 0;
  for (const Sample& s : samples) max_blocks = std::max(max_blocks, s.blocks_held);
  const double growth = first_full != nullptr ? MiB(last.rss_bytes - first_full->rss_bytes) : 0.0;
  std::printf("\n%lld tokens in %.1f s (%.1f tok/s); blocks held: max %d (bound %d, %.2f MiB)\n",
              static_cast<long long>(n_tokens), seconds, n_tokens / seconds, max_blocks, bound,
              MiB(static_cast<int64_t>(max_blocks) * block_bytes));
  if (first_full != nullptr) {
    std::printf(
        "RSS %.2f MiB at %lld tokens, %.2f MiB at %lld tokens: growth %+.2f MiB; "
        "peak RSS %.2f MiB\n",
        MiB(first_full->rss_bytes), static_cast<long long>(first_full->tokens), MiB(last.rss_bytes),
        static_cast<long long>(last.tokens), growth, MiB(PeakResidentBytes()));
  }

  if (!plot_path.empty()) {
    LinePlot plot;
    plot.title = "Memory while streaming " + std::to_string(n_tokens) + " tokens: sink cache S " +
                 std::to_string(sinks) + " + W " + std::to_string(window) + ", " +
                 (synthetic ? std::string("synthetic model (SmolLM2 cache shape)") : c.name);
    plot.x_label = "tokens streamed";
    plot.y_label = "MiB";
    PlotSeries rss{"process RSS", {}, {}}, kv{"KV blocks held", {}, {}};
    for (const Sample& s : samples) {
      rss.x.push_back(static_cast<double>(s.tokens));
      rss.y.push_back(MiB(s.rss_bytes));
      kv.x.push_back(static_cast<double>(s.tokens));
      kv.y.push_back(MiB(static_cast<int64_t>(s.blocks_held) * block_bytes));
    }
    plot.series = {rss, kv};
    if (Status s = WritePng(plot, plot_path); !s.ok()) return Fail(s, "--plot");
  }

  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Sample& s : samples) {
      rows.push_back({{"tokens", s.tokens},
                      {"rss_bytes", s.rss_bytes},
                      {"blocks_held", s.blocks_held},
                      {"tokens_cached", s.tokens_cached},
                      {"seconds", s.seconds}});
    }
    nlohmann::json out = {{"model", synthetic ? "synthetic" : c.name},
                          {"tokens", n_tokens},
                          {"sinks", sinks},
                          {"window", window},
                          {"chunk", chunk},
                          {"block_size", block_size},
                          {"bound_blocks", bound},
                          {"block_bytes", block_bytes},
                          {"max_blocks_held", max_blocks},
                          {"rss_growth_mib", growth},
                          {"peak_rss_bytes", PeakResidentBytes()},
                          {"seconds", seconds},
                          {"tokens_per_s", n_tokens / seconds},
                          {"samples", rows}};
    std::cout << out.dump() << std::endl;
  }
  if (max_growth_mib >= 0 && growth > max_growth_mib) {
    return Fail(FailedPreconditionError("RSS grew by " + std::to_string(growth) +
                                        " MiB after the window filled, over --max-growth-mib " +
                                        std::to_string(max_growth_mib)));
  }
  return 0;
}

}  // namespace streamd::tools
