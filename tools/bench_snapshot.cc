#include "tools/bench_snapshot.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <iostream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/gguf/gguf_file.h"
#include "engine/serving/engine.h"
#include "engine/serving/snapshot_store.h"
#include "engine/snapshot/model_fingerprint.h"
#include "tools/bench/load_metrics.h"
#include "tools/commands.h"

namespace streamd::tools {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// CPU time of the calling thread (ms): what a stage costs the machine besides waiting (fsync).
double ThreadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The bound of the engine before the one-bound change (commit f0c6a2d, SessionCache::MaxBlocks):
// sink blocks plus a ring of ceil((W + C - 1) / B) + 1 blocks, with no pool-wide headroom.
int32_t OldBoundBlocks(const CacheSpec& spec, int32_t block_size) {
  return static_cast<int32_t>(CeilDiv(spec.sinks, block_size) +
                              CeilDiv(spec.window + spec.max_chunk - 1, block_size) + 1);
}

// One repetition's times (ms) of each stage.
struct Times {
  double capture = 0, encode = 0, write = 0, snapshot = 0;
  double snapshot_cpu = 0;  // this thread's CPU time over capture + encode + write
  double read = 0, decode = 0, restore = 0, restore_total = 0;
  double restore_cpu = 0;   // ... over read + decode + restore
  double read_cold = 0;
};

std::vector<NamedFigure> Fields(Times& t) {
  return {{"capture_ms", &t.capture},     {"encode_ms", &t.encode},
          {"write_ms", &t.write},         {"snapshot_ms", &t.snapshot},
          {"snapshot_cpu_ms", &t.snapshot_cpu},
          {"read_ms", &t.read},           {"decode_ms", &t.decode},
          {"restore_ms", &t.restore},     {"restore_total_ms", &t.restore_total},
          {"restore_cpu_ms", &t.restore_cpu},
          {"read_cold_ms", &t.read_cold}};
}

nlohmann::json ToJson(Times t) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : Fields(t)) out[name] = *value;
  return out;
}

struct CaseResult {
  int64_t window = 0;
  int64_t tokens_seen = 0;
  int64_t cached_tokens = 0;
  int64_t pending_tokens = 0;
  int64_t kv_bytes = 0;
  int64_t snapshot_bytes = 0;
  Times median;
  std::vector<Times> runs;
};

struct CountResult {
  int64_t window = 0;
  int32_t pool_blocks = 0;
  int32_t headroom_blocks = 0;
  int32_t bound_blocks = 0;
  int32_t old_bound_blocks = 0;
  int64_t measured = 0;      // sessions Open admitted before RESOURCE_EXHAUSTED
  int64_t formula = 0;       // floor((pool - headroom) / bound)
  int64_t old_formula = 0;   // floor(pool / old bound)
  std::string refusal;       // the RESOURCE_EXHAUSTED message that ended the count
};

// Ordinary (non-special) token ids: what a conversation's context holds.
std::vector<int32_t> OrdinaryIds(const tokenizer::Tokenizer& vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
    if (vocab.token_type(id) == tokenizer::TokenType::kNormal) ids.push_back(id);
  }
  return ids;
}

