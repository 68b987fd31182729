// `streamd eval`: streaming perplexity of a text under each KV-cache mode (StreamingLLM,
// Xiao et al. 2023, section 4.1). The text's first N tokens go through ONE session in chunks
// of C tokens; every token after the first is scored from the logits of the token before it:
//
//   nll_i = logsumexp(logits_{i-1}) - logits_{i-1}[t_i]      (f64; tools/perplexity.h)
//
// Modes, each with a "cache size" L of tokens attention may see (L = S + W):
//   dense      no eviction, L = the model context; N over the context is an error.
//   window     S = 0, W = L: the most recent L tokens only (the ablation).
//   sink       S sinks + a window of W = L - S (the method).
//   recompute  the paper's "sliding window with re-computation" baseline: for each token,
//              the last L tokens are encoded from scratch in a fresh cache (positions
//              0..L-1) and only the next token is scored. (N - L) * L forward tokens: slow.
// Without --cache-size, L = --sinks + --window, so `--mode sink,window --sinks 4 --window 252`
// compares sink 4+252 with window 256 at the same memory, as the paper does.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/model_check.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "engine/tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/model_path.h"
#include "tools/perplexity.h"
#include "tools/plot.h"

namespace streamd::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Above this many forward tokens the recompute baseline gets a warning (about 20 minutes on
// one core for the default model).
constexpr int64_t kRecomputeWarnTokens = 1'000'000;

enum class EvalMode { kDense, kWindow, kSink, kRecompute };

const char* ModeName(EvalMode m) {
  switch (m) {
    case EvalMode::kDense:
      return "dense";
    case EvalMode::kWindow:
      return "window";
    case EvalMode::kSink:
      return "sink";
    case EvalMode::kRecompute:
      return "recompute";
  }
  return "?";
}

StatusOr<EvalMode> ParseMode(const std::string& name) {
  if (name == "dense") return EvalMode::kDense;
  if (name == "window") return EvalMode::kWindow;
  if (name == "sink") return EvalMode::kSink;
  if (name == "recompute") return EvalMode::kRecompute;
  return InvalidArgumentError("--mode \"" + name +
                              "\" is not one of dense, window, sink, recompute");
}

// "a,b" "c" -> {a, b, c}; empty items are errors.
StatusOr<std::vector<std::string>> SplitList(const std::vector<std::string>& values,
                                             const std::string& flag) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    std::stringstream ss(v);
    std::string item;
    bool any = false;
    while (std::getline(ss, item, ',')) {
      any = true;
      if (item.empty())
        return InvalidArgumentError("--" + flag + " \"" + v + "\" has an empty item");
      out.push_back(item);
    }
    if (!any) return InvalidArgumentError("--" + flag + " is empty");
  }
  return out;
}

// One evaluated configuration.
struct RunSpec {
  EvalMode mode = EvalMode::kSink;
  int32_t sinks = 0;   // S
  int32_t window = 0;  // W (dense: the model context)

  int64_t cache_tokens() const { return static_cast<int64_t>(sinks) + window; }
  std::string Label() const {
    switch (mode) {
      case EvalMode::kDense:
        return "dense";
      case EvalMode::kSink:
        return "sink " + std::to_string(sinks) + "+" + std::to_string(window);
      default:
        return std::string(ModeName(mode)) + " " + std::to_string(window);
    }
  }
  // First token index scored from a truncated context (N or more: never).
  int64_t first_truncated() const { return cache_tokens() + 1; }
};

struct RunResult {
  RunSpec spec;
  NllAccumulator nll;
  int32_t peak_blocks = 0;
  int64_t peak_cache_bytes = 0;
  int64_t forward_tokens = 0;  // tokens run through the model (recompute: many times N)
  double forward_seconds = 0;  // time inside the steps
  double seconds = 0;          // wall time of the run, scoring included
  explicit RunResult(int64_t segment) : nll(segment) {}
};

struct EvalOptions {
  int32_t chunk = 64;
  int32_t block_size = 16;
  bool progress = false;
};

