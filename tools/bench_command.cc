// `streamd bench`: single-stream prefill and decode throughput of the CPU engine, measured the
// way llama.cpp's llama-bench measures (so the two can be run side by side): prefill = one
// batch of P random tokens into an empty cache; decode = G single-token steps from an empty
// cache. Each figure is the median of --reps repetitions, for each thread count asked.
// With --sessions N it runs the engine's closed-loop load benchmark instead (bench_sessions.h);
// with --sessions N --decode-steps K the decode-step benchmark (bench_decode.h); with --snapshot
// the session snapshot benchmark (bench_snapshot.h); with --tenants the tenant fairness
// benchmark (bench_tenants.h).
// --backend cpu|cuda|auto picks the backend (default cpu); --synthetic smollm2|llama3-8b runs
// a random-weight model of that shape instead of --model (on cuda, generated on the device).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/engine_types.h"
#include "engine/core/step_runner.h"
#include "kernels/cpu/matmul.h"
#include "tools/bench/load_metrics.h"
#include "tools/bench_decode.h"
#include "tools/bench_sessions.h"
#include "tools/bench_snapshot.h"
#include "tools/bench_tenants.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/model_path.h"

namespace streamd::tools {
namespace {

constexpr int32_t kBlockSize = 16;

// "1,4,16" -> {1, 4, 16}; every item in [min, max].
StatusOr<std::vector<int64_t>> ParseCountList(const std::string& flag, const std::string& text,
                                              int64_t max, int64_t min = 1) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < min || v > max) {
      return InvalidArgumentError("--" + flag + ": \"" + item + "\" is not a count in [" +
                                  std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgumentError("--" + flag + " is empty");
  return out;
}

// "portable, avx2, ...": every level's IsaName.
std::string IsaNames() {
  std::string names;
  for (kernels::cpu::Isa isa : kernels::cpu::kAllIsas) {
    names += (names.empty() ? "" : ", ") + std::string(kernels::cpu::IsaName(isa));
  }
  return names;
}

// --isa: a level this CPU has, by its IsaName.
Status ForceIsaByName(const std::string& name) {
  using kernels::cpu::Isa;
  for (Isa isa : kernels::cpu::kAllIsas) {
    if (name != kernels::cpu::IsaName(isa)) continue;
    if (!kernels::cpu::IsaSupported(isa)) {
      return FailedPreconditionError("--isa: this CPU (or OS) cannot run " + name);
    }
    kernels::cpu::ForceIsa(isa);
    return OkStatus();
  }
  return InvalidArgumentError("--isa: \"" + name + "\" is not one of " + IsaNames());
}

}  // namespace

int BenchCommand(int argc, char** argv) {
  std::string model_path = DefaultModelPath();
  std::string threads_text = "1,2";
  int64_t prompt_tokens = 512, gen_tokens = 128, reps = 5;
  std::string sessions_text;
  int64_t sinks = 4, max_batch_tokens = 512, decode_steps = 0;
  int64_t flood = 100, max_batch_sessions = 16, shared_step_tokens = 0, k_quant_bits = 8;
  std::string window_text, tokens_seen_text = "10000,1000000", snapshot_every_text = "0", dir;
  std::string kv_dtype_text = "f16";
  std::string backend = "cpu", synthetic, plan;
  std::string reference_gbps_text, isa_name;
  bool json = false, snapshot = false, tenants = false, one_kv_pool = false;
  FlagParser flags(
      "streamd bench [--model PATH] [--threads 1,2] [--prompt-tokens P] [--gen-tokens G] "
      "[--reps R] [--json]\n"
      "streamd bench --sessions N[,N...] [--threads T] [--prompt-tokens P] [--gen-tokens G]\n"
      "              [--sinks S] [--window W] [--max-batch-tokens B] [--reps R] [--one-kv-pool]\n"
      "              [--json]\n"
      "  (with --sessions the defaults are P 128, G 64, R 1 and T = all cores)\n"
      "streamd bench --sessions N[,N...] --decode-steps K [--sinks S] [--window W]\n"
      "              [--reference-gbps G] [--json]\n"
      "  (one batched decode step of N sessions with full windows, median of K; no prefill)\n"
      "streamd bench --sessions N ... --snapshot-every MS[,MS...] [--dir DIR]\n"
      "  (the closed loop while a SessionPersister writes N resting sessions, each once per MS;\n"
      "   0 = no writes; a list alternates the intervals within every repetition)\n"
      "streamd bench --snapshot [--sinks S] [--window 252,1020] [--tokens-seen 10000,1000000]\n"
      "              [--kv-dtype f16,int8] [--plan P] [--reps R] [--dir DIR] [--one-kv-pool]\n"
      "              [--json]\n"
      "  (session snapshot size, snapshot time = capture + encode + write with fsync, restore\n"
      "   time = read + decode + restore into another engine, cold read, median of R; and the\n"
      "   sessions a 1 GiB pool admits per window, against the bound formulas; per K/V dtype)\n"
      "streamd bench --tenants [--flood N] [--max-batch-sessions S] [--max-batch-tokens B]\n"
      "              [--prompt-tokens P] [--gen-tokens G] [--sinks S] [--window W] [--reps R]\n"
      "  (tenant B's one session beside tenant A's N busy ones: B's inter-token latency against\n"
      "   B alone, with tenants and without; defaults N 100, S 16, B 512, P 32, G 64, W 252)\n"
      "Every form takes --backend cpu|cuda|auto (default cpu) and --synthetic smollm2|llama3-8b\n"
      "(random weights of that shape instead of --model; made on the device for cuda), and\n"
      "--isa to run the CPU backend at a lower instruction-set level (side-by-side comparisons).\n"
      "Single-stream prefill and decode tokens/s (median of R runs) for each thread count.\n" +
      std::string(kSessionsBenchDefinitions) + "\n" + kTenantsBenchDefinitions);
  flags.String("model", &model_path, "GGUF model file");
  flags.String("threads", &threads_text, "comma-separated thread counts");
  flags.Int("prompt-tokens", &prompt_tokens, 1, 8192, "prefill batch size (tokens)");
  flags.Int("gen-tokens", &gen_tokens, 1, 8192, "decode steps");
  flags.Int("reps", &reps, 1, 100, "repetitions per figure");
  flags.Bool("json", &json, "print one JSON object as the last line");
  flags.String("sessions", &sessions_text,
               "concurrent sessions, or a comma-separated list: run the engine benchmark");
  flags.Int("sinks", &sinks, 0, 1 << 20, "--sessions, --snapshot: attention sinks per session");
  flags.String("window", &window_text,
               "--sessions: window per session, 0 = prompt + gen tokens (no eviction; the "
               "default); --decode-steps: default 1020; --snapshot: a list, default 252,1020");
  flags.Int("max-batch-tokens", &max_batch_tokens, 1, 1 << 20,
            "--sessions: the scheduler's token budget per step");
  flags.String("backend", &backend,
               "cpu, cuda or auto (cuda when built with it and a GPU is seen)");
  flags.String("plan", &plan,
               "a build plan of the model (streamd build) to run with, cpu backend (--sessions, "
               "--snapshot: its KV cache too); not with --tenants");
  flags.Int("k-quant-activation-bits", &k_quant_bits, 8, 12,
            "without --plan, on the cpu backend: 8 (K-quant files' matrices take 8-bit "
            "activations where that kernel is fast, as the daemon's model.k_quant_activation_bits) "
            "or 12");
  flags.String(
      "synthetic", &synthetic,
      std::string("random-weight model of a known shape instead of --model: ") + kSyntheticShapes);
  flags.Int("decode-steps", &decode_steps, 1, 100000,
            "--sessions: time K decode steps of full-window sessions (no prefill)");
  flags.String("reference-gbps", &reference_gbps_text,
               "--decode-steps: bandwidth (GB/s) the step's bytes are compared with");
  flags.Bool("snapshot", &snapshot, "run the session snapshot benchmark (bench_snapshot.h)");
  flags.Bool("tenants", &tenants, "run the tenant fairness benchmark (bench_tenants.h)");
  flags.Bool("one-kv-pool", &one_kv_pool,
             "--snapshot, --sessions: keep a model's local layers in the one KV pool with the "
             "others (EngineConfig::local_layer_caches = false), for comparisons");
  flags.Int("flood", &flood, 1, 4096, "--tenants: tenant A's busy sessions");
  flags.Int("max-batch-sessions", &max_batch_sessions, 1, 65536,
            "--tenants: the scheduler's session slots per step");
  flags.Int("shared-step-tokens", &shared_step_tokens, 0, 65536,
            "--tenants: also run the flood with steps of at most N tokens while both tenants "
            "have work (engine.shared_step_tokens)");
  flags.String("tokens-seen", &tokens_seen_text,
               "--snapshot: comma-separated counts of tokens each session has seen");
  flags.String("dir", &dir,
               "--snapshot, --snapshot-every: snapshot directory (default: a fresh temporary "
               "directory, removed at the end)");
  flags.String("kv-dtype", &kv_dtype_text,
               "--snapshot: comma-separated K/V cache dtypes measured side by side, f16 and/or "
               "int8 (cpu; the --plan's calibrated scales, else 1/127 on every channel, which "
               "holds the bench's random K/V in (-1, 1)); default f16");
  flags.String("snapshot-every", &snapshot_every_text,
               "--sessions: comma-separated snapshot intervals in ms (0 = no snapshots)");
  flags.String(
      "isa", &isa_name,
      "CPU instruction-set level, one of " + IsaNames() + " (default: the best this CPU has)");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) return PrintHelp(flags);
  if (flags.was_set("plan") && flags.was_set("tenants")) {
    return Fail(InvalidArgumentError(
        "--plan applies to the single-stream form, --sessions (with or without --decode-steps) "
        "and --snapshot, not to --tenants"));
  }
  if (!isa_name.empty()) {
    if (Status s = ForceIsaByName(isa_name); !s.ok()) return Fail(s);
  }
  if (k_quant_bits != 8 && k_quant_bits != 12) {
    return Fail(InvalidArgumentError("--k-quant-activation-bits: " + std::to_string(k_quant_bits) +
                                     " is not one of 8, 12"));
  }
  double reference_gbps = 0.0;
  if (!reference_gbps_text.empty()) {
    char* end = nullptr;
    reference_gbps = std::strtod(reference_gbps_text.c_str(), &end);
    if (*end != '\0' || !(reference_gbps > 0.0 && reference_gbps < 1e7)) {
      return Fail(InvalidArgumentError("--reference-gbps: \"" + reference_gbps_text +
                                       "\" is not a bandwidth in GB/s"));
    }
  }
  auto threads = ParseCountList("threads", threads_text, 256);
  if (!threads.ok()) return Fail(threads.status());
  // --window: one size (0 allowed) except with --snapshot, which takes a list.
  int64_t window = 0;
  if (flags.was_set("window") && !snapshot) {
    auto one = ParseCountList("window", window_text, 1 << 24, 0);
    if (!one.ok()) return Fail(one.status());
    if (one->size() != 1) {
      return Fail(InvalidArgumentError("--window takes one size except with --snapshot"));
    }
    window = one->front();
  }
  if (tenants) {
    for (const char* name : {"snapshot", "sessions", "decode-steps", "snapshot-every", "dir",
                             "tokens-seen", "reference-gbps"}) {
      if (flags.was_set(name)) {
        return Fail(
            InvalidArgumentError(std::string("--") + name + " does not apply to --tenants"));
      }
    }
    if (flags.was_set("threads") && threads->size() != 1) {
      return Fail(InvalidArgumentError("--threads takes one thread count with --tenants"));
    }
    TenantsBenchOptions t;
    t.source = {model_path, synthetic, backend, "", static_cast<int>(k_quant_bits)};
    t.flood = flood;
    t.max_batch_sessions = max_batch_sessions;
    t.shared_step_tokens = shared_step_tokens;
    t.max_batch_tokens = max_batch_tokens;
    t.prompt_tokens = flags.was_set("prompt-tokens") ? prompt_tokens : t.prompt_tokens;
    t.gen_tokens = flags.was_set("gen-tokens") ? gen_tokens : t.gen_tokens;
    t.sinks = sinks;
    t.window = flags.was_set("window") ? window : t.window;
    t.threads = flags.was_set("threads") ? threads->front() : 0;
    t.reps = reps;
    t.json = json;
    return RunTenantsBench(t);
  }
  for (const char* name : {"flood", "max-batch-sessions", "shared-step-tokens"}) {
    if (flags.was_set(name)) {
      return Fail(InvalidArgumentError(std::string("--") + name + " needs --tenants"));
    }
  }
  if (snapshot) {
    for (const char* name : {"sessions", "decode-steps", "prompt-tokens", "gen-tokens",
                             "max-batch-tokens", "snapshot-every", "reference-gbps"}) {
      if (flags.was_set(name)) {
        return Fail(
            InvalidArgumentError(std::string("--") + name + " does not apply to --snapshot"));
      }
    }
    if (flags.was_set("threads") && threads->size() != 1) {
      return Fail(InvalidArgumentError("--threads takes one thread count with --snapshot"));
    }
    if (sinks > EngineConfig{}.max_sinks) {
      return Fail(InvalidArgumentError("--sinks = " + std::to_string(sinks) + " is outside [0, " +
                                       std::to_string(EngineConfig{}.max_sinks) +
                                       "] (the engine's limit)"));
    }
    SnapshotBenchOptions so;
    so.source = {model_path, synthetic, backend, plan, static_cast<int>(k_quant_bits)};
    if (flags.was_set("window")) {
      auto windows = ParseCountList("window", window_text, EngineConfig{}.max_window);
      if (!windows.ok()) return Fail(windows.status());
      so.windows = *windows;
    }
    auto seen = ParseCountList("tokens-seen", tokens_seen_text, int64_t{1} << 40);
    if (!seen.ok()) return Fail(seen.status());
    so.tokens_seen = *seen;
    auto dtypes = ParseKvDtypes(kv_dtype_text);
    if (!dtypes.ok()) return Fail(dtypes.status());
    so.kv_dtypes = *dtypes;
    so.sinks = sinks;
    so.reps = reps;
    so.dir = dir;
    so.threads = flags.was_set("threads") ? threads->front() : 0;
    so.json = json;
    so.local_layer_caches = !one_kv_pool;
    return RunSnapshotBench(so);
  }
  for (const char* name : {"tokens-seen", "kv-dtype"}) {
    if (flags.was_set(name)) {
      return Fail(InvalidArgumentError(std::string("--") + name + " needs --snapshot"));
    }
  }
  if (one_kv_pool && (!flags.was_set("sessions") || flags.was_set("decode-steps"))) {
    return Fail(InvalidArgumentError(
        "--one-kv-pool needs --snapshot or --sessions (without --decode-steps: that form keeps "
        "every layer in one pool)"));
  }
  if (flags.was_set("sessions")) {
    if (flags.was_set("threads") && threads->size() != 1) {
      return Fail(InvalidArgumentError("--threads takes one thread count with --sessions"));
    }
    auto sessions = ParseCountList("sessions", sessions_text, 4096);
    if (!sessions.ok()) return Fail(sessions.status());
    const BenchModelSource source{model_path, synthetic, backend, plan,
                                  static_cast<int>(k_quant_bits)};
    auto snapshot_every = ParseCountList("snapshot-every", snapshot_every_text, 3600000, 0);
    if (!snapshot_every.ok()) return Fail(snapshot_every.status());
    if (flags.was_set("decode-steps")) {
      for (const char* name : {"snapshot-every", "dir"}) {
        if (flags.was_set(name)) {
          return Fail(
              InvalidArgumentError(std::string("--") + name + " does not apply to --decode-steps"));
        }
      }
      DecodeStepBenchOptions d;
      d.source = source;
      d.sessions = *sessions;
      d.sinks = sinks;
      d.window = flags.was_set("window") ? window : d.window;
      d.steps = decode_steps;
      d.threads = flags.was_set("threads") ? threads->front() : 0;
      d.reference_gbps = reference_gbps;
      d.json = json;
      return RunDecodeStepBench(d);
    }
    SessionsBenchOptions o;
    o.source = source;
    o.sessions = *sessions;
    o.prompt_tokens = flags.was_set("prompt-tokens") ? prompt_tokens : o.prompt_tokens;
    o.gen_tokens = flags.was_set("gen-tokens") ? gen_tokens : o.gen_tokens;
    o.threads = flags.was_set("threads") ? threads->front() : 0;
    o.sinks = sinks;
    o.window = window;
    o.max_batch_tokens = max_batch_tokens;
    o.reps = flags.was_set("reps") ? reps : 1;
    o.snapshot_every_ms = *snapshot_every;
    o.snapshot_dir = dir;
    o.json = json;
    o.local_layer_caches = !one_kv_pool;
    return RunSessionsBench(o);
  }
  for (const char* name :
       {"sinks", "window", "max-batch-tokens", "decode-steps", "snapshot-every", "dir"}) {
    if (flags.was_set(name)) {
      return Fail(InvalidArgumentError(std::string("--") + name + " needs --sessions"));
    }
  }

