#include "tools/bench_sessions.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "engine/backends/backend.h"
#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/build_plan/plan_binding.h"
#include "engine/core/engine.h"
#include "engine/core/session_persister.h"
#include "engine/core/snapshot_store.h"
#include "engine/gguf/gguf_file.h"
#include "tools/bench/load_metrics.h"
#include "tools/bench_snapshot.h"
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
    "is the median over R runs.\n"
    "With --snapshot-every MS: N more sessions rest in the engine (each as a busy one ends its\n"
    "turn: P + G tokens); during each run a SessionPersister writes each of them once per MS\n"
    "(one changed and touched every MS / N; capture, encode, write with fsync), as the daemon\n"
    "writes sessions between their turns (a generating session cannot be captured).\n"
    "  writes         = snapshot writes that ended during the run (t0 .. last token); steady:\n"
    "                   within the steady window; write ms = their median capture + encode +\n"
    "                   write time\n"
    "  x off          = steady tok/s over the same count's MS = 0 row; paired = median over\n"
    "                   repetitions of that ratio within each repetition";

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

// The snapshot writes of a run, as the persister's on_written hook reports them.
struct WriteLog {
  struct Write {
    Clock::time_point end;
    double seconds = 0;  // capture + encode + write
    int64_t bytes = 0;
  };
  std::mutex mu;
  std::vector<Write> writes;
  Status failed;
};

// While it lives, a SessionPersister writes `sessions` (resting, not generating), each once per
// `every`: a thread changes one of them (SetMetadata bumps its revision, as a turn would) and
// touches it every every / N, round-robin, so the writes are spread evenly over the interval.
class PeriodicSnapshots {
 public:
  static StatusOr<std::unique_ptr<PeriodicSnapshots>> Start(Engine& engine, const std::string& dir,
                                                            const SnapshotContext& context,
                                                            std::chrono::milliseconds every,
                                                            std::vector<SessionId> sessions,
                                                            WriteLog* log) {
    STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> store, SnapshotStore::Open(dir));
    PersisterOptions options;
    options.interval = every;
    PersisterHooks hooks;
    hooks.on_written = [log](SessionId, int64_t bytes, double seconds) {
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> lock(log->mu);
      log->writes.push_back({now, seconds, bytes});
    };
    hooks.on_write_failed = [log](SessionId, const Status& status) {
      std::lock_guard<std::mutex> lock(log->mu);
      if (log->failed.ok()) log->failed = status;
    };
    auto p = std::unique_ptr<PeriodicSnapshots>(
        new PeriodicSnapshots(engine, every, std::move(sessions), log));
    p->persister_ = std::make_unique<SessionPersister>(engine, std::move(store), context, options,
                                                       std::move(hooks));
    p->thread_ = std::thread([raw = p.get()] { raw->Loop(); });
    return p;
  }
  ~PeriodicSnapshots() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    persister_.reset();  // finishes the write in progress; queued ones are dropped
  }
  PeriodicSnapshots(const PeriodicSnapshots&) = delete;
  PeriodicSnapshots& operator=(const PeriodicSnapshots&) = delete;

 private:
  PeriodicSnapshots(Engine& engine, std::chrono::milliseconds every, std::vector<SessionId> ids,
                    WriteLog* log)
      : engine_(engine), every_(every), ids_(std::move(ids)), log_(log) {}

  void Loop() {
    const auto period =
        std::chrono::duration_cast<Clock::duration>(every_) / static_cast<int64_t>(ids_.size());
    Clock::time_point next = Clock::now();
    uint64_t turn = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (size_t r = 0; !stop_; r = (r + 1) % ids_.size()) {
      lock.unlock();
      const Status s = engine_.SetMetadata(ids_[r], "bench.turn", std::to_string(++turn));
      if (s.ok()) {
        persister_->Touch(ids_[r]);
      } else {
        std::lock_guard<std::mutex> failed(log_->mu);
        if (log_->failed.ok()) log_->failed = s;
      }
      lock.lock();
      next += period;
      cv_.wait_until(lock, next, [&] { return stop_; });
    }
  }

  Engine& engine_;
  const std::chrono::milliseconds every_;
  const std::vector<SessionId> ids_;
  WriteLog* log_;
  std::unique_ptr<SessionPersister> persister_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

