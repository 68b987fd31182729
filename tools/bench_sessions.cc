#include "tools/bench_sessions.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/llama_model.h"
#include "engine/model/synthetic_model.h"
#include "engine/serving/engine.h"
#include "tools/bench/load_metrics.h"
#include "tools/commands.h"

namespace streamd::tools {

const char* const kSessionsBenchDefinitions =
    "With --sessions N: closed-loop load on the engine. N sessions (sink cache, --sinks S,\n"
    "--window W) each append P random ordinary token ids (fixed seed) and generate G tokens\n"
    "(greedy, end-of-generation ignored), all started together at t0. Per session i, first_i\n"
    "and last_i are the times its first and last token events reach the sink.\n"
    "  decode tok/s   = sum_i (G - 1) / (max_i last_i - min_i first_i): every token after\n"
    "                   each session's first one, over the decode phase's wall time\n"
    "  steady tok/s   = tokens in (max_i first_i, min_i last_i], over that window: every\n"
    "                   session decoding, no prompt being prefilled (0: no such window)\n"
    "  x1             = steady tok/s over the first row's\n"
    "  tok/s/sess     = median_i (G - 1) / (last_i - first_i)\n"
    "  ttft           = first_i - t0, p50/p90/p99 over sessions\n"
    "  itl            = gaps between consecutive token events of a session, p50/p90/p99\n"
    "                   over all gaps of all sessions\n"
    "  step ms        = (max_i last_i - t0) / scheduler steps; tok/step = tokens run per step\n"
    "  out tok/s      = N * G / (max_i last_i - t0); prompt t/s = N * P / (max_i first_i - t0)\n"
    "Percentiles are nearest-rank. One warm-up generation runs first. A list (--sessions\n"
    "1,4,16) measures each count in turn within every repetition; with --reps R each figure\n"
    "is the median over R runs.";

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// User + system CPU seconds of the whole process (every thread) so far.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// What one session's EventSink records. The sink runs on the scheduler thread, so it only
// takes a timestamp and appends it to storage reserved up front, under this session's mutex.
struct SessionRecord {
  std::mutex mu;
  std::vector<Clock::time_point> token_times;  // [G], reserved before the run
  Status status;
};

// Counts finished sessions so the bench thread can sleep until the last one ends.
struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  int64_t remaining = 0;
};

EventSink MakeSink(SessionRecord* record, Completion* completion) {
  return [record, completion](GenerationEvent&& e) {
    const Clock::time_point now = Clock::now();
    if (e.kind == GenerationEvent::Kind::kToken) {
      std::lock_guard<std::mutex> lock(record->mu);
      record->token_times.push_back(now);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(record->mu);
      record->status = e.status;
    }
    std::lock_guard<std::mutex> lock(completion->mu);
    if (--completion->remaining == 0) completion->cv.notify_all();
  };
}

struct RunResult {
  LoadMetrics load;
  double steps = 0;            // scheduler steps (forward passes) in the run
  double step_ms = 0;          // total_wall_s / steps
  double tokens_per_step = 0;  // tokens run through the model (prompt + fed back) per step
  double cpu_s = 0;            // process CPU time over the run (T > 1: includes the workers' brief spinning)
};

// Every figure of a run by name, in the order of the JSON; the medians walk this list.
std::vector<NamedFigure> Fields(RunResult& r) {
  std::vector<NamedFigure> fields = Figures(r.load);
  fields.insert(fields.end(), {{"steps", &r.steps},
                                 {"step_ms", &r.step_ms},
                                 {"tokens_per_step", &r.tokens_per_step},
                                 {"cpu_s", &r.cpu_s}});
  return fields;
}

nlohmann::json ToJson(RunResult r) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : Fields(r)) out[name] = *value;
  return out;
}

RunResult MedianRun(std::vector<RunResult> runs) {
  return MedianOfRuns(std::move(runs), [](RunResult& r) { return Fields(r); });
}

