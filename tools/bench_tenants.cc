#include "tools/bench_tenants.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/engine.h"
#include "kernels/cpu/matmul.h"
#include "tools/bench/load_metrics.h"
#include "tools/commands.h"

namespace streamd::tools {

const char* const kTenantsBenchDefinitions =
    "With --tenants: tenant A opens --flood N sessions that append P random tokens and generate\n"
    "without end; once all of them decode, tenant B's one session appends P tokens and generates\n"
    "G (greedy). Runs, in turn within every repetition: alone (no A), full (max-batch-sessions - "
    "1\n"
    "of A: a full step, not over-subscribed), flood (N of A), flood off (N of A, fair_tenants "
    "off:\n"
    "the policy before tenants, on a second engine), and with --shared-step-tokens N flood shared\n"
    "(N of A on a third engine whose steps run at most N tokens while both tenants have work).\n"
    "  itl            = gaps between B's consecutive token events, p50/p90/p99\n"
    "  x alone        = B's itl over alone's in the same repetition, median over repetitions\n"
    "  x full         = the same over full's: what the flood adds to a full step's latency\n"
    "  ttft           = B's Generate to its first token\n"
    "  tok/s          = tokens of every session between B's first and last token, over that time\n"
    "  goal           = flood's (and flood shared's) x alone (p50) <= 1.5";

namespace {

using Clock = std::chrono::steady_clock;

double ToMs(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Tenant A's sessions. Shared with their sinks, which may run after the run ends (a token event
// a step collected before its generation was closed).
struct Flood {
  std::mutex mu;
  std::condition_variable cv;
  int64_t started = 0;  // sessions that have their first token
  std::atomic<int64_t> tokens{0};
};

// Tenant B's session: its token times and A's token count at each of them.
struct Single {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Clock::time_point> times;
  std::vector<int64_t> flood_tokens;
  bool done = false;
  Status status;
};

struct TenantsRun {
  double itl_ms_p50 = 0, itl_ms_p90 = 0, itl_ms_p99 = 0;
  double ttft_ms = 0;
  double tokens_per_s = 0;
  double flood_tokens = 0;  // A's tokens while B generated
};

std::vector<NamedFigure> Fields(TenantsRun& r) {
  return {{"itl_ms_p50", &r.itl_ms_p50},     {"itl_ms_p90", &r.itl_ms_p90},
          {"itl_ms_p99", &r.itl_ms_p99},     {"ttft_ms", &r.ttft_ms},
          {"tokens_per_s", &r.tokens_per_s}, {"flood_tokens", &r.flood_tokens}};
}

nlohmann::json ToJson(TenantsRun r) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : Fields(r)) out[name] = *value;
  return out;
}

// One run: `n_flood` sessions of tenant A start and decode, then B's one session generates
// `gen_tokens`; A's sessions are closed when B is done.
StatusOr<TenantsRun> RunOnce(Engine& engine, int64_t n_flood, const SessionOptions& a_options,
                             const SessionOptions& b_options,
                             const std::vector<std::vector<int32_t>>& prompts, int64_t gen_tokens) {
  auto flood = std::make_shared<Flood>();
  auto single = std::make_shared<Single>();
  single->times.reserve(static_cast<size_t>(gen_tokens));
  single->flood_tokens.reserve(static_cast<size_t>(gen_tokens));
  std::vector<SessionId> ids;
  const auto close_all = [&] {
    for (SessionId id : ids) (void)engine.Close(id);
  };
  GenerateOptions endless;
  endless.max_tokens = 1 << 30;
  endless.ignore_end_of_generation = true;
  for (int64_t i = 0; i < n_flood; ++i) {
    auto id = engine.Open(a_options);
    if (!id.ok()) {
      close_all();
      return id.status();
    }
    ids.push_back(*id);
    Status s = engine.Append(*id, prompts[static_cast<size_t>(i) + 1]);
    if (s.ok()) {
      s = engine.Generate(*id, endless, [flood](GenerationEvent&& e) {
        if (e.kind != GenerationEvent::Kind::kToken) return;
        flood->tokens.fetch_add(1, std::memory_order_relaxed);
        if (e.index == 0) {
          std::lock_guard<std::mutex> lock(flood->mu);
          ++flood->started;
          flood->cv.notify_all();
        }
      });
    }
    if (!s.ok()) {
      close_all();
      return s;
    }
  }
  {
    std::unique_lock<std::mutex> lock(flood->mu);
    flood->cv.wait(lock, [&] { return flood->started == n_flood; });
  }
  auto b = engine.Open(b_options);
  if (!b.ok()) {
    close_all();
    return b.status();
  }
  ids.push_back(*b);
  GenerateOptions generate;
  generate.max_tokens = static_cast<int32_t>(gen_tokens);
  generate.ignore_end_of_generation = true;
  Status s = engine.Append(*b, prompts[0]);
  const Clock::time_point t0 = Clock::now();
  if (s.ok()) {
    s = engine.Generate(*b, generate, [single, flood](GenerationEvent&& e) {
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> lock(single->mu);
      if (e.kind == GenerationEvent::Kind::kToken) {
        single->times.push_back(now);
        single->flood_tokens.push_back(flood->tokens.load(std::memory_order_relaxed));
        return;
      }
      single->status = e.status;
      single->done = true;
      single->cv.notify_all();
    });
  }
  if (s.ok()) {
    std::unique_lock<std::mutex> lock(single->mu);
    single->cv.wait(lock, [&] { return single->done; });
    s = single->status;
  }
  close_all();
  STREAMD_RETURN_IF_ERROR(s);

  std::lock_guard<std::mutex> lock(single->mu);
  const std::vector<Clock::time_point>& t = single->times;
  if (static_cast<int64_t>(t.size()) != gen_tokens) {
    return InternalError("tenant B's session produced " + std::to_string(t.size()) +
                         " tokens, not " + std::to_string(gen_tokens));
  }
  std::vector<double> gaps;
  for (size_t i = 1; i < t.size(); ++i) gaps.push_back(ToMs(t[i] - t[i - 1]));
  TenantsRun r;
  r.itl_ms_p50 = Percentile(gaps, 50);
  r.itl_ms_p90 = Percentile(gaps, 90);
  r.itl_ms_p99 = Percentile(gaps, 99);
  r.ttft_ms = ToMs(t.front() - t0);
  r.flood_tokens = static_cast<double>(single->flood_tokens.back() - single->flood_tokens.front());
  const double window_s = ToMs(t.back() - t.front()) / 1e3;
  r.tokens_per_s =
      window_s > 0 ? (r.flood_tokens + static_cast<double>(gen_tokens - 1)) / window_s : 0.0;
  return r;
}

struct RunKind {
  const char* name;
  int64_t flood;
  size_t engine;  // 0: fair_tenants on, 1: off, 2: on with shared_step_tokens
};

}  // namespace