struct RunResult {
  LoadMetrics load;
  double steps = 0;            // scheduler steps (forward passes) in the run
  double step_ms = 0;          // total_wall_s / steps
  double tokens_per_step = 0;  // tokens run through the model (prompt + fed back) per step
  double cpu_s = 0;  // process CPU time over the run (T > 1: includes the workers' brief spinning)
  double snapshot_every_ms = 0;       // 0 = no snapshots
  double snapshot_writes = 0;         // writes that ended during the run (t0 .. last token)
  double snapshot_writes_steady = 0;  // ... within the steady window
  double snapshot_write_ms_p50 = 0;   // capture + encode + write, per write
  double snapshot_bytes = 0;          // bytes of those writes
};

// Every figure of a run by name, in the order of the JSON; the medians walk this list.
std::vector<NamedFigure> Fields(RunResult& r) {
  std::vector<NamedFigure> fields = Figures(r.load);
  fields.insert(fields.end(), {{"steps", &r.steps},
                               {"step_ms", &r.step_ms},
                               {"tokens_per_step", &r.tokens_per_step},
                               {"cpu_s", &r.cpu_s},
                               {"snapshot_every_ms", &r.snapshot_every_ms},
                               {"snapshot_writes", &r.snapshot_writes},
                               {"snapshot_writes_steady", &r.snapshot_writes_steady},
                               {"snapshot_write_ms_p50", &r.snapshot_write_ms_p50},
                               {"snapshot_bytes", &r.snapshot_bytes}});
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
// With `log`, counts the snapshot writes it holds that ended during the run; with `keep`, the
// sessions stay open (idle, as at the end of a turn) and their ids go there.
StatusOr<RunResult> RunOnce(Engine& engine, const SessionOptions& session_options,
                            const std::vector<std::vector<int32_t>>& prompts, int64_t gen_tokens,
                            WriteLog* log = nullptr, std::vector<SessionId>* keep = nullptr) {
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
  std::vector<WriteLog::Write> writes;
  if (log != nullptr) {
    std::lock_guard<std::mutex> lock(log->mu);
    writes = log->writes;
  }
  if (keep != nullptr) {
    *keep = ids;
  } else {
    for (SessionId id : ids) STREAMD_RETURN_IF_ERROR(engine.Close(id));
  }

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
  // The snapshot writes of the run and of its steady window (max_i first_i, min_i last_i].
  double steady_begin = 0, steady_end = 1e300, last = 0;
  for (const std::vector<double>& t : token_s) {
    steady_begin = std::max(steady_begin, t.front());
    steady_end = std::min(steady_end, t.back());
    last = std::max(last, t.back());
  }
  std::vector<double> write_ms;
  for (const WriteLog::Write& w : writes) {
    const double end = Seconds(w.end - t0);
    if (end < 0 || end > last) continue;
    r.snapshot_writes += 1;
    r.snapshot_bytes += static_cast<double>(w.bytes);
    if (end > steady_begin && end <= steady_end) r.snapshot_writes_steady += 1;
    write_ms.push_back(1e3 * w.seconds);
  }
  r.snapshot_write_ms_p50 = Median(write_ms);
  return r;
}

}  // namespace