// A valid idle session of `spec` that has seen `tokens_seen` (>= 1) tokens: tokens_seen - 1 of
// them entered the cache, which holds exactly CachedSpanOf their count (SessionState's
// invariant), and the last one is pending, as an idle session keeps it for the next Generate.
// K/V are random finite f16 values in (-1, 1): timing reads and writes the same bytes whatever
// they are, and attention over them stays finite.
SessionState MakeIdleState(const CacheSpec& spec, const LlamaConfig& c, int64_t tokens_seen,
                           const std::vector<int32_t>& ids, std::mt19937_64& rng) {
  SessionState st;
  st.id = SessionId::Random();
  st.tenant = "bench";
  st.mode = spec.mode;
  st.sinks = spec.sinks;
  st.window = spec.window;
  st.sampling.temperature = 0.0f;  // greedy
  st.sampling.seed = 1;
  st.tokens_seen = tokens_seen - 1;
  const CachedSpan span = CachedSpanOf(spec, st.tokens_seen);
  std::uniform_int_distribution<size_t> pick(0, ids.size() - 1);
  st.cached_tokens.resize(static_cast<size_t>(span.size()));
  for (int32_t& t : st.cached_tokens) t = ids[pick(rng)];
  st.pending = {ids[pick(rng)]};
  st.kv.n_layers = c.n_layers;
  st.kv.n_kv_heads = c.n_kv_heads;
  st.kv.head_dim = c.head_dim;
  st.kv.n_tokens = span.size();
  st.kv.data.resize(static_cast<size_t>(st.kv.elements()));
  // f16 bits: random sign and mantissa, exponent 8..14 (magnitudes in [2^-7, 1)); four values
  // per 64-bit draw.
  for (size_t i = 0; i < st.kv.data.size(); i += 4) {
    uint64_t r = rng();
    for (size_t k = i; k < std::min(i + 4, st.kv.data.size()); ++k, r >>= 16) {
      const uint16_t bits = static_cast<uint16_t>(r);
      const uint16_t exponent = static_cast<uint16_t>(8 + (bits >> 10) % 7);
      st.kv.data[k] = static_cast<uint16_t>((bits & 0x83ffu) | (exponent << 10));
    }
  }
  st.revision = 1;
  st.created_unix_ms = UnixMillisNow();
  st.saved_unix_ms = st.created_unix_ms;
  return st;
}

// Drops the file's pages from the page cache (they are clean: the store fsyncs), so the next
// read comes from the disk.
Status DropFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return InternalError("cannot open " + path);
  const int err = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (err != 0) return InternalError("posix_fadvise(DONTNEED) failed on " + path);
  return OkStatus();
}

// Generates one greedy token in `id` and waits for it: the engine runs the restored state.
Status GenerateOne(Engine& engine, SessionId id) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  GenerateOptions g;
  g.max_tokens = 1;
  g.ignore_end_of_generation = true;
  STREAMD_RETURN_IF_ERROR(engine.Generate(id, g, [done](GenerationEvent&& e) {
    if (e.kind != GenerationEvent::Kind::kDone) return;
    done->set_value(e.reason == FinishReason::kLength
                        ? OkStatus()
                        : InternalError("the restored session's generation ended with " +
                                        std::string(FinishReasonName(e.reason)) + ": " +
                                        e.status.message()));
  }));
  return result.get();
}