  // With --plan: its tuning, pre-packed weights and KV cache; --threads still sets the threads.
  auto loaded =
      LoadBenchModel({model_path, synthetic, backend, plan, static_cast<int>(k_quant_bits)},
                     /*with_tokenizer=*/false);
  if (!loaded.ok()) return Fail(loaded.status(), synthetic.empty() ? model_path : "");
  ModelBackend& model = *loaded->model;
  const LlamaConfig& c = model.config();
  const int64_t capacity = std::max(prompt_tokens, gen_tokens);
  if (capacity > c.context_length) {
    return Fail(InvalidArgumentError("--prompt-tokens/--gen-tokens = " + std::to_string(capacity) +
                                     " exceed the model context " +
                                     std::to_string(c.context_length)));
  }
  const CacheSpec dense{CacheMode::kDense, 0, 0, static_cast<int32_t>(prompt_tokens)};
  const KvShape shape = model.CacheShape();  // f16, or a plan's int8 cache with its scales
  const int32_t blocks =
      SessionCache::PeakBlocks(SessionCache::Effective(dense, c.context_length), kBlockSize);
  auto pool =
      model.CreatePool(shape, kBlockSize, blocks * BlockPool::BlockBytes(shape, kBlockSize));
  if (!pool.ok()) return Fail(pool.status());
  std::vector<float> logits(c.vocab_size);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, c.vocab_size - 1);
  std::vector<int32_t> prompt(prompt_tokens);
  for (int32_t& t : prompt) t = pick(rng);

  using Clock = std::chrono::steady_clock;
  StepRunner step(model);
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-8s %-10s %16s %16s\n", "threads", "isa", "prefill tok/s", "decode tok/s");
  for (int64_t nt : *threads) {
    model.set_threads(static_cast<int32_t>(nt));
    std::vector<double> prefill, decode;
    for (int64_t r = 0; r < reps + 1; ++r) {  // the first repetition warms caches, not counted
      auto cache = SessionCache::Create(pool->get(), dense, c.context_length);
      if (!cache.ok()) return Fail(cache.status());
      const auto t0 = Clock::now();
      Status s = step.Run(prompt, **cache, LogitsMode::kLast, logits.data());
      const auto t1 = Clock::now();
      if (!s.ok()) return Fail(s);
      cache->reset();
      cache = SessionCache::Create(pool->get(), dense, c.context_length);
      if (!cache.ok()) return Fail(cache.status());
      int32_t token = prompt[0];
      const auto t2 = Clock::now();
      for (int64_t g = 0; g < gen_tokens; ++g) {
        s = step.Run({&token, 1}, **cache, LogitsMode::kLast, logits.data());
        if (!s.ok()) return Fail(s);
        token =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      const auto t3 = Clock::now();
      if (r == 0) continue;
      prefill.push_back(prompt_tokens / std::chrono::duration<double>(t1 - t0).count());
      decode.push_back(gen_tokens / std::chrono::duration<double>(t3 - t2).count());
    }
    const std::string isa = model.backend_name() == "cpu"
                                ? kernels::cpu::IsaName(kernels::cpu::ActiveIsa())
                                : std::string(model.backend_name());
    std::printf("%-8lld %-10s %16.1f %16.1f\n", static_cast<long long>(nt), isa.c_str(),
                Median(prefill), Median(decode));
    results.push_back({{"threads", nt},
                       {"isa", isa},
                       {"prefill_tokens_per_s", Median(prefill)},
                       {"decode_tokens_per_s", Median(decode)},
                       {"prefill_runs", prefill},
                       {"decode_runs", decode}});
  }
  if (json) {
    nlohmann::json out = {{"model", loaded->name},
                          {"backend", std::string(model.backend_name())},
                          {"device", model.device_description()},
                          {"weight_bytes", model.weight_bytes()},
                          {"prompt_tokens", prompt_tokens},
                          {"gen_tokens", gen_tokens},
                          {"reps", reps},
                          {"results", results}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