int RunTenantsBench(const TenantsBenchOptions& o) {
  if (o.flood < 1) return Fail(InvalidArgumentError("--flood must be >= 1"));
  if (o.gen_tokens < 3) {
    return Fail(
        InvalidArgumentError("--gen-tokens must be >= 3 with --tenants (B's "
                             "latency needs two gaps at least)"));
  }
  if (o.prompt_tokens < 1) return Fail(InvalidArgumentError("--prompt-tokens must be >= 1"));
  if (o.window < 1) return Fail(InvalidArgumentError("--window must be >= 1 with --tenants"));
  if (o.max_batch_sessions > o.max_batch_tokens) {
    return Fail(InvalidArgumentError(
        "--max-batch-sessions = " + std::to_string(o.max_batch_sessions) +
        " is over --max-batch-tokens = " + std::to_string(o.max_batch_tokens)));
  }
  if (o.reps < 1) return Fail(InvalidArgumentError("--reps must be >= 1"));
  if (o.shared_step_tokens < 0 || o.shared_step_tokens > o.max_batch_tokens) {
    return Fail(InvalidArgumentError(
        "--shared-step-tokens = " + std::to_string(o.shared_step_tokens) +
        " is outside [0, --max-batch-tokens = " + std::to_string(o.max_batch_tokens) + "]"));
  }

  // Engines over copies of the model: fair_tenants on, off, and on with the shared cap.
  const int n_engines = o.shared_step_tokens > 0 ? 3 : 2;
  std::unique_ptr<Engine> engines[3];
  std::string model_name, device, backend_name;
  int64_t weight_bytes = 0;
  EngineConfig config;
  SessionOptions session;
  std::vector<std::vector<int32_t>> prompts;  // [0]: B's, [1 + i]: A's session i
  for (int k = 0; k < n_engines; ++k) {
    auto loaded = LoadBenchModel(o.source, /*with_tokenizer=*/true);
    if (!loaded.ok()) {
      return Fail(loaded.status(), o.source.synthetic.empty() ? o.source.model_path : "");
    }
    const LlamaConfig c = loaded->model->config();
    if (k == 0) {
      model_name = loaded->name;
      device = loaded->model->device_description();
      backend_name = std::string(loaded->model->backend_name());
      weight_bytes = static_cast<int64_t>(loaded->model->weight_bytes());
      // Prompts: ordinary (non-special) token ids drawn with a fixed seed.
      std::vector<int32_t> ordinary;
      for (int32_t id = 0; id < loaded->tokenizer->vocab_size(); ++id) {
        if (loaded->tokenizer->token_type(id) == tokenizer::TokenType::kNormal) {
          ordinary.push_back(id);
        }
      }
      if (ordinary.empty()) {
        return Fail(InvalidArgumentError("the vocabulary has no ordinary tokens"));
      }
      std::mt19937 rng(1234);
      std::uniform_int_distribution<size_t> pick(0, ordinary.size() - 1);
      prompts.resize(static_cast<size_t>(o.flood) + 1);
      for (auto& p : prompts) {
        p.resize(static_cast<size_t>(o.prompt_tokens));
        for (int32_t& t : p) t = ordinary[pick(rng)];
      }
      session.mode = CacheMode::kSink;
      session.sinks = static_cast<int32_t>(o.sinks);
      session.window = static_cast<int32_t>(o.window);
      session.sampling = SamplingParams{};
      session.sampling.temperature = 0.0f;  // greedy
      session.sampling.seed = 1;
      // A session closed at the end of a run may still be in the step in flight: the next
      // run's Open waits for its blocks.
      session.admission_timeout = std::chrono::seconds(30);
      config.threads =
          o.threads > 0 ? static_cast<int32_t>(o.threads)
                        : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
      config.planner.max_batch_tokens = static_cast<int32_t>(o.max_batch_tokens);
      config.planner.max_batch_sessions = static_cast<int32_t>(o.max_batch_sessions);
      config.max_chunk =
          static_cast<int32_t>(std::min<int64_t>(config.max_chunk, c.context_length));
      // The pool holds every session's bound and the prefill headroom: all are admitted.
      const CacheSpec spec = SessionCache::Effective(
          {session.mode, session.sinks, session.window, config.max_chunk}, c.context_length);
      const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
      config.pool_bytes =
          ((o.flood + 1) * SessionCache::BoundBlocks(spec, config.block_size) +
           DefaultPrefillHeadroom(config.planner, config.max_chunk, config.block_size)) *
          BlockPool::BlockBytes(shape, config.block_size);
      config.default_mode = spec.mode;  // shares the budget between split pools (KvPools)
      config.default_sinks = spec.sinks;
      config.default_window = spec.window;
    }
    EngineConfig this_config = config;
    this_config.planner.fair_tenants = k != 1;
    if (k == 2) this_config.planner.shared_step_tokens = static_cast<int32_t>(o.shared_step_tokens);
    auto engine =
        Engine::Create(std::move(loaded->model), std::move(loaded->tokenizer), this_config);
    if (!engine.ok()) return Fail(engine.status());
    engines[k] = std::move(*engine);
  }
  SessionOptions a_options = session, b_options = session;
  a_options.tenant = "a";
  b_options.tenant = "b";

  const int64_t full = std::min(o.flood, std::max<int64_t>(0, o.max_batch_sessions - 1));
  std::vector<RunKind> kinds = {
      {"alone", 0, 0}, {"full", full, 0}, {"flood", o.flood, 0}, {"flood, off", o.flood, 1}};
  if (o.shared_step_tokens > 0) kinds.push_back({"flood, shared", o.flood, 2});
  // Warm-up: a short run on each engine pages the weights in and sizes the workspaces.
  for (int k = 0; k < n_engines; ++k) {
    Engine* engine = engines[k].get();
    if (auto warm = RunOnce(*engine, 1, a_options, b_options, prompts, 3); !warm.ok()) {
      return Fail(warm.status());
    }
  }
  std::vector<std::vector<TenantsRun>> runs(kinds.size());
  for (int64_t rep = 0; rep < o.reps; ++rep) {
    for (size_t step = 0; step < kinds.size(); ++step) {
      const size_t k = rep % 2 == 0 ? step : kinds.size() - 1 - step;
      Engine& engine = *engines[kinds[k].engine];
      auto run = RunOnce(engine, kinds[k].flood, a_options, b_options, prompts, o.gen_tokens);
      if (!run.ok()) return Fail(run.status(), kinds[k].name);
      runs[k].push_back(*run);
    }
  }

  const char* isa = kernels::cpu::IsaName(kernels::cpu::ActiveIsa());
  std::printf("model %s on %s\n", model_name.c_str(), device.c_str());
  std::printf(
      "flood %lld  prompt %lld  gen %lld  threads %d  sinks %lld  window %lld  "
      "max-batch-sessions %lld  max-batch-tokens %lld  isa %s  medians of %lld runs\n",
      static_cast<long long>(o.flood), static_cast<long long>(o.prompt_tokens),
      static_cast<long long>(o.gen_tokens), config.threads, static_cast<long long>(o.sinks),
      static_cast<long long>(o.window), static_cast<long long>(o.max_batch_sessions),
      static_cast<long long>(o.max_batch_tokens), isa, static_cast<long long>(o.reps));
  std::printf("%-13s %10s %26s %18s %18s %10s %10s %10s\n", "run", "A sessions",
              "B itl p50/p90/p99 (ms)", "x alone p50/p90", "x full p50/p90", "B ttft ms",
              "A tokens", "tok/s");
  // Paired ratios of run k's B latency over run `base`'s, median over repetitions.
  const auto paired = [&](size_t k, size_t base, double TenantsRun::*figure) {
    std::vector<double> x;
    for (size_t rep = 0; rep < runs[k].size(); ++rep) {
      const double b = runs[base][rep].*figure;
      if (b > 0) x.push_back(runs[k][rep].*figure / b);
    }
    return Median(x);
  };
  nlohmann::json results = nlohmann::json::array();
  double flood_x = 0, shared_x = 0;
  for (size_t k = 0; k < kinds.size(); ++k) {
    TenantsRun m = MedianOfRuns(runs[k], [](TenantsRun& r) { return Fields(r); });
    const double x_p50 = paired(k, 0, &TenantsRun::itl_ms_p50);
    const double x_p90 = paired(k, 0, &TenantsRun::itl_ms_p90);
    const double f_p50 = paired(k, 1, &TenantsRun::itl_ms_p50);
    const double f_p90 = paired(k, 1, &TenantsRun::itl_ms_p90);
    if (k == 2) flood_x = x_p50;
    if (k == 4) shared_x = x_p50;
    std::printf("%-13s %10lld %8.2f %8.2f %8.2f %9.2f %8.2f %9.2f %8.2f %10.1f %10.0f %10.1f\n",
                kinds[k].name, static_cast<long long>(kinds[k].flood), m.itl_ms_p50, m.itl_ms_p90,
                m.itl_ms_p99, x_p50, x_p90, f_p50, f_p90, m.ttft_ms, m.flood_tokens,
                m.tokens_per_s);
    nlohmann::json row = ToJson(m);
    row["run"] = kinds[k].name;
    row["a_sessions"] = kinds[k].flood;
    row["fair_tenants"] = kinds[k].engine != 1;
    row["shared_step_tokens"] = kinds[k].engine == 2 ? o.shared_step_tokens : 0;
    row["x_alone_p50"] = x_p50;
    row["x_alone_p90"] = x_p90;
    row["x_full_p50"] = f_p50;
    row["x_full_p90"] = f_p90;
    nlohmann::json per_run = nlohmann::json::array();
    for (const TenantsRun& r : runs[k]) per_run.push_back(ToJson(r));
    row["runs"] = per_run;
    results.push_back(row);
  }
  const bool goal_met = flood_x > 0 && flood_x <= 1.5;
  std::printf(
      "goal: B's itl beside the flood <= 1.5x alone (p50): %.2fx, %s; beside the flood "
      "over in a full step: %.2fx (%.2fx with fair_tenants off)\n",
      flood_x, goal_met ? "met" : "not met", paired(2, 1, &TenantsRun::itl_ms_p50),
      paired(3, 1, &TenantsRun::itl_ms_p50));
  const bool shared_met = shared_x > 0 && shared_x <= 1.5;
  if (o.shared_step_tokens > 0) {
    std::printf("goal with --shared-step-tokens %lld: %.2fx alone, %s\n",
                static_cast<long long>(o.shared_step_tokens), shared_x,
                shared_met ? "met" : "not met");
  }
  if (o.json) {
    const nlohmann::json out = {{"model", model_name},
                                {"backend", backend_name},
                                {"device", device},
                                {"weight_bytes", weight_bytes},
                                {"isa", isa},
                                {"flood", o.flood},
                                {"prompt_tokens", o.prompt_tokens},
                                {"gen_tokens", o.gen_tokens},
                                {"threads", config.threads},
                                {"sinks", o.sinks},
                                {"window", o.window},
                                {"max_batch_sessions", o.max_batch_sessions},
                                {"max_batch_tokens", o.max_batch_tokens},
                                {"reps", o.reps},
                                {"goal_x_alone", 1.5},
                                {"goal_met", goal_met},
                                {"shared_step_tokens", o.shared_step_tokens},
                                {"shared_goal_met", shared_met},
                                {"results", results}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