StatusOr<CaseResult> RunCase(Engine& a, Engine& b, SnapshotStore& store,
                             const SnapshotContext& ctx, const std::vector<int32_t>& ids,
                             const SnapshotBenchOptions& o, int64_t window, int64_t tokens_seen) {
  const LlamaConfig& c = a.model().config();
  const CacheSpec spec = SessionCache::Effective(
      {CacheMode::kSink, static_cast<int32_t>(o.sinks), static_cast<int32_t>(window),
       a.config().max_chunk},
      c.context_length);
  std::mt19937_64 rng(static_cast<uint64_t>(window * 1000003 + tokens_seen));
  // The session to capture: a made state restored into engine a (which checks it).
  SessionState made = MakeIdleState(spec, c, tokens_seen, ids, rng);
  const SessionId id = made.id;
  STREAMD_RETURN_IF_ERROR(a.Restore(made));
  if (a.model().CacheShape().dtype == kernels::KvDtype::kInt8) {
    // An int8 cache (a plan's) holds the random f16 K/V quantized: every capture after this
    // one gives back what it holds, and that is what the checks below compare with.
    STREAMD_ASSIGN_OR_RETURN(const SessionState held, a.Capture(id));
    made.kv = held.kv;
  }

  CaseResult out;
  out.window = window;
  out.tokens_seen = tokens_seen;
  out.cached_tokens = static_cast<int64_t>(made.cached_tokens.size());
  out.pending_tokens = static_cast<int64_t>(made.pending.size());
  out.kv_bytes = static_cast<int64_t>(made.kv.data.size() * sizeof(uint16_t));
  // The daemon's paths (SessionPersister): capture into a reused state, encode into a reused
  // buffer, write; read into a reused buffer, decode with the K/V left in it, restore from
  // there. Rep 0 also grows the buffers. The daemon writes with direct I/O, so the file is not
  // in the page cache after the write: the restore stages start after one untimed read of it
  // (a restore from the page cache); the cold read is timed on its own below.
  SessionState captured;
  PageAlignedBuffer encoded;
  std::vector<uint8_t> read;
  for (int64_t rep = 0; rep <= o.reps; ++rep) {  // rep 0 warms up and checks, not counted
    Times t;
    const double cpu0 = ThreadCpuMs();
    const auto t0 = Clock::now();
    // The K/V are gathered straight into the snapshot buffer's KV section.
    STREAMD_RETURN_IF_ERROR(a.CaptureInto(id, &captured, [&](const SessionState& meta) {
      const size_t size = EncodedSnapshotSizeForKv(meta, ctx);
      encoded.Reserve(size);
      return reinterpret_cast<uint16_t*>(encoded.data() + SnapshotKvOffset(meta, ctx));
    }));
    const auto t1 = Clock::now();
    STREAMD_ASSIGN_OR_RETURN(const size_t n, EncodeSnapshotAroundKv(
                                                 captured, ctx, {encoded.data(), encoded.capacity()}));
    const std::span<const uint8_t> bytes(encoded.data(), n);
    const auto t2 = Clock::now();
    STREAMD_RETURN_IF_ERROR(store.Write(id, encoded, n));
    const auto t2_end = Clock::now();
    const double cpu2 = ThreadCpuMs();
    STREAMD_RETURN_IF_ERROR(store.ReadInto(id, &read).status());  // into the page cache
    const double cpu3 = ThreadCpuMs();
    const auto t3 = Clock::now();
    STREAMD_ASSIGN_OR_RETURN(const size_t got, store.ReadInto(id, &read));
    const auto t4 = Clock::now();
    KvView kv;
    STREAMD_ASSIGN_OR_RETURN(const SessionState decoded,
                             DecodeSnapshot(std::span<const uint8_t>(read.data(), got), ctx, &kv));
    const auto t5 = Clock::now();
    STREAMD_RETURN_IF_ERROR(b.Restore(decoded, kv));
    const auto t6 = Clock::now();
    const double cpu6 = ThreadCpuMs();
    if (rep == 0) {
      SessionState whole = decoded;  // the K/V were left in place: compare them too
      whole.kv.data.assign(kv.data, kv.data + kv.size);
      SessionState expected_capture = captured;
      const auto* placed = reinterpret_cast<const uint16_t*>(
          encoded.data() + SnapshotKvOffset(captured, ctx));
      expected_capture.kv.data.assign(placed, placed + captured.kv.elements());
      if (!(whole == expected_capture)) {
        return InternalError("the decoded snapshot differs from the captured state");
      }
      SessionState expected = made;
      expected.saved_unix_ms = captured.saved_unix_ms;
      if (!(expected_capture == expected)) {
        return InternalError("the captured state differs from the restored one");
      }
      STREAMD_RETURN_IF_ERROR(GenerateOne(b, id));
    }
    STREAMD_RETURN_IF_ERROR(b.Close(id));
    STREAMD_RETURN_IF_ERROR(DropFromPageCache(store.PathOf(id)));
    const auto t7 = Clock::now();
    STREAMD_ASSIGN_OR_RETURN(const std::vector<uint8_t> cold, store.Read(id));
    const auto t8 = Clock::now();
    if (cold.size() != bytes.size()) return InternalError("the cold read returned other bytes");
    out.snapshot_bytes = static_cast<int64_t>(bytes.size());
    t.capture = Ms(t1 - t0);
    t.encode = Ms(t2 - t1);
    t.write = Ms(t2_end - t2);
    t.snapshot = Ms(t2_end - t0);
    t.snapshot_cpu = cpu2 - cpu0;
    t.read = Ms(t4 - t3);
    t.decode = Ms(t5 - t4);
    t.restore = Ms(t6 - t5);
    t.restore_total = Ms(t6 - t3);
    t.restore_cpu = cpu6 - cpu3;
    t.read_cold = Ms(t8 - t7);
    if (rep > 0) out.runs.push_back(t);
  }
  out.median = MedianOfRuns(out.runs, [](Times& t) { return Fields(t); });
  STREAMD_RETURN_IF_ERROR(a.Close(id));
  STREAMD_RETURN_IF_ERROR(store.Remove(id));
  return out;
}

