// `streamd build`: compiles a model for this machine into a build plan (docs/BUILD.md): kernel
// choices timed here (engine/build_plan/cpu_tuner.h), the pre-packed weights those kernels read,
// and the eval gate's verdict on every choice that changes the numerics.
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backends/cpu/k_quant_defaults.h"
#include "engine/backends/cpu/llama_model.h"
#include "engine/build_plan/cpu_tuner.h"
#include "engine/build_plan/kv_calibration.h"
#include "engine/build_plan/machine_load.h"
#include "engine/build_plan/plan_binding.h"
#include "engine/build_plan/plan_file.h"
#include "engine/cache/kv_image.h"
#include "engine/cache/session_cache.h"
#include "engine/core/step_runner.h"
#include "engine/gguf/gguf_file.h"
#include "engine/snapshot/model_fingerprint.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/version.h"
#include "tools/build_stages.h"
#include "tools/commands.h"
#include "tools/model_path.h"
#include "tools/perplexity.h"

namespace streamd::tools {
namespace {

using Clock = std::chrono::steady_clock;
// The largest chunk the eval gate feeds (the 64+ bucket's probe).
constexpr int32_t kEvalChunk = static_cast<int32_t>(kBucketProbeTokens[kTokenBuckets - 1]);
constexpr int32_t kEvalBlockSize = 16;

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "1%", "1", "0.5%" -> percent.
StatusOr<double> ParsePercent(const std::string& text) {
  std::string digits = text;
  if (!digits.empty() && digits.back() == '%') digits.pop_back();
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (digits.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || v > 100) {
    return InvalidArgumentError("--max-ppl-increase = \"" + text +
                                "\" is not a percentage in [0, 100] (e.g. 1%)");
  }
  return v;
}

// Every token of the text file at `path` (`flag` names it in errors).
StatusOr<std::vector<int32_t>> TextTokens(const gguf::GgufFile& file, const std::string& flag,
                                          const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("--" + flag + ": cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  STREAMD_ASSIGN_OR_RETURN(auto vocab, tokenizer::Tokenizer::FromGguf(file));
  return vocab->Encode(text.str(), vocab->add_bos(), /*parse_special=*/false);
}

// Streams `tokens` through one sink cache (S + W) of the model's CacheShape (f16, or the int8
// cache SetInt8KvCache set), under its current tuning, and calls chunk(cache, i, len, logits)
// after each chunk of tokens [i, i + len) with their logits. The chunks cycle through every
// token bucket's probe size (64, 16, 8, 4, 1 tokens), so the products of every bucket, and the
// kernels a tuning picks for it, see some of the text.
using ChunkFn = std::function<Status(const SessionCache&, size_t, size_t, const float*)>;
Status StreamThroughSinkCache(LlamaModel& model, const std::vector<int32_t>& tokens, int64_t sinks,
                              int64_t window, const ChunkFn& chunk) {
  const LlamaConfig& c = model.config();
  const CacheSpec spec = SessionCache::Effective(
      {CacheMode::kSink, static_cast<int32_t>(sinks), static_cast<int32_t>(window), kEvalChunk},
      c.context_length);
  const KvShape shape = model.CacheShape();
  STREAMD_ASSIGN_OR_RETURN(auto pool,
                           BlockPool::Create(shape, kEvalBlockSize,
                                             SessionCache::PeakBlocks(spec, kEvalBlockSize) *
                                                 BlockPool::BlockBytes(shape, kEvalBlockSize)));
  STREAMD_ASSIGN_OR_RETURN(auto cache, SessionCache::Create(pool.get(), spec, c.context_length));
  std::vector<float> logits(static_cast<size_t>(kEvalChunk) * c.vocab_size);
  StepRunner runner(model);
  const std::span<const int32_t> all(tokens);
  size_t step = 0;
  for (size_t i = 0, len = 0; i + 1 < tokens.size(); i += len, ++step) {
    const size_t probe = static_cast<size_t>(
        kBucketProbeTokens[kTokenBuckets - 1 - static_cast<int>(step % kTokenBuckets)]);
    len = std::min(probe, tokens.size() - 1 - i);
    STREAMD_RETURN_IF_ERROR(
        runner.Run(all.subspan(i, len), *cache, LogitsMode::kAll, logits.data()));
    STREAMD_RETURN_IF_ERROR(chunk(*cache, i, len, logits.data()));
  }
  return OkStatus();
}

// Streaming perplexity of `tokens` (StreamThroughSinkCache: every token after the first scored).
StatusOr<double> SinkPerplexity(LlamaModel& model, const std::vector<int32_t>& tokens,
                                int64_t sinks, int64_t window) {
  const int32_t vocab = model.config().vocab_size;
  NllAccumulator nll(static_cast<int64_t>(tokens.size()));
  STREAMD_RETURN_IF_ERROR(
      StreamThroughSinkCache(model, tokens, sinks, window,
                             [&](const SessionCache&, size_t i, size_t len, const float* logits) {
                               for (size_t k = 0; k < len; ++k) {
                                 const size_t target = i + k + 1;
                                 nll.Add(static_cast<int64_t>(target),
                                         TokenNll(logits + k * vocab, vocab, tokens[target]));
                               }
                               return OkStatus();
                             }));
  return nll.Perplexity();
}

// The int8 KV cache's scales from the f16 K/V `tokens` leave in a sink cache: after each chunk
// (at most 64 tokens, under the window) every cached token's K and V widen the ranges, so each
// token is seen at least once (kv_calibration.h).
StatusOr<std::shared_ptr<const KvInt8Scales>> CalibrateInt8Kv(LlamaModel& model,
                                                              const std::vector<int32_t>& tokens,
                                                              int64_t sinks, int64_t window) {
  STREAMD_RETURN_IF_ERROR(model.SetInt8KvCache(nullptr));
  const LlamaConfig& c = model.config();
  KvRangeTracker tracker(c.n_layers, c.n_kv_heads, c.head_dim);
  KvImage image;
  const Status streamed = StreamThroughSinkCache(
      model, tokens, sinks, window, [&](const SessionCache& cache, size_t, size_t, const float*) {
        STREAMD_RETURN_IF_ERROR(ReadCacheKvInto(cache, &image));
        return tracker.Observe(image);
      });
  if (!streamed.ok()) return streamed;
  return tracker.Scales();
}

PrecisionDecision Decide(const char* name, double baseline, double ppl, double max_increase_pct,
                         const std::string& eval_text, int64_t eval_tokens) {
  PrecisionDecision d;
  d.name = name;
  d.baseline_ppl = baseline;
  d.ppl = ppl;
  d.increase_pct = 100.0 * (ppl / baseline - 1.0);
  d.max_increase_pct = max_increase_pct;
  d.accepted = d.increase_pct <= max_increase_pct;
  d.eval_text = eval_text;
  d.eval_tokens = eval_tokens;
  return d;
}

std::string Verdict(const PrecisionDecision& d, const std::string& detail) {
  char line[320];
  std::snprintf(line, sizeof line,
                "eval gate, %s%s: perplexity %.4f -> %.4f (%+.3f%%, limit %.3f%%): %s",
                d.name.c_str(), detail.c_str(), d.baseline_ppl, d.ppl, d.increase_pct,
                d.max_increase_pct, d.accepted ? "accepted" : "refused");
  return line;
}

struct Gated {
  CpuTuning tuning;
  std::vector<PrecisionDecision> decisions;
};

// The eval gate. The per-shape choices change rounding: first the other levels, then 8-bit
// activations, each taken on top of those accepted before it only while the streaming
// perplexity on the eval text stays within `max_increase_pct` of the tuning without any.
StatusOr<Gated> GateNumericsCuts(LlamaModel& model, const CpuTuning& tuned,
                                 const std::vector<int32_t>& eval_ids, const std::string& eval_text,
                                 int64_t sinks, int64_t window, double max_increase_pct,
                                 const std::function<void(const std::string&)>& say) {
  Gated out;
  out.tuning = tuned;
  out.tuning.isa.clear();
  STREAMD_RETURN_IF_ERROR(model.ApplyTuning(out.tuning));
  STREAMD_ASSIGN_OR_RETURN(const double baseline, SinkPerplexity(model, eval_ids, sinks, window));
  const struct {
    const char* name;
    int32_t bits;
  } cuts[] = {{"instruction-set level per product shape", kDefaultActivationBits},
              {"8-bit activations per product shape", 8}};
  for (const auto& cut : cuts) {
    CpuTuning candidate = out.tuning;
    for (const ShapeIsa& s : tuned.isa) {
      if (s.activation_bits == cut.bits) candidate.isa.push_back(s);
    }
    if (candidate.isa.size() == out.tuning.isa.size()) continue;  // nothing of this kind chosen
    STREAMD_RETURN_IF_ERROR(model.ApplyTuning(candidate));
    STREAMD_ASSIGN_OR_RETURN(const double ppl, SinkPerplexity(model, eval_ids, sinks, window));
    const PrecisionDecision d = Decide(cut.name, baseline, ppl, max_increase_pct, eval_text,
                                       static_cast<int64_t>(eval_ids.size()));
    say(Verdict(d,
                " (" + std::to_string(candidate.isa.size() - out.tuning.isa.size()) + " choices)"));
    if (d.accepted) out.tuning = candidate;
    out.decisions.push_back(d);
  }
  STREAMD_RETURN_IF_ERROR(model.ApplyTuning(out.tuning));
  return out;
}

// The int8 KV cache cut, under the tuning the gate kept: scales calibrated on `calibration_ids`,
// then the streaming perplexity on the eval text with them against the f16 cache. Accepted:
// the plan's kv_cache holds the scales, and the model keeps them.
StatusOr<PrecisionDecision> GateInt8KvCache(
    LlamaModel& model, const std::vector<int32_t>& calibration_ids,
    const std::string& calibration_source, const std::vector<int32_t>& eval_ids,
    const std::string& eval_text, int64_t sinks, int64_t window, double max_increase_pct,
    PlanKvCache* kv, const std::function<void(const std::string&)>& say) {
  STREAMD_ASSIGN_OR_RETURN(auto scales, CalibrateInt8Kv(model, calibration_ids, sinks, window));
  STREAMD_ASSIGN_OR_RETURN(const double baseline, SinkPerplexity(model, eval_ids, sinks, window));
  STREAMD_RETURN_IF_ERROR(model.SetInt8KvCache(scales));
  STREAMD_ASSIGN_OR_RETURN(const double ppl, SinkPerplexity(model, eval_ids, sinks, window));
  const PrecisionDecision d =
      Decide("int8 KV cache, per-channel scales", baseline, ppl, max_increase_pct, eval_text,
             static_cast<int64_t>(eval_ids.size()));
  say(Verdict(d, " (calibrated on " + calibration_source + ")"));
  if (!d.accepted) {
    STREAMD_RETURN_IF_ERROR(model.SetInt8KvCache(nullptr));
    return d;
  }
  const LlamaConfig& c = model.config();
  kv->dtype = "int8";
  kv->n_layers = c.n_layers;
  kv->n_kv_heads = c.n_kv_heads;
  kv->head_dim = c.head_dim;
  kv->k_scales = scales->k();
  kv->v_scales = scales->v();
  kv->calibration_text = calibration_source;
  kv->calibration_tokens = static_cast<int64_t>(calibration_ids.size());
  return d;
}

// A tuning stage's error; past --max-seconds, exit 3 (no plan written) rather than 1.
int FailTuning(const Status& status, int64_t max_seconds) {
  if (status.code() != StatusCode::kDeadlineExceeded) return Fail(status);
  std::fprintf(stderr, "streamd build: gave up after --max-seconds %lld; no plan written\n",
               static_cast<long long>(max_seconds));
  return 3;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

int BuildCommand(int argc, char** argv) {
  std::string model_path = DefaultModelPath(), out_path, target = "cpu", eval_text,
              calibration_text, max_increase_text = "1%", kv_cache = "auto";
  int64_t eval_tokens = 4096, calibration_tokens = 4096, rounds = 5, sinks = 4, window = 252,
          max_seconds = 0;
  bool reuse = false, quiet = false;
  FlagParser flags(
      "streamd build [--model M.gguf] [--out M.plan] [--target cpu] [--eval-text F]\n"
      "              [--calibration-text F] [--max-ppl-increase 1%] [--kv-cache auto|f16]\n"
      "              [--reuse] [--max-seconds N]\n"
      "Compiles the model for this machine into a build plan (docs/BUILD.md): kernel choices\n"
      "timed here and the weights pre-packed for them. Choices that change the numerics (the\n"
      "instruction-set level per product shape, 8-bit activations, an int8 KV cache calibrated\n"
      "on --calibration-text) are taken only with --eval-text, and only when the streaming\n"
      "(sink) perplexity on it rises by at most --max-ppl-increase.\n"
      "Serve it with `streamd serve --plan M.plan`.");
  flags.String("model", &model_path, "GGUF model file");
  flags.String("out", &out_path, "plan file to write (default: the model's path with .plan)");
  flags.String("target", &target, "cpu (cuda: not built yet)");
  flags.String("eval-text", &eval_text, "text the eval gate measures perplexity on");
  flags.String("calibration-text", &calibration_text,
               "text the int8 KV cache's scales are calibrated on (default: the eval text's "
               "tokens after the scored ones)");
  flags.Int("calibration-tokens", &calibration_tokens, 1, 1 << 20,
            "tokens of the calibration text used (default 4096)");
  flags.String("kv-cache", &kv_cache,
               "auto: an int8 KV cache when the eval gate accepts it; f16: keep f16 K/V");
  flags.String("max-ppl-increase", &max_increase_text,
               "largest streaming-perplexity rise a choice may cost, in percent (default 1%)");
  flags.Int("eval-tokens", &eval_tokens, 2, 1 << 20, "tokens of --eval-text scored (default 4096)");
  flags.Int("rounds", &rounds, 1, 101, "alternated timing rounds per comparison (default 5)");
  flags.Int("sinks", &sinks, 0, 1 << 16, "sinks of the cache the build times on (default 4)");
  flags.Int("window", &window, 1, 1 << 20, "window of the cache the build times on (default 252)");
  flags.Int("max-seconds", &max_seconds, 0, 1 << 20,
            "give up (exit 3, no plan written) when tuning runs longer (0: no limit)");
  flags.Bool("reuse", &reuse, "keep --out when it is a plan for this model, version and machine");
  flags.Bool("quiet", &quiet, "print only the stage lines (stderr) and the result line");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) return PrintHelp(flags);
  if (target == "cuda") {
    return Fail(UnimplementedError(
        "--target cuda: the CUDA target of streamd build does not exist yet; build a cpu plan"));
  }
  if (target != "cpu")
    return Fail(InvalidArgumentError("--target = \"" + target + "\": cpu or cuda"));
  if (kv_cache != "auto" && kv_cache != "f16") {
    return Fail(InvalidArgumentError("--kv-cache = \"" + kv_cache + "\": auto or f16"));
  }
  if (!calibration_text.empty() && eval_text.empty()) {
    return Fail(InvalidArgumentError(
        "--calibration-text needs --eval-text: a calibrated cut is taken only after the eval "
        "gate measured it"));
  }
  auto max_increase = ParsePercent(max_increase_text);
  if (!max_increase.ok()) return Fail(max_increase.status());
  if (out_path.empty()) out_path = PlanBesideModel(model_path);

  const auto started = Clock::now();
  auto file = gguf::GgufFile::Open(model_path);
  if (!file.ok()) return Fail(file.status(), model_path);
  if (reuse && Exists(out_path)) {
    auto current = OpenPlanFor(out_path, **file);
    if (current.ok()) {
      std::printf(
          "streamd build: %s is current for this model, streamd version and machine; "
          "kept\n",
          out_path.c_str());
      return 0;
    }
    std::printf("streamd build: rebuilding %s\n", current.status().message().c_str());
  }
  // The eval text's first --eval-tokens are scored; calibration reads --calibration-text, or
  // else the eval text's tokens after those (held out from the scoring).
  std::vector<int32_t> eval_ids, calibration_ids;
  std::string calibration_source;
  if (!eval_text.empty()) {
    auto ids = TextTokens(**file, "eval-text", eval_text);
    if (!ids.ok()) return Fail(ids.status());
    const int64_t min_tokens = 2 * (sinks + window);
    if (static_cast<int64_t>(ids->size()) < min_tokens) {
      return Fail(
          InvalidArgumentError("--eval-text " + eval_text + ": " + std::to_string(ids->size()) +
                               " tokens; the gate needs at least " + std::to_string(min_tokens) +
                               " (twice the sink cache, so most are scored after eviction)"));
    }
    const size_t scored = std::min(ids->size(), static_cast<size_t>(eval_tokens));
    eval_ids.assign(ids->begin(), ids->begin() + static_cast<std::ptrdiff_t>(scored));
    if (calibration_text.empty()) {
      const size_t end = std::min(ids->size(), scored + static_cast<size_t>(calibration_tokens));
      calibration_ids.assign(ids->begin() + static_cast<std::ptrdiff_t>(scored),
                             ids->begin() + static_cast<std::ptrdiff_t>(end));
      calibration_source =
          eval_text + " tokens " + std::to_string(scored) + ".." + std::to_string(end);
    } else {
      auto calib = TextTokens(**file, "calibration-text", calibration_text);
      if (!calib.ok()) return Fail(calib.status());
      calibration_ids = std::move(calib).value();
      if (calibration_ids.size() > static_cast<size_t>(calibration_tokens)) {
        calibration_ids.resize(static_cast<size_t>(calibration_tokens));
      }
      calibration_source =
          calibration_text + " tokens 0.." + std::to_string(calibration_ids.size());
    }
  }

  BuildPlan plan;
  plan.streamd_version = kStreamdVersion;
  plan.target = target;
  plan.model_fingerprint = ModelFingerprint(**file);
  plan.model_path = model_path;
  plan.hardware = CpuFingerprint();
  // From here on the input is valid: stage lines on stderr (build_stages.h).
  BuildStages stages(started);
  stages.Begin("load", "reading " + model_path +
                           " (tensors in types the products do not read "
                           "are converted)");
  auto loaded = LlamaModel::FromFile(std::move(file).value());
  if (!loaded.ok()) return Fail(loaded.status(), model_path);
  LlamaModel& model = **loaded;
  {
    const uint64_t converted = model.weights().converted_bytes;
    stages.End(converted > 0 ? std::to_string(converted >> 20) + " MiB converted" : "");
  }
  const LlamaConfig& config = model.config();
  plan.model_name = config.name.empty() ? config.architecture : config.name;
  const auto say = [&](const std::string& line) {
    if (!quiet) std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  };
  if (!quiet) {
    std::printf("streamd build: %s on %s\n  hardware: %s\n", plan.model_name.c_str(),
                model.device_description().c_str(), plan.hardware.Describe().c_str());
  }

  CpuTunerOptions options;
  options.sinks = sinks;
  options.window = window;
  options.rounds = static_cast<int32_t>(rounds);
  options.numerics_exact_only = eval_ids.empty();
  options.progress = say;
  if (max_seconds > 0) options.deadline = started + std::chrono::seconds(max_seconds);
  if (eval_ids.empty()) {
    say("no --eval-text: only choices that leave the logits bit for bit unchanged are tuned");
    // Unchanged from what a daemon without a plan serves: a K-quant file's matrices at 8-bit
    // activations where that is the default (k_quant_defaults.h).
    const CpuTuning served = KQuantDefaultTuning(model.weights(), model.tuning());
    if (served != model.tuning()) {
      if (Status s = model.ApplyTuning(served); !s.ok()) return Fail(s, "tune");
      say("K-quant matrices at 8-bit activations, as a daemon serves them without a plan "
          "(model.k_quant_activation_bits)");
    }
  }
  const MachineLoad load;
  stages.Begin("tune", std::string("timing kernel choices on this machine (") +
                           std::to_string(rounds) + " alternated rounds each" +
                           (eval_ids.empty() ? ", numerics-exact choices only)" : ")"));
  auto tuned = TuneCpu(model, options);
  if (!tuned.ok()) return FailTuning(tuned.status(), max_seconds);
  plan.tuning = tuned->tuning;
  plan.measurements = tuned->measurements;

  // Only with an eval text: without one the tuning's only level and bit choices are a K-quant
  // file's 8-bit defaults, which change no logit of what a daemon serves without a plan.
  if (!eval_ids.empty() && !plan.tuning.isa.empty()) {
    stages.Begin("eval gate", "streaming perplexity of each precision cut on " +
                                  std::to_string(eval_ids.size()) + " tokens of " + eval_text);
    auto gated = GateNumericsCuts(model, plan.tuning, eval_ids, eval_text, sinks, window,
                                  *max_increase, say);
    if (!gated.ok()) return Fail(gated.status(), "eval gate");
    plan.tuning = gated->tuning;
    plan.precision = gated->decisions;
  }
  // The int8 KV cache: considered with an eval text and enough calibration tokens to fill the
  // window once (the scales of a cache that never evicted would miss late positions' keys).
  if (kv_cache == "auto" && !eval_ids.empty()) {
    if (static_cast<int64_t>(calibration_ids.size()) < sinks + window) {
      say("int8 KV cache: not considered, " + std::to_string(calibration_ids.size()) +
          " calibration tokens (" + calibration_source + ") do not fill the " +
          std::to_string(sinks + window) + "-token cache; give --calibration-text");
    } else {
      stages.Begin("calibrate", "int8 KV cache scales from " + calibration_source +
                                    ", then its perplexity on the eval text");
      auto decided = GateInt8KvCache(model, calibration_ids, calibration_source, eval_ids,
                                     eval_text, sinks, window, *max_increase, &plan.kv_cache, say);
      if (!decided.ok()) return Fail(decided.status(), "eval gate");
      plan.precision.push_back(*decided);
      if (decided->accepted) {
        // The attention reads int8 rows now: half the bytes, another inner loop. Its grouping
        // and prefetch distance were timed on f16 caches; time them again on this one.
        say("int8 KV cache: the attention's grouping and prefetch distance timed again on it");
        auto retuned = RetuneAttention(model, options);
        if (!retuned.ok()) return FailTuning(retuned.status(), max_seconds);
        plan.tuning = retuned->tuning;
        for (PlanMeasurement& m : retuned->measurements) {
          m.what = "int8 KV cache, " + m.what;
          plan.measurements.push_back(std::move(m));
        }
      }
    }
  }

  stages.Begin("time steps", "decode steps of 1 and 16 sessions, the defaults against the plan");
  auto compared = CompareWithDefaults(model, plan.tuning, options);
  if (!compared.ok()) return FailTuning(compared.status(), max_seconds);
  for (const PlanMeasurement& m : *compared) {
    char line[256];
    std::snprintf(line, sizeof line, "%s: %.3f %s", m.what.c_str(), m.value, m.unit.c_str());
    say(line);
    plan.measurements.push_back(m);
  }

  const double others = load.OthersShare();
  plan.measurements.push_back(
      {"CPU time other processes took during the build", 100 * others, "%"});
  if (others > options.max_others_share) {
    std::fprintf(stderr,
                 "streamd build: warning: other processes took %.0f%% of the CPU during the "
                 "build; its timings may not hold on a quiet machine (rebuild then)\n",
                 100 * others);
  }
  // The pre-packed weights: the AMX copies (CPUs with AMX), then the 8-bit rows-in-lanes copies
  // of the matrices the plan runs at 8 bits, so that a start with the plan packs nothing.
  const LlamaWeights& w = model.weights();
  std::vector<uint8_t> packed;
  if (w.amx_packed_bytes > 0) {
    packed.assign(w.amx_storage.get(), w.amx_storage.get() + w.amx_packed_bytes);
    plan.amx_bytes = w.amx_packed_bytes;
  }
  const std::vector<uint8_t> vnni8 = Vnni8CopiesBlob(w);
  packed.insert(packed.end(), vnni8.begin(), vnni8.end());
  const bool amx = plan.amx_bytes > 0, eight = !vnni8.empty();
  plan.weights_layout = amx && eight ? "amx-packed+vnni8-packed"
                        : amx        ? "amx-packed"
                        : eight      ? "vnni8-packed"
                                     : "none";
  stages.Begin("write", out_path + " (" + std::to_string(packed.size() >> 20) +
                            " MiB of pre-packed weights)");
  plan.built_at = UtcNow();
  plan.build_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (Status s = WritePlanFile(out_path, plan, packed); !s.ok()) return Fail(s);
  auto written = PlanFile::Open(out_path);
  if (!written.ok()) return Fail(written.status());
  stages.End();
  std::printf("streamd build: wrote %s in %.1f s\n  %s\n", out_path.c_str(), plan.build_seconds,
              DescribePlan(**written).c_str());
  return 0;
}

}  // namespace streamd::tools