// Tracks the peak number of blocks a session holds.
void NotePeak(const SessionCache& cache, const KvShape& shape, RunResult* r) {
  r->peak_blocks = std::max(r->peak_blocks, cache.blocks_held());
  r->peak_cache_bytes = static_cast<int64_t>(r->peak_blocks) *
                        BlockPool::BlockBytes(shape, cache.pool()->block_size());
}

void MaybeProgress(const EvalOptions& opt, const RunResult& r, int64_t done, int64_t total,
                   int64_t* next_report, int64_t every) {
  if (!opt.progress || done < *next_report) return;
  while (*next_report <= done) *next_report += every;
  std::fprintf(stderr, "[%s] %lld/%lld ppl %.4f %.1f tok/s\n", r.spec.Label().c_str(),
               static_cast<long long>(done), static_cast<long long>(total), r.nll.Perplexity(),
               r.forward_seconds > 0 ? r.forward_tokens / r.forward_seconds : 0.0);
}

// Streams tokens[0, n_stream) through `cache` in chunks, one step each (kAll logits), and
// scores every target g + 1 < tokens.size() predicted by a streamed token g.
Status StreamAndScore(StepRunner& step, SessionCache& cache, std::span<const int32_t> tokens,
                      int64_t n_stream, const KvShape& shape, const EvalOptions& opt,
                      std::vector<float>& logits, RunResult* r) {
  const int32_t vocab = step.model().config().vocab_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  int64_t next_report = 0;
  for (int64_t i = 0; i < n_stream; i += opt.chunk) {
    const int64_t len = std::min<int64_t>(opt.chunk, n_stream - i);
    const auto t0 = Clock::now();
    STREAMD_RETURN_IF_ERROR(
        step.Run(tokens.subspan(i, len), cache, LogitsMode::kAll, logits.data()));
    r->forward_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    r->forward_tokens += len;
    NotePeak(cache, shape, r);
    for (int64_t k = 0; k < len; ++k) {
      const int64_t target = i + k + 1;
      if (target >= n) break;
      r->nll.Add(target, TokenNll(logits.data() + k * vocab, vocab, tokens[target]));
    }
    MaybeProgress(opt, *r, i + len, n_stream, &next_report, 1000);
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<BlockPool>> PoolFor(const CacheSpec& spec, const LlamaConfig& c,
                                             int32_t block_size) {
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  const int32_t blocks =
      SessionCache::PeakBlocks(SessionCache::Effective(spec, c.context_length), block_size);
  return BlockPool::Create(shape, block_size, blocks * BlockPool::BlockBytes(shape, block_size));
}

// dense, window, sink: one session over all N tokens.
StatusOr<RunResult> RunStreaming(LlamaModel& model, std::span<const int32_t> tokens,
                                 const RunSpec& run, int64_t segment, const EvalOptions& opt) {
  const LlamaConfig& c = model.config();
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  const CacheMode mode = run.mode == EvalMode::kDense    ? CacheMode::kDense
                         : run.mode == EvalMode::kWindow ? CacheMode::kWindow
                                                         : CacheMode::kSink;
  const CacheSpec spec{mode, run.sinks, run.window, opt.chunk};
  STREAMD_ASSIGN_OR_RETURN(auto pool, PoolFor(spec, c, opt.block_size));
  STREAMD_ASSIGN_OR_RETURN(auto cache, SessionCache::Create(pool.get(), spec, c.context_length));
  StepRunner step(model);
  RunResult r(segment);
  r.spec = run;
  std::vector<float> logits(static_cast<size_t>(opt.chunk) * c.vocab_size);
  const auto t0 = Clock::now();
  STREAMD_RETURN_IF_ERROR(StreamAndScore(step, *cache, tokens, static_cast<int64_t>(tokens.size()),
                                         shape, opt, logits, &r));
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

// recompute: target j is scored from a fresh cache holding tokens[max(0, j - L), j). While
// j <= L that context is the whole prefix, so one streamed pass (identical to dense) scores
// targets 1..L; every later target costs a from-scratch encoding of L tokens.
StatusOr<RunResult> RunRecompute(LlamaModel& model, std::span<const int32_t> tokens,
                                 const RunSpec& run, int64_t segment, const EvalOptions& opt) {
  const LlamaConfig& c = model.config();
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int32_t l = run.window;
  // A cache that holds exactly L tokens: it never evicts, so it is a dense cache of L tokens.
  const CacheSpec spec{CacheMode::kWindow, 0, l, opt.chunk};
  STREAMD_ASSIGN_OR_RETURN(auto pool, PoolFor(spec, c, opt.block_size));
  StepRunner step(model);
  RunResult r(segment);
  r.spec = run;
  std::vector<float> logits(static_cast<size_t>(opt.chunk) * c.vocab_size);
  const auto t0 = Clock::now();
  {
    STREAMD_ASSIGN_OR_RETURN(auto cache, SessionCache::Create(pool.get(), spec, c.context_length));
    STREAMD_RETURN_IF_ERROR(
        StreamAndScore(step, *cache, tokens, std::min<int64_t>(n, l), shape, opt, logits, &r));
  }
  int64_t next_report = 0;
  for (int64_t j = l + 1; j < n; ++j) {
    STREAMD_ASSIGN_OR_RETURN(auto cache, SessionCache::Create(pool.get(), spec, c.context_length));
    const auto f0 = Clock::now();
    for (int64_t i = j - l; i < j; i += opt.chunk) {
      const int64_t len = std::min<int64_t>(opt.chunk, j - i);
      STREAMD_RETURN_IF_ERROR(
          step.Run(tokens.subspan(i, len), *cache, LogitsMode::kLast, logits.data()));
      r.forward_tokens += len;
    }
    r.forward_seconds += std::chrono::duration<double>(Clock::now() - f0).count();
    NotePeak(*cache, shape, &r);
    r.nll.Add(j, TokenNll(logits.data(), c.vocab_size, tokens[j]));
    MaybeProgress(opt, r, j + 1, n, &next_report, 100);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

nlohmann::json JsonNumber(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

// Series read back from an earlier run's --segment-csv, for --plot-with.
StatusOr<std::vector<PlotSeries>> ReadSegmentCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read --plot-with " + path + ": " + std::strerror(errno));
  std::string line;
  std::getline(in, line);
  if (line.rfind("mode,sinks,window,segment_begin,segment_end,tokens,mean_nll,ppl", 0) != 0) {
    return InvalidArgumentError("--plot-with " + path +
                                " is not a segment CSV written by streamd eval --segment-csv");
  }
  std::vector<PlotSeries> out;
  std::map<std::string, size_t> index;
  int64_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string item;
    while (std::getline(ss, item, ',')) f.push_back(item);
    RunSpec spec;
    double begin = 0, end = 0, mean = 0;
    try {
      if (f.size() < 8) throw std::invalid_argument("short row");
      auto mode = ParseMode(f[0]);
      if (!mode.ok()) throw std::invalid_argument("mode");
      spec.mode = *mode;
      spec.sinks = std::stoi(f[1]);
      spec.window = std::stoi(f[2]);
      begin = std::stod(f[3]);
      end = std::stod(f[4]);
      mean = std::stod(f[6]);
    } catch (const std::exception&) {
      return InvalidArgumentError("--plot-with " + path + ": line " + std::to_string(line_no) +
                                  " is not a segment row");
    }
    const std::string label = spec.Label();
    auto [it, added] = index.emplace(label, out.size());
    if (added) out.push_back({label, {}, {}});
    out[it->second].x.push_back(0.5 * (begin + end));
    out[it->second].y.push_back(mean);
  }
  return out;
}

}  // namespace

int EvalCommand(int argc, char** argv) {
  std::string model_path = DefaultModelPath();
  std::string text_path, csv_path, segment_csv_path, plot_path;
  std::vector<std::string> mode_args, cache_size_args, plot_with;
  int64_t sinks = 4, window = 1020, n_tokens = 0, chunk = 64, segment = 1000, threads = 0;
  int64_t block_size = 16;
  bool json = false, progress = false;
  FlagParser flags(
      "streamd eval --text FILE [--model PATH] [--mode dense|window|sink|recompute ...]\n"
      "             [--sinks S] [--window W] [--cache-size L ...] [--tokens N] [--chunk C]\n"
      "             [--segment K] [--csv F] [--segment-csv F] [--plot F.png] [--json]\n"
      "Streaming perplexity of the first N tokens of FILE, streamed through one session per\n"
      "mode. The cache size L (tokens attention sees) is S + W unless --cache-size is given:\n"
      "sink keeps S sinks + the last L - S tokens, window the last L tokens, recompute\n"
      "re-encodes the last L tokens from scratch for every token (slow), dense keeps all\n"
      "(N <= the model context).");
  flags.String("model", &model_path, "GGUF model file");
  flags.String("text", &text_path, "UTF-8 text file to score (required)");
  flags.Strings("mode", &mode_args,
                "dense, window, sink or recompute; comma lists allowed (default: sink)");
  flags.Int("sinks", &sinks, 0, 1 << 20, "attention sinks S kept by the sink mode");
  flags.Int("window", &window, 1, 1 << 24, "window W of the sink mode; cache size L = S + W");
  flags.Strings("cache-size", &cache_size_args,
                "cache sizes L to run sink (S + (L - S)), window (L) and recompute (L) at; "
                "comma lists allowed (default: S + W)");
  flags.Int("tokens", &n_tokens, 2, int64_t{1} << 31,
            "score the first N tokens of the text (default: all)");
  flags.Int("chunk", &chunk, 1, 8192, "tokens per forward pass");
  flags.Int("segment", &segment, 1, int64_t{1} << 31, "tokens per reported segment");
  flags.Int("block-size", &block_size, 1, kMaxBlockSize, "tokens per KV block");
  flags.Int("threads", &threads, 0, 256, "worker threads; 0 = all cores");
  flags.String("csv", &csv_path, "write per-token rows: mode,sinks,window,token,nll,running_ppl");
  flags.String("segment-csv", &segment_csv_path,
               "write per-segment rows: mode,sinks,window,segment_begin,segment_end,tokens,"
               "mean_nll,ppl");
  flags.String("plot", &plot_path, "write a PNG of log-perplexity per segment (needs gnuplot)");
  flags.Strings("plot-with", &plot_with, "also plot the series of an earlier run's --segment-csv");
  flags.Bool("progress", &progress, "report progress on stderr");
  flags.Bool("json", &json, "print one JSON object with every mode's results as the last line");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) return PrintHelp(flags);
  if (!flags.was_set("text")) return Fail(InvalidArgumentError("--text FILE is required"));
  if (mode_args.empty()) mode_args.push_back("sink");

  // Modes and cache sizes, validated before anything is loaded.
  auto mode_names = SplitList(mode_args, "mode");
  if (!mode_names.ok()) return Fail(mode_names.status());
  std::vector<EvalMode> modes;
  for (const std::string& name : *mode_names) {
    auto m = ParseMode(name);
    if (!m.ok()) return Fail(m.status());
    if (std::find(modes.begin(), modes.end(), *m) == modes.end()) modes.push_back(*m);
  }
  std::vector<int64_t> cache_sizes;
  if (cache_size_args.empty()) {
    cache_sizes.push_back(sinks + window);
  } else {
    auto items = SplitList(cache_size_args, "cache-size");
    if (!items.ok()) return Fail(items.status());
    for (const std::string& item : *items) {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(item.c_str(), &end, 10);
      if (*end != '\0' || errno == ERANGE) {
        return Fail(InvalidArgumentError("--cache-size = \"" + item + "\" is not an integer"));
      }
      if (v < 1) {
        return Fail(InvalidArgumentError("--cache-size = " + item + " is below the minimum of 1"));
      }
      cache_sizes.push_back(v);
    }
  }
  std::vector<std::ofstream> outputs;
  for (const std::string* path : {&csv_path, &segment_csv_path}) {
    if (path->empty()) continue;
    outputs.emplace_back(*path);
    if (!outputs.back()) {
      return Fail(InvalidArgumentError("cannot write " + *path + ": " + std::strerror(errno)));
    }
  }
  std::ofstream* csv = csv_path.empty() ? nullptr : &outputs.front();
  std::ofstream* segment_csv = segment_csv_path.empty() ? nullptr : &outputs.back();
  if (!plot_path.empty()) {
    if (Status s = CheckGnuplot(plot_path); !s.ok()) return Fail(s, "--plot");
  }
  std::vector<PlotSeries> extra_series;
  for (const std::string& path : plot_with) {
    auto series = ReadSegmentCsv(path);
    if (!series.ok()) return Fail(series.status());
    extra_series.insert(extra_series.end(), series->begin(), series->end());
  }

  auto model_or = LlamaModel::Load(model_path);
  if (!model_or.ok()) return Fail(ExplainModelLoadFailure(model_path, model_or.status()));
  LlamaModel& model = **model_or;
  if (threads > 0) model.set_threads(static_cast<int32_t>(threads));
  const LlamaConfig& config = model.config();
  const int64_t context = config.context_length;
  if (sinks + window > context) {
    return Fail(InvalidArgumentError(
        "--sinks + --window = " + std::to_string(sinks) + " + " + std::to_string(window) + " = " +
        std::to_string(sinks + window) + " is over the model context of " +
        std::to_string(context) + " tokens"));
  }
  if (chunk > context) {
    return Fail(InvalidArgumentError("--chunk = " + std::to_string(chunk) +
                                     " is over the model context of " + std::to_string(context)));
  }
  std::vector<RunSpec> runs;
  for (EvalMode m : modes) {
    if (m == EvalMode::kDense) {
      runs.push_back({m, 0, static_cast<int32_t>(context)});
      continue;
    }
    for (int64_t l : cache_sizes) {
      if (l > context) {
        return Fail(InvalidArgumentError("--cache-size = " + std::to_string(l) +
                                         " is over the model context of " +
                                         std::to_string(context) + " tokens"));
      }
      if (m == EvalMode::kSink && l <= sinks) {
        return Fail(InvalidArgumentError(
            "--cache-size = " + std::to_string(l) + " leaves no window after --sinks " +
            std::to_string(sinks) + " (the sink mode needs a cache size over S)"));
      }
      const int32_t s = m == EvalMode::kSink ? static_cast<int32_t>(sinks) : 0;
      runs.push_back({m, s, static_cast<int32_t>(l - s)});
    }
  }

  // The text: whole file, add_bos as the model asks, special-token texts kept as text.
  std::ifstream in(text_path, std::ios::binary);
  if (!in) {
    return Fail(NotFoundError("cannot read --text " + text_path + ": " + std::strerror(errno)));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Fail(DataLossError("error reading --text " + text_path));
  auto vocab = tokenizer::Tokenizer::FromGguf(model.file());
  if (!vocab.ok()) return Fail(vocab.status(), model_path);
  auto encoded = (*vocab)->Encode(buf.str(), (*vocab)->add_bos(), /*parse_special=*/false);
  if (!encoded.ok()) return Fail(encoded.status(), "--text " + text_path);
  const std::vector<int32_t>& all_tokens = *encoded;
  const int64_t text_tokens = static_cast<int64_t>(all_tokens.size());
  if (text_tokens < 2) {
    return Fail(InvalidArgumentError("--text " + text_path + " encodes to " +
                                     std::to_string(text_tokens) +
                                     " token(s); eval needs at least 2"));
  }
  if (!flags.was_set("tokens")) n_tokens = text_tokens;
  if (n_tokens > text_tokens) {
    return Fail(InvalidArgumentError("--tokens = " + std::to_string(n_tokens) +
                                     " is more than the " + std::to_string(text_tokens) +
                                     " tokens of " + text_path));
  }
  if (std::find(modes.begin(), modes.end(), EvalMode::kDense) != modes.end() &&
      n_tokens > context) {
    return Fail(InvalidArgumentError(
        "dense mode keeps every token: N = " + std::to_string(n_tokens) +
        " tokens is over the model context of " + std::to_string(context) +
        " (use --tokens <= " + std::to_string(context) + ", or sink/window for longer texts)"));
  }
  for (const RunSpec& run : runs) {
    if (run.mode != EvalMode::kRecompute || n_tokens <= run.window + 1) continue;
    const int64_t work = (n_tokens - run.window - 1) * run.window;
    if (work > kRecomputeWarnTokens) {
      std::fprintf(stderr,
                   "streamd: warning: %s re-encodes %d tokens for each of %lld tokens: N*W = %lld "
                   "forward tokens, slow (use a smaller --tokens)\n",
                   run.Label().c_str(), run.window,
                   static_cast<long long>(n_tokens - run.window - 1), static_cast<long long>(work));
    }
  }
  const std::span<const int32_t> tokens(all_tokens.data(), static_cast<size_t>(n_tokens));
  const EvalOptions opt{static_cast<int32_t>(chunk), static_cast<int32_t>(block_size), progress};

  std::printf(
      "model %s, text %s: %lld tokens (BOS %s), scoring the first %lld; chunks of %lld, "
      "%d thread(s)\n",
      config.name.c_str(), text_path.c_str(), static_cast<long long>(text_tokens),
      (*vocab)->add_bos() ? "added" : "not added", static_cast<long long>(n_tokens),
      static_cast<long long>(chunk), model.threads());
  if (csv != nullptr) *csv << "mode,sinks,window,token,nll,running_ppl\n";
  if (segment_csv != nullptr) {
    *segment_csv << "mode,sinks,window,segment_begin,segment_end,tokens,mean_nll,ppl\n";
  }
  std::vector<RunResult> results;
  for (const RunSpec& run : runs) {
    auto r = run.mode == EvalMode::kRecompute ? RunRecompute(model, tokens, run, segment, opt)
                                              : RunStreaming(model, tokens, run, segment, opt);
    if (!r.ok()) return Fail(r.status(), run.Label());
    const RunResult& res = *r;
    std::fflush(stdout);
    if (csv != nullptr) {
      double sum = 0;
      for (size_t i = 0; i < res.nll.nlls().size(); ++i) {
        sum += res.nll.nlls()[i];
        *csv << ModeName(run.mode) << ',' << run.sinks << ',' << run.window << ','
             << res.nll.indices()[i] << ',' << Fmt("%.6f", res.nll.nlls()[i]) << ','
             << Fmt("%.6f", std::exp(sum / static_cast<double>(i + 1))) << '\n';
      }
      csv->flush();
    }
    if (segment_csv != nullptr) {
      for (const auto& seg : res.nll.segments()) {
        *segment_csv << ModeName(run.mode) << ',' << run.sinks << ',' << run.window << ','
                     << seg.begin << ',' << std::min<int64_t>(seg.end, n_tokens) << ',' << seg.count
                     << ',' << Fmt("%.6f", seg.MeanNll()) << ',' << Fmt("%.6f", seg.Perplexity())
                     << '\n';
      }
      segment_csv->flush();
    }
    if (progress) {
      std::fprintf(stderr, "[%s] done: ppl %.4f in %.1f s\n", run.Label().c_str(),
                   res.nll.Perplexity(), res.seconds);
    }
    results.push_back(std::move(r).value());
  }
  for (std::ofstream& out : outputs) {
    if (!out) return Fail(DataLossError("error writing a CSV file"));
  }

  // Summary, then per-segment perplexity side by side.
  std::printf("\n%-16s %5s %6s %6s %10s %13s %12s %10s %9s\n", "mode", "S", "W", "cache", "ppl",
              "ppl(evicted)", "peak cache", "tok/s", "seconds");
  for (const RunResult& r : results) {
    const double ppl_cut =
        r.spec.mode == EvalMode::kDense ? NAN : r.nll.PerplexityFrom(r.spec.first_truncated());
    std::printf("%-16s %5d %6d %6lld %10.4f %13s %9.2f MiB %10.1f %9.1f\n", r.spec.Label().c_str(),
                r.spec.sinks, r.spec.window, static_cast<long long>(r.spec.cache_tokens()),
                r.nll.Perplexity(), std::isfinite(ppl_cut) ? Fmt("%.4f", ppl_cut).c_str() : "-",
                r.peak_cache_bytes / 1048576.0, r.forward_tokens / r.forward_seconds, r.seconds);
  }
  std::printf("\n%-14s", "tokens");
  for (const RunResult& r : results) std::printf(" %16s", r.spec.Label().c_str());
  std::printf("\n");
  const size_t n_segments = results.empty() ? 0 : results.front().nll.segments().size();
  for (size_t s = 0; s < n_segments; ++s) {
    const auto& seg0 = results.front().nll.segments()[s];
    std::printf("%-14s", (std::to_string(seg0.begin) + "-" +
                          std::to_string(std::min<int64_t>(seg0.end, n_tokens)))
                             .c_str());
    for (const RunResult& r : results) {
      const auto& segs = r.nll.segments();
      std::printf(" %16.4f", s < segs.size() ? segs[s].Perplexity() : NAN);
    }
    std::printf("\n");
  }

  if (!plot_path.empty()) {
    LinePlot plot;
    plot.title = "Log-perplexity per " + std::to_string(segment) +
                 "-token segment: " + config.name + ", " +
                 text_path.substr(text_path.find_last_of('/') + 1);
    plot.x_label = "tokens streamed";
    plot.y_label = "log perplexity (mean NLL, nats)";
    for (const RunResult& r : results) {
      PlotSeries series{r.spec.Label(), {}, {}};
      for (const auto& seg : r.nll.segments()) {
        series.x.push_back(0.5 * (seg.begin + std::min<int64_t>(seg.end, n_tokens)));
        series.y.push_back(seg.MeanNll());
      }
      plot.series.push_back(std::move(series));
    }
    plot.series.insert(plot.series.end(), extra_series.begin(), extra_series.end());
    if (Status s = WritePng(plot, plot_path); !s.ok()) return Fail(s, "--plot");
  }

  if (json) {
    nlohmann::json out_results = nlohmann::json::array();
    for (const RunResult& r : results) {
      nlohmann::json segs = nlohmann::json::array();
      for (const auto& seg : r.nll.segments()) {
        segs.push_back({{"begin", seg.begin},
                        {"end", std::min<int64_t>(seg.end, n_tokens)},
                        {"tokens", seg.count},
                        {"ppl", JsonNumber(seg.Perplexity())}});
      }
      const bool dense = r.spec.mode == EvalMode::kDense;
      out_results.push_back(
          {{"label", r.spec.Label()},
           {"mode", ModeName(r.spec.mode)},
           {"sinks", r.spec.sinks},
           {"window", r.spec.window},
           {"cache_tokens", r.spec.cache_tokens()},
           {"scored_tokens", r.nll.count()},
           {"ppl", JsonNumber(r.nll.Perplexity())},
           {"mean_nll", r.nll.MeanNll()},
           {"evicted_scored_tokens", dense ? 0 : r.nll.CountFrom(r.spec.first_truncated())},
           {"ppl_evicted",
            dense ? nlohmann::json() : JsonNumber(r.nll.PerplexityFrom(r.spec.first_truncated()))},
           {"peak_blocks", r.peak_blocks},
           {"peak_cache_bytes", r.peak_cache_bytes},
           {"forward_tokens", r.forward_tokens},
           {"tokens_per_s", r.forward_tokens / r.forward_seconds},
           {"seconds", r.seconds},
           {"segments", segs}});
    }
    nlohmann::json out = {{"model", config.name},
                          {"text", text_path},
                          {"text_tokens", text_tokens},
                          {"tokens", n_tokens},
                          {"add_bos", (*vocab)->add_bos()},
                          {"chunk", chunk},
                          {"segment", segment},
                          {"block_size", block_size},
                          {"threads", model.threads()},
                          {"results", out_results}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