// One closed-loop run: opens `prompts.size()` sessions, starts them together, waits for all.
StatusOr<RunResult> RunOnce(Engine& engine, const SessionOptions& session_options,
                            const std::vector<std::vector<int32_t>>& prompts, int64_t gen_tokens) {
  const size_t n = prompts.size();
  std::vector<SessionId> ids;
  for (size_t i = 0; i < n; ++i) {
    STREAMD_ASSIGN_OR_RETURN(SessionId id, engine.Open(session_options));
    ids.push_back(id);
  }
  std::vector<SessionRecord> records(n);
  for (SessionRecord& r : records) r.token_times.reserve(static_cast<size_t>(gen_tokens));
  Completion completion;
  completion.remaining = static_cast<int64_t>(n);
  GenerateOptions generate;
  generate.max_tokens = static_cast<int32_t>(gen_tokens);
  generate.ignore_end_of_generation = true;

  const EngineStats before = engine.Stats();
  const double cpu0 = ProcessCpuSeconds();
  const Clock::time_point t0 = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    Status s = engine.Append(ids[i], prompts[i]);
    if (s.ok()) s = engine.Generate(ids[i], generate, MakeSink(&records[i], &completion));
    if (!s.ok()) {
      for (SessionId id : ids) (void)engine.Close(id);  // ends the others without waiting
      return s;
    }
  }
  {
    std::unique_lock<std::mutex> lock(completion.mu);
    completion.cv.wait(lock, [&] { return completion.remaining == 0; });
  }
  const double cpu_s = ProcessCpuSeconds() - cpu0;
  const EngineStats after = engine.Stats();
  for (SessionId id : ids) STREAMD_RETURN_IF_ERROR(engine.Close(id));

  // Every sink has seen its Done event: the records are read without their locks.
  std::vector<std::vector<double>> token_s(n);
  int64_t prompt_total = 0;
  for (size_t i = 0; i < n; ++i) {
    STREAMD_RETURN_IF_ERROR(records[i].status);
    if (static_cast<int64_t>(records[i].token_times.size()) != gen_tokens) {
      return InternalError("session " + std::to_string(i) + " produced " +
                           std::to_string(records[i].token_times.size()) + " tokens, not " +
                           std::to_string(gen_tokens));
    }
    for (Clock::time_point t : records[i].token_times) token_s[i].push_back(Seconds(t - t0));
    prompt_total += static_cast<int64_t>(prompts[i].size());
  }
  RunResult r;
  STREAMD_ASSIGN_OR_RETURN(r.load, ComputeLoadMetrics(token_s, prompt_total));
  r.steps = static_cast<double>(after.steps - before.steps);
  r.step_ms = r.steps > 0 ? 1e3 * r.load.total_wall_s / r.steps : 0.0;
  r.tokens_per_step =
      r.steps > 0 ? static_cast<double>(after.tokens_in - before.tokens_in) / r.steps : 0.0;
  r.cpu_s = cpu_s;
  return r;
}

}  // namespace

StatusOr<BenchModel> LoadBenchModel(const BenchModelSource& source, bool with_tokenizer) {
  STREAMD_ASSIGN_OR_RETURN(const BackendKind kind, ParseBackendKind(source.backend));
  BenchModel out;
  if (!source.synthetic.empty()) {
    SyntheticModelSpec spec;
    if (source.synthetic == "smollm2") {
      spec = SmolLm2Shape();
    } else if (source.synthetic == "llama3-8b") {
      spec = Llama3_8BShape();
    } else {
      return InvalidArgumentError("--synthetic: \"" + source.synthetic + "\" is not one of " +
                                  kSyntheticShapes);
    }
    STREAMD_ASSIGN_OR_RETURN(out.model, MakeSyntheticBackend(kind, spec));
    if (with_tokenizer) {
      // The byte vocabulary of synthetic models, from a one-layer stand-in of the same vocab.
      SyntheticModelSpec v;
      v.n_layers = 1;
      v.dim = 32;
      v.n_heads = 1;
      v.n_kv_heads = 1;
      v.ffn_dim = 32;
      v.vocab_size = spec.vocab_size;
      v.with_vocab = true;
      STREAMD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, BuildSyntheticModel(v));
      STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file,
                               gguf::GgufFile::FromBuffer(bytes.data(), bytes.size()));
      STREAMD_ASSIGN_OR_RETURN(out.tokenizer, tokenizer::Tokenizer::FromGguf(*file));
    }
    out.name = "synthetic-" + source.synthetic;
    return out;
  }
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> cpu, LlamaModel::Load(source.model_path));
  if (with_tokenizer) {
    STREAMD_ASSIGN_OR_RETURN(out.tokenizer, tokenizer::Tokenizer::FromGguf(cpu->file()));
  }
  out.name = cpu->config().name;
  STREAMD_ASSIGN_OR_RETURN(out.model, MakeBackend(kind, std::move(cpu)));
  return out;
}