// Opens sessions of each window in an empty engine until Open answers RESOURCE_EXHAUSTED.
StatusOr<CountResult> CountSessions(Engine& engine, const SnapshotBenchOptions& o,
                                    int64_t window) {
  const EngineStats before = engine.Stats();
  if (before.sessions != 0 || before.blocks_reserved != 0) {
    return InternalError("the engine that counts sessions is not empty");
  }
  SessionOptions options;
  options.mode = CacheMode::kSink;
  options.sinks = static_cast<int32_t>(o.sinks);
  options.window = static_cast<int32_t>(window);
  const CacheSpec spec = SessionCache::Effective(
      {options.mode, options.sinks, options.window, engine.config().max_chunk},
      engine.model().config().context_length);
  CountResult r;
  r.window = window;
  r.pool_blocks = before.blocks_total;
  r.headroom_blocks = before.blocks_headroom;
  r.bound_blocks = SessionCache::BoundBlocks(spec, engine.config().block_size);
  r.old_bound_blocks = OldBoundBlocks(spec, engine.config().block_size);
  r.formula = (r.pool_blocks - r.headroom_blocks) / r.bound_blocks;
  r.old_formula = r.pool_blocks / r.old_bound_blocks;
  std::vector<SessionId> opened;
  Status refused;
  for (;;) {
    StatusOr<SessionId> id = engine.Open(options);
    if (!id.ok()) {
      refused = id.status();
      break;
    }
    opened.push_back(*id);
  }
  for (SessionId id : opened) STREAMD_RETURN_IF_ERROR(engine.Close(id));
  if (refused.code() != StatusCode::kResourceExhausted) return refused;
  r.measured = static_cast<int64_t>(opened.size());
  r.refusal = refused.message();
  return r;
}

StatusOr<std::unique_ptr<Engine>> MakeEngine(const BenchModelSource& source, int64_t pool_bytes,
                                             int64_t threads) {
  STREAMD_ASSIGN_OR_RETURN(BenchModel loaded, LoadBenchModel(source, /*with_tokenizer=*/true));
  EngineConfig config;
  config.pool_bytes = pool_bytes;
  config.threads = threads > 0
                       ? static_cast<int32_t>(threads)
                       : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  config.max_chunk = std::min(config.max_chunk, loaded.model->config().context_length);
  return Engine::Create(std::move(loaded.model), std::move(loaded.tokenizer), config);
}

}  // namespace

StatusOr<SnapshotContext> BenchSnapshotContext(const BenchModelSource& source,
                                               const ModelBackend& model,
                                               const std::string& model_name, int32_t block_size) {
  SnapshotContext ctx;
  if (source.synthetic.empty()) {
    STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file,
                             gguf::GgufFile::Open(source.model_path));
    ctx.model_fingerprint = ModelFingerprint(*file);
  } else {
    ctx.model_fingerprint = "synthetic-" + source.synthetic;
  }
  const LlamaConfig& c = model.config();
  ctx.model_name = model_name;
  ctx.n_layers = c.n_layers;
  ctx.n_kv_heads = c.n_kv_heads;
  ctx.head_dim = c.head_dim;
  ctx.block_size = block_size;
  ctx.streamd_version = "bench";
  return ctx;
}

StatusOr<std::string> MakeTempDirectory(const std::string& what) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                        "/streamd-bench-" + what + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return InternalError("cannot create a temporary directory " + pattern);
  }
  return pattern;
}