StatusOr<BenchModel> LoadBenchModel(const BenchModelSource& source, bool with_tokenizer) {
  STREAMD_ASSIGN_OR_RETURN(const BackendKind kind, ParseBackendKind(source.backend));
  BenchModel out;
  if (!source.synthetic.empty()) {
    if (!source.plan_path.empty()) {
      return InvalidArgumentError("--plan: a plan is for a model file, not --synthetic");
    }
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
  if (!source.plan_path.empty() && kind != BackendKind::kCpu) {
    return InvalidArgumentError("--plan: build plans run on the cpu backend (--backend cpu)");
  }
  STREAMD_ASSIGN_OR_RETURN(
      std::unique_ptr<LlamaModel> cpu,
      LoadCpuModel(source.model_path, source.plan_path, nullptr, nullptr,
                   kind == BackendKind::kCpu ? source.k_quant_activation_bits
                                             : 12));  // cuda uploads the converted rows
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
    return Fail(
        InvalidArgumentError("--gen-tokens must be >= 2 with --sessions (the decode "
                             "phase starts after each session's first token)"));
  }
  if (o.prompt_tokens < 1) return Fail(InvalidArgumentError("--prompt-tokens must be >= 1"));
  if (o.max_batch_tokens < 1) return Fail(InvalidArgumentError("--max-batch-tokens must be >= 1"));
  if (o.reps < 1) return Fail(InvalidArgumentError("--reps must be >= 1"));
  const int64_t max_sessions = *std::max_element(o.sessions.begin(), o.sessions.end());
  if (o.snapshot_every_ms.empty()) return Fail(InvalidArgumentError("--snapshot-every is empty"));
  const bool snapshots = std::any_of(o.snapshot_every_ms.begin(), o.snapshot_every_ms.end(),
                                     [](int64_t ms) { return ms > 0; });
  for (int64_t ms : o.snapshot_every_ms) {
    if (ms < 0) return Fail(InvalidArgumentError("--snapshot-every must be >= 0"));
  }
  // The sessions the snapshot writer writes (resting beside the busy ones): as many as the
  // largest count.
  const int64_t resting = snapshots ? max_sessions : 0;

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
  // A plan's thread count holds unless --threads says otherwise.
  config.threads = o.threads > 0 ? static_cast<int32_t>(o.threads)
                   : !o.source.plan_path.empty()
                       ? 0
                       : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  config.planner.max_batch_tokens = static_cast<int32_t>(o.max_batch_tokens);
  config.max_chunk = static_cast<int32_t>(std::min<int64_t>(config.max_chunk, c.context_length));
  // The pool holds every session's bound and the prefill headroom, so all of them are admitted.
  const CacheSpec spec = SessionCache::Effective(
      {session.mode, session.sinks, session.window, config.max_chunk}, c.context_length);
  const KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  config.pool_bytes =
      ((max_sessions + resting) * SessionCache::BoundBlocks(spec, config.block_size) +
       DefaultPrefillHeadroom(config.planner, config.max_chunk, config.block_size)) *
      BlockPool::BlockBytes(shape, config.block_size);

  config.local_layer_caches = o.local_layer_caches;
  config.default_mode = spec.mode;  // shares the budget between split pools (KvPools)
  config.default_sinks = spec.sinks;
  config.default_window = spec.window;
  auto engine_or = Engine::Create(std::move(model), std::move(vocab), config);
  if (!engine_or.ok()) return Fail(engine_or.status());
  Engine& engine = **engine_or;

  // Warm-up: one short generation pages the weights in and sizes the workspaces. Then the
  // session counts take turns within each repetition, so a noisy neighbour hits all alike.
  if (auto warm = RunOnce(engine, session, {prompts[0]}, 2); !warm.ok()) return Fail(warm.status());
  // The resting sessions: each runs one turn as a busy session does and stays, idle.
  std::vector<SessionId> resting_ids;
  SnapshotContext snapshot_context;
  std::string dir = o.snapshot_dir;
  if (snapshots) {
    auto context = BenchSnapshotContext(o.source, engine.model(), loaded->name, config.block_size);
    if (!context.ok()) return Fail(context.status());
    snapshot_context = *context;
    if (dir.empty()) {
      auto made = MakeTempDirectory("sessions");
      if (!made.ok()) return Fail(made.status());
      dir = *made;
    }
    if (auto r = RunOnce(engine, session, prompts, o.gen_tokens, nullptr, &resting_ids); !r.ok()) {
      return Fail(r.status());
    }
  }
  const size_t n_intervals = o.snapshot_every_ms.size();
  // runs[k * n_intervals + j]: session count k with snapshot interval j.
  std::vector<std::vector<RunResult>> runs(o.sessions.size() * n_intervals);
  for (int64_t rep = 0; rep < o.reps; ++rep) {
    for (size_t k = 0; k < o.sessions.size(); ++k) {
      const std::vector<std::vector<int32_t>> batch(prompts.begin(),
                                                    prompts.begin() + o.sessions[k]);
      for (size_t step = 0; step < n_intervals; ++step) {
        // Odd repetitions take the intervals in reverse order: a drift of the machine's load
        // then hits every interval alike.
        const size_t j = rep % 2 == 0 ? step : n_intervals - 1 - step;
        const int64_t every = o.snapshot_every_ms[j];
        WriteLog log;
        std::unique_ptr<PeriodicSnapshots> writer;
        if (every > 0) {
          auto started = PeriodicSnapshots::Start(
              engine, dir, snapshot_context, std::chrono::milliseconds(every), resting_ids, &log);
          if (!started.ok()) return Fail(started.status());
          writer = std::move(*started);
        }
        auto run = RunOnce(engine, session, batch, o.gen_tokens, every > 0 ? &log : nullptr);
        writer.reset();
        if (!run.ok()) return Fail(run.status());
        if (!log.failed.ok()) return Fail(log.failed, "snapshot writer");
        run->snapshot_every_ms = static_cast<double>(every);
        runs[k * n_intervals + j].push_back(*run);
      }
    }
  }
  for (SessionId id : resting_ids) (void)engine.Close(id);
  if (snapshots && o.snapshot_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  const char* isa = kernels::cpu::IsaName(kernels::cpu::ActiveIsa());
  std::printf("model %s on %s\n", loaded->name.c_str(), device.c_str());
  std::printf(
      "prompt %lld  gen %lld  threads %d  sinks %d  window %d  max-batch-tokens %lld  "
      "isa %s  medians of %lld runs; x1 = steady tok/s over the first row's\n",
      static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.gen_tokens), config.threads,
      spec.sinks, spec.window, static_cast<long long>(o.max_batch_tokens), isa,
      static_cast<long long>(o.reps));
  if (snapshots) {
    std::printf(
        "snapshots: %lld resting sessions of %lld tokens written by a SessionPersister "
        "to %s%s\n",
        static_cast<long long>(resting), static_cast<long long>(o.prompt_tokens + o.gen_tokens),
        dir.c_str(), o.snapshot_dir.empty() ? " (removed)" : "");
  }
  std::printf("%8s %12s %12s %6s %10s %26s %26s %8s %8s %10s %10s %7s", "sessions", "decode tok/s",
              "steady tok/s", "x1", "tok/s/sess", "ttft p50/p90/p99 (ms)", "itl p50/p90/p99 (ms)",
              "step ms", "tok/step", "out tok/s", "prompt t/s", "cpu s");
  if (snapshots) {
    std::printf(" %9s %8s %7s %9s %6s %7s", "snap ms", "writes", "steady", "write ms", "x off",
                "paired");
  }
  std::printf("\n");
  // The interval-0 column of a session count, if there is one: what "x off" divides by.
  const auto off = std::find(o.snapshot_every_ms.begin(), o.snapshot_every_ms.end(), 0);
  const bool has_off = off != o.snapshot_every_ms.end();
  const size_t j_off = static_cast<size_t>(off - o.snapshot_every_ms.begin());
  nlohmann::json results = nlohmann::json::array();
  double first_decode = 0;
  for (size_t k = 0; k < o.sessions.size(); ++k) {
    for (size_t j = 0; j < n_intervals; ++j) {
      const std::vector<RunResult>& these = runs[k * n_intervals + j];
      const RunResult m = MedianRun(these);
      const LoadMetrics& l = m.load;
      if (k == 0 && j == 0) first_decode = l.steady_decode_tokens_per_s;
      std::printf(
          "%8lld %12.1f %12.1f %6.2f %10.1f %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %8.2f "
          "%8.1f %10.1f %10.1f %7.2f",
          static_cast<long long>(o.sessions[k]), l.decode_tokens_per_s,
          l.steady_decode_tokens_per_s, l.steady_decode_tokens_per_s / first_decode,
          l.session_decode_tokens_per_s_p50, l.ttft_ms.p50, l.ttft_ms.p90, l.ttft_ms.p99,
          l.itl_ms.p50, l.itl_ms.p90, l.itl_ms.p99, m.step_ms, m.tokens_per_step,
          l.output_tokens_per_s, l.prompt_tokens_per_s, m.cpu_s);
      nlohmann::json row = ToJson(m);
      if (snapshots) {
        double x_off = 0, paired = 0;
        if (has_off) {
          const std::vector<RunResult>& base = runs[k * n_intervals + j_off];
          const double base_steady = MedianRun(base).load.steady_decode_tokens_per_s;
          x_off = base_steady > 0 ? l.steady_decode_tokens_per_s / base_steady : 0;
          std::vector<double> ratios;
          for (size_t rep = 0; rep < these.size(); ++rep) {
            const double b = base[rep].load.steady_decode_tokens_per_s;
            if (b > 0) ratios.push_back(these[rep].load.steady_decode_tokens_per_s / b);
          }
          paired = Median(ratios);
        }
        std::printf(" %9lld %8.0f %7.0f %9.2f %6.3f %7.3f",
                    static_cast<long long>(o.snapshot_every_ms[j]), m.snapshot_writes,
                    m.snapshot_writes_steady, m.snapshot_write_ms_p50, x_off, paired);
        row["x_off"] = x_off;
        row["paired_x_off"] = paired;
      }
      std::printf("\n");
      nlohmann::json per_run = nlohmann::json::array();
      for (const RunResult& r : these) per_run.push_back(ToJson(r));
      row["sessions"] = o.sessions[k];
      row["runs"] = per_run;
      results.push_back(row);
    }
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
                                {"snapshot_every_ms", o.snapshot_every_ms},
                                {"resting_sessions", resting},
                                {"results", results}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