int RunSessionsBench(const SessionsBenchOptions& o) {
  if (o.sessions.empty()) return Fail(InvalidArgumentError("--sessions is empty"));
  for (int64_t n : o.sessions) {
    if (n < 1) return Fail(InvalidArgumentError("--sessions must be >= 1"));
  }
  if (o.gen_tokens < 2) {
    return Fail(InvalidArgumentError("--gen-tokens must be >= 2 with --sessions (the decode "
                                     "phase starts after each session's first token)"));
  }
  if (o.prompt_tokens < 1) return Fail(InvalidArgumentError("--prompt-tokens must be >= 1"));
  if (o.max_batch_tokens < 1) return Fail(InvalidArgumentError("--max-batch-tokens must be >= 1"));
  if (o.reps < 1) return Fail(InvalidArgumentError("--reps must be >= 1"));
  const int64_t max_sessions = *std::max_element(o.sessions.begin(), o.sessions.end());

  auto loaded = LoadBenchModel(o.source, /*with_tokenizer=*/true);
  if (!loaded.ok()) {
    return Fail(loaded.status(), o.source.synthetic.empty() ? o.source.model_path : "");
  }
  std::unique_ptr<ModelBackend> model = std::move(loaded->model);
  std::unique_ptr<tokenizer::Tokenizer> vocab = std::move(loaded->tokenizer);
  const LlamaConfig c = model->config();
  const int64_t weight_bytes = static_cast<int64_t>(model->weight_bytes());
  const std::string backend_name(model->backend_name());
  const std::string device = model->device_description();

  // Prompts: ordinary (non-special) token ids drawn with a fixed seed, one prompt per session;
  // a run with n sessions uses the first n.
  std::vector<int32_t> ordinary;
  for (int32_t id = 0; id < vocab->vocab_size(); ++id) {
    if (vocab->token_type(id) == tokenizer::TokenType::kNormal) ordinary.push_back(id);
  }
  if (ordinary.empty()) return Fail(InvalidArgumentError("the vocabulary has no ordinary tokens"));
  std::mt19937 rng(1234);
  std::uniform_int_distribution<size_t> pick(0, ordinary.size() - 1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(max_sessions));
  for (auto& p : prompts) {
    p.resize(static_cast<size_t>(o.prompt_tokens));
    for (int32_t& t : p) t = ordinary[pick(rng)];
  }

  SessionOptions session;
  session.mode = CacheMode::kSink;
  session.sinks = static_cast<int32_t>(o.sinks);
  session.window = static_cast<int32_t>(o.window > 0 ? o.window : o.prompt_tokens + o.gen_tokens);
  session.sampling = SamplingParams{};
  session.sampling.temperature = 0.0f;  // greedy
  session.sampling.seed = 1;

  EngineConfig config;
  config.threads = o.threads > 0
                       ? static_cast<int32_t>(o.threads)
                       : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  config.planner.max_batch_tokens = static_cast<int32_t>(o.max_batch_tokens);
  config.max_chunk = static_cast<int32_t>(std::min<int64_t>(config.max_chunk, c.context_length));
  // The pool holds every session's bound and the prefill headroom, so all of them are admitted.
  const CacheSpec spec = SessionCache::Effective(
      {session.mode, session.sinks, session.window, config.max_chunk}, c.context_length);
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  config.pool_bytes =
      (max_sessions * SessionCache::BoundBlocks(spec, config.block_size) +
       DefaultPrefillHeadroom(config.planner, config.max_chunk, config.block_size)) *
      BlockPool::BlockBytes(shape, config.block_size);

  auto engine_or = Engine::Create(std::move(model), std::move(vocab), config);
  if (!engine_or.ok()) return Fail(engine_or.status());
  Engine& engine = **engine_or;

  // Warm-up: one short generation pages the weights in and sizes the workspaces. Then the
  // session counts take turns within each repetition, so a noisy neighbour hits all alike.
  if (auto warm = RunOnce(engine, session, {prompts[0]}, 2); !warm.ok()) return Fail(warm.status());
  std::vector<std::vector<RunResult>> runs(o.sessions.size());
  for (int64_t rep = 0; rep < o.reps; ++rep) {
    for (size_t k = 0; k < o.sessions.size(); ++k) {
      const std::vector<std::vector<int32_t>> batch(prompts.begin(),
                                                    prompts.begin() + o.sessions[k]);
      auto run = RunOnce(engine, session, batch, o.gen_tokens);
      if (!run.ok()) return Fail(run.status());
      runs[k].push_back(*run);
    }
  }

  const char* isa = kernels::cpu::IsaName(kernels::cpu::ActiveIsa());
  std::printf("model %s on %s\n", loaded->name.c_str(), device.c_str());
  std::printf("prompt %lld  gen %lld  threads %d  sinks %d  window %d  max-batch-tokens %lld  "
              "isa %s  medians of %lld runs; x1 = steady tok/s over the first row's\n",
              static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.gen_tokens),
              config.threads, spec.sinks, spec.window, static_cast<long long>(o.max_batch_tokens),
              isa, static_cast<long long>(o.reps));
  std::printf("%8s %12s %12s %6s %10s %26s %26s %8s %8s %10s %10s %7s\n", "sessions",
              "decode tok/s", "steady tok/s", "x1", "tok/s/sess", "ttft p50/p90/p99 (ms)", "itl p50/p90/p99 (ms)", "step ms",
              "tok/step", "out tok/s", "prompt t/s", "cpu s");
  nlohmann::json results = nlohmann::json::array();
  double first_decode = 0;
  for (size_t k = 0; k < o.sessions.size(); ++k) {
    const RunResult m = MedianRun(runs[k]);
    const LoadMetrics& l = m.load;
    if (k == 0) first_decode = l.steady_decode_tokens_per_s;
    std::printf("%8lld %12.1f %12.1f %6.2f %10.1f %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %8.2f %8.1f "
                "%10.1f %10.1f %7.2f\n",
                static_cast<long long>(o.sessions[k]), l.decode_tokens_per_s,
                l.steady_decode_tokens_per_s, l.steady_decode_tokens_per_s / first_decode,
                l.session_decode_tokens_per_s_p50,
                l.ttft_ms.p50, l.ttft_ms.p90, l.ttft_ms.p99, l.itl_ms.p50, l.itl_ms.p90,
                l.itl_ms.p99, m.step_ms, m.tokens_per_step, l.output_tokens_per_s,
                l.prompt_tokens_per_s, m.cpu_s);
    nlohmann::json per_run = nlohmann::json::array();
    for (const RunResult& r : runs[k]) per_run.push_back(ToJson(r));
    nlohmann::json row = ToJson(m);
    row["sessions"] = o.sessions[k];
    row["runs"] = per_run;
    results.push_back(row);
  }
  if (o.json) {
    const nlohmann::json out = {{"model", loaded->name},
                                {"backend", backend_name},
                                {"device", device},
                                {"weight_bytes", weight_bytes},
                                {"isa", isa},
                                {"prompt_tokens", o.prompt_tokens},
                                {"gen_tokens", o.gen_tokens},
                                {"threads", config.threads},
                                {"sinks", spec.sinks},
                                {"window", spec.window},
                                {"max_batch_tokens", o.max_batch_tokens},
                                {"reps", o.reps},
                                {"results", results}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