int RunSnapshotBench(const SnapshotBenchOptions& o) {
  const std::string context = o.source.synthetic.empty() ? o.source.model_path : "";
  // Engine a holds the session that is captured; engine b (its own model and pool, with the
  // daemon's defaults and a 1 GiB pool) is where it is restored, and where sessions are counted.
  const int64_t a_pool = int64_t{256} << 20;
  auto a = MakeEngine(o.source, a_pool, o.threads);
  if (!a.ok()) return Fail(a.status(), context);
  const LlamaConfig& c = (*a)->model().config();
  for (int64_t w : o.windows) {
    if (o.sinks + w > c.context_length) {
      return Fail(InvalidArgumentError(
          "--sinks + --window = " + std::to_string(o.sinks) + " + " + std::to_string(w) + " = " +
          std::to_string(o.sinks + w) + " is over the model context of " +
          std::to_string(c.context_length)));
    }
  }
  auto b = MakeEngine(o.source, o.count_pool_bytes, o.threads);
  if (!b.ok()) return Fail(b.status(), context);
  const std::string model_name = o.source.synthetic.empty()
                                     ? (*a)->model().config().name
                                     : "synthetic-" + o.source.synthetic;
  auto ctx = BenchSnapshotContext(o.source, (*a)->model(), model_name, (*a)->config().block_size);
  if (!ctx.ok()) return Fail(ctx.status(), context);
  const std::vector<int32_t> ids = OrdinaryIds((*a)->tokenizer());
  if (ids.empty()) return Fail(InvalidArgumentError("the vocabulary has no ordinary tokens"));

  std::string dir = o.dir;
  if (dir.empty()) {
    auto made = MakeTempDirectory("snapshot");
    if (!made.ok()) return Fail(made.status());
    dir = *made;
  }
  auto store = SnapshotStore::Open(dir);
  if (!store.ok()) return Fail(store.status());

  // Another session in b first, so each restored one gets other block numbers than in a.
  std::mt19937_64 rng(99);
  const CacheSpec spacer_spec = SessionCache::Effective(
      {CacheMode::kSink, static_cast<int32_t>(o.sinks), 40, (*b)->config().max_chunk},
      c.context_length);
  const SessionState spacer = MakeIdleState(spacer_spec, c, 37, ids, rng);
  if (Status s = (*b)->Restore(spacer); !s.ok()) return Fail(s);

  std::vector<CaseResult> cases;
  for (int64_t w : o.windows) {
    for (int64_t seen : o.tokens_seen) {
      auto r = RunCase(**a, **b, **store, *ctx, ids, o, w, seen);
      if (!r.ok()) return Fail(r.status());
      cases.push_back(std::move(*r));
    }
  }
  if (Status s = (*b)->Close(spacer.id); !s.ok()) return Fail(s);
  std::vector<CountResult> counts;
  for (int64_t w : o.windows) {
    auto r = CountSessions(**b, o, w);
    if (!r.ok()) return Fail(r.status());
    counts.push_back(*r);
  }
  if (o.dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  const int64_t bytes_per_token = (*a)->Stats().bytes_per_token;
  std::printf("snapshot: model %s on %s; sinks %lld, %lld bytes of K/V per token; dir %s%s; "
              "median of %lld reps\n",
              model_name.c_str(), (*a)->model().device_description().c_str(),
              static_cast<long long>(o.sinks), static_cast<long long>(bytes_per_token),
              dir.c_str(), o.dir.empty() ? " (removed)" : "", static_cast<long long>(o.reps));
  std::printf("%6s %11s %7s %12s %12s %6s %8s %8s %8s %9s %8s %8s %8s %8s %9s %8s %9s\n",
              "window", "tokens seen", "cached", "K/V bytes", "snap bytes", "x K/V", "capture",
              "encode", "write", "snapshot", "(cpu)", "read", "decode", "restore", "restore.",
              "(cpu)", "cold read");
  std::printf("%6s %11s %7s %12s %12s %6s %8s %8s %8s %9s %8s %8s %8s %8s %9s %8s %9s\n", "",
              "", "", "", "", "", "ms", "ms", "ms", "total ms", "ms", "ms", "ms", "ms",
              "total ms", "ms", "ms");
  nlohmann::json results = nlohmann::json::array();
  for (const CaseResult& r : cases) {
    const Times& m = r.median;
    // No K/V (one token seen, none cached yet): no ratio.
    const double ratio = r.kv_bytes > 0 ? static_cast<double>(r.snapshot_bytes) /
                                              static_cast<double>(r.kv_bytes)
                                        : 0.0;
    const int64_t goal = static_cast<int64_t>(1.1 * static_cast<double>(r.kv_bytes)) + 65536;
    char ratio_text[16] = "-";
    if (r.kv_bytes > 0) std::snprintf(ratio_text, sizeof(ratio_text), "%.4f", ratio);
    std::printf("%6lld %11lld %7lld %12lld %12lld %6s %8.3f %8.3f %8.3f %9.3f %8.3f %8.3f %8.3f "
                "%8.3f %9.3f %8.3f %9.3f\n",
                static_cast<long long>(r.window), static_cast<long long>(r.tokens_seen),
                static_cast<long long>(r.cached_tokens), static_cast<long long>(r.kv_bytes),
                static_cast<long long>(r.snapshot_bytes), ratio_text, m.capture, m.encode,
                m.write, m.snapshot, m.snapshot_cpu, m.read, m.decode, m.restore,
                m.restore_total, m.restore_cpu, m.read_cold);
    nlohmann::json runs = nlohmann::json::array();
    for (const Times& t : r.runs) runs.push_back(ToJson(t));
    nlohmann::json row = ToJson(m);
    row["window"] = r.window;
    row["tokens_seen"] = r.tokens_seen;
    row["cached_tokens"] = r.cached_tokens;
    row["pending_tokens"] = r.pending_tokens;
    row["kv_bytes"] = r.kv_bytes;
    row["snapshot_bytes"] = r.snapshot_bytes;
    row["snapshot_to_kv"] = r.kv_bytes > 0 ? nlohmann::json(ratio) : nlohmann::json(nullptr);
    row["size_goal_bytes"] = goal;
    row["size_goal_met"] = r.snapshot_bytes <= goal;
    row["runs"] = runs;
    results.push_back(row);
  }
  std::printf("sessions per pool of %lld MiB (block %d, max_chunk %d, prefill headroom %d "
              "blocks; Open until RESOURCE_EXHAUSTED):\n",
              static_cast<long long>(o.count_pool_bytes >> 20), (*b)->config().block_size,
              (*b)->config().max_chunk, counts.empty() ? 0 : counts.front().headroom_blocks);
  nlohmann::json count_rows = nlohmann::json::array();
  const double gib = static_cast<double>(o.count_pool_bytes) / static_cast<double>(1 << 30);
  for (const CountResult& r : counts) {
    std::printf("  window %lld: %lld sessions (formula (%d - %d) / %d = %lld); the old bound of "
                "%d blocks and no headroom: %d / %d = %lld\n",
                static_cast<long long>(r.window), static_cast<long long>(r.measured),
                r.pool_blocks, r.headroom_blocks, r.bound_blocks,
                static_cast<long long>(r.formula), r.old_bound_blocks, r.pool_blocks,
                r.old_bound_blocks, static_cast<long long>(r.old_formula));
    count_rows.push_back({{"window", r.window},
                          {"pool_bytes", o.count_pool_bytes},
                          {"pool_blocks", r.pool_blocks},
                          {"headroom_blocks", r.headroom_blocks},
                          {"bound_blocks", r.bound_blocks},
                          {"old_bound_blocks", r.old_bound_blocks},
                          {"sessions", r.measured},
                          {"sessions_per_gib", static_cast<double>(r.measured) / gib},
                          {"formula_sessions", r.formula},
                          {"old_formula_sessions", r.old_formula},
                          {"refusal", r.refusal}});
  }
  if (o.json) {
    const nlohmann::json out = {{"model", model_name},
                                {"backend", std::string((*a)->model().backend_name())},
                                {"device", (*a)->model().device_description()},
                                {"sinks", o.sinks},
                                {"reps", o.reps},
                                {"dir", dir},
                                {"bytes_per_token", bytes_per_token},
                                {"results", results},
                                {"sessions_per_gib", count_rows}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
