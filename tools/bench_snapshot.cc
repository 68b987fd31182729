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
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "engine/backends/cpu/llama_model.h"
#include "engine/core/engine.h"
#include "engine/core/snapshot_store.h"
#include "engine/gguf/gguf_file.h"
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
  double restore_cpu = 0;  // ... over read + decode + restore
  double read_cold = 0;
};

std::vector<NamedFigure> Fields(Times& t) {
  return {{"capture_ms", &t.capture},
          {"encode_ms", &t.encode},
          {"write_ms", &t.write},
          {"snapshot_ms", &t.snapshot},
          {"snapshot_cpu_ms", &t.snapshot_cpu},
          {"read_ms", &t.read},
          {"decode_ms", &t.decode},
          {"restore_ms", &t.restore},
          {"restore_total_ms", &t.restore_total},
          {"restore_cpu_ms", &t.restore_cpu},
          {"read_cold_ms", &t.read_cold}};
}

nlohmann::json ToJson(Times t) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : Fields(t)) out[name] = *value;
  return out;
}

const char* DtypeName(kernels::KvDtype d) { return d == kernels::KvDtype::kInt8 ? "int8" : "f16"; }

// A copy of the K/V a view shows (f16 or int8 values, and the scales).
KvImage ImageOf(const KvView& v) {
  KvImage image;
  image.n_layers = v.n_layers;
  image.n_kv_heads = v.n_kv_heads;
  image.head_dim = v.head_dim;
  image.n_tokens = v.n_tokens;
  image.dtype = v.dtype;
  image.scales = v.scales;
  if (v.dtype == kernels::KvDtype::kInt8) {
    image.data_i8.assign(v.data_i8, v.data_i8 + v.size);
  } else {
    image.data.assign(v.data, v.data + v.size);
  }
  return image;
}

struct CaseResult {
  kernels::KvDtype dtype = kernels::KvDtype::kF16;
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
  kernels::KvDtype dtype = kernels::KvDtype::kF16;
  int64_t window = 0;
  int32_t pool_blocks = 0;
  int32_t headroom_blocks = 0;
  int32_t bound_blocks = 0;
  int32_t old_bound_blocks = 0;
  // The local layers' pool, when the model keeps them apart (KvPools); 0 otherwise.
  int32_t local_pool_blocks = 0;
  int32_t local_bound_blocks = 0;
  int64_t measured = 0;     // sessions Open admitted before RESOURCE_EXHAUSTED
  int64_t formula = 0;      // floor((pool - headroom) / bound)
  int64_t old_formula = 0;  // floor(pool / old bound)
  std::string refusal;      // the RESOURCE_EXHAUSTED message that ended the count
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

StatusOr<CaseResult> RunCase(Engine& a, Engine& b, SnapshotStore& store, const SnapshotContext& ctx,
                             const std::vector<int32_t>& ids, const SnapshotBenchOptions& o,
                             int64_t window, int64_t tokens_seen) {
  const LlamaConfig& c = a.model().config();
  const CacheSpec spec =
      SessionCache::Effective({CacheMode::kSink, static_cast<int32_t>(o.sinks),
                               static_cast<int32_t>(window), a.config().max_chunk},
                              c.context_length);
  std::mt19937_64 rng(static_cast<uint64_t>(window * 1000003 + tokens_seen));
  // The session to capture: a made state restored into engine a (which checks it).
  SessionState made = MakeIdleState(spec, c, tokens_seen, ids, rng);
  const SessionId id = made.id;
  STREAMD_RETURN_IF_ERROR(a.Restore(made));
  if (a.model().CacheShape().dtype == kernels::KvDtype::kInt8 || a.Stats().local_blocks_total > 0) {
    // An int8 cache (a plan's) holds the random f16 K/V quantized, and local layers in caches
    // of their own hold only their window's rows (the rest read back as zeros): every capture
    // after this one gives back what it holds, and that is what the checks below compare with.
    STREAMD_ASSIGN_OR_RETURN(const SessionState held, a.Capture(id));
    made.kv = held.kv;
  }

  CaseResult out;
  out.dtype = a.model().CacheShape().dtype;
  out.window = window;
  out.tokens_seen = tokens_seen;
  out.cached_tokens = static_cast<int64_t>(made.cached_tokens.size());
  out.pending_tokens = static_cast<int64_t>(made.pending.size());
  out.kv_bytes = made.kv.bytes();
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
      return static_cast<void*>(encoded.data() + SnapshotKvOffset(meta, ctx));
    }));
    const auto t1 = Clock::now();
    STREAMD_ASSIGN_OR_RETURN(
        const size_t n,
        EncodeSnapshotAroundKv(captured, ctx, {encoded.data(), encoded.capacity()}));
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
      whole.kv = ImageOf(kv);
      SessionState expected_capture = captured;
      KvView placed = KvView::Of(captured.kv);
      placed.size = captured.kv.elements();
      const uint8_t* at = encoded.data() + SnapshotKvOffset(captured, ctx);
      placed.data = reinterpret_cast<const uint16_t*>(at);
      placed.data_i8 = reinterpret_cast<const int8_t*>(at);
      expected_capture.kv = ImageOf(placed);
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
StatusOr<CountResult> CountSessions(Engine& engine, const SnapshotBenchOptions& o, int64_t window) {
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
  r.dtype = engine.model().CacheShape().dtype;
  r.window = window;
  r.pool_blocks = before.blocks_total;
  r.headroom_blocks = before.blocks_headroom;
  r.bound_blocks = SessionCache::BoundBlocks(spec, engine.config().block_size);
  r.old_bound_blocks = OldBoundBlocks(spec, engine.config().block_size);
  r.formula = (r.pool_blocks - r.headroom_blocks) / r.bound_blocks;
  if (before.local_blocks_total > 0) {
    // The local layers' pool holds as many sessions of its bound: the fewer of the two.
    r.local_pool_blocks = before.local_blocks_total;
    r.local_bound_blocks = SessionCache::BoundBlocks(
        SessionCache::LocalSpec(spec, engine.model().config().sliding_window),
        engine.config().block_size);
    r.formula = std::min<int64_t>(r.formula,
                                  (r.local_pool_blocks - r.headroom_blocks) / r.local_bound_blocks);
  }
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

// Every channel's scale 1/127: int8 holds the made K/V (random values in (-1, 1)) unsaturated.
StatusOr<std::shared_ptr<const KvInt8Scales>> UnitRangeScales(const LlamaConfig& c) {
  const size_t n = static_cast<size_t>(c.n_layers) * c.n_kv_heads * c.head_dim;
  return KvInt8Scales::Make(c.n_layers, c.n_kv_heads, c.head_dim, std::vector<float>(n, 1.0f / 127),
                            std::vector<float>(n, 1.0f / 127));
}

// An engine whose K/V cache has `dtype`: f16 sets a plan's int8 cache aside; int8 keeps the
// plan's, or takes UnitRangeScales. Int8 caches are the CPU backend's.
StatusOr<std::unique_ptr<Engine>> MakeEngine(const BenchModelSource& source, int64_t pool_bytes,
                                             int64_t threads, kernels::KvDtype dtype,
                                             bool local_layer_caches,
                                             std::optional<int64_t> sized_for_window = {}) {
  STREAMD_ASSIGN_OR_RETURN(BenchModel loaded, LoadBenchModel(source, /*with_tokenizer=*/true));
  if (auto* cpu = dynamic_cast<LlamaModel*>(loaded.model.get())) {
    if (dtype == kernels::KvDtype::kF16) {
      STREAMD_RETURN_IF_ERROR(cpu->SetInt8KvCache(nullptr));
    } else if (cpu->CacheShape().dtype != kernels::KvDtype::kInt8) {
      STREAMD_ASSIGN_OR_RETURN(auto scales, UnitRangeScales(cpu->config()));
      STREAMD_RETURN_IF_ERROR(cpu->SetInt8KvCache(std::move(scales)));
    }
  } else if (dtype == kernels::KvDtype::kInt8) {
    return InvalidArgumentError("--kv-dtype int8: int8 K/V caches are the cpu backend's, not " +
                                std::string(loaded.model->backend_name()) + "'s");
  }
  EngineConfig config;
  config.pool_bytes = pool_bytes;
  config.threads = threads > 0
                       ? static_cast<int32_t>(threads)
                       : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  config.max_chunk = std::min(config.max_chunk, loaded.model->config().context_length);
  config.local_layer_caches = local_layer_caches;
  if (sized_for_window) {  // a daemon whose sessions.default_window is this (KvPools' shares)
    config.default_window = static_cast<int32_t>(*sized_for_window);
  }
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

StatusOr<std::vector<kernels::KvDtype>> ParseKvDtypes(const std::string& text) {
  std::vector<kernels::KvDtype> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string name = text.substr(at, comma - at);
    kernels::KvDtype d;
    if (name == "f16") {
      d = kernels::KvDtype::kF16;
    } else if (name == "int8") {
      d = kernels::KvDtype::kInt8;
    } else {
      return InvalidArgumentError("--kv-dtype: \"" + name + "\" is not f16 or int8");
    }
    if (std::find(out.begin(), out.end(), d) != out.end()) {
      return InvalidArgumentError("--kv-dtype: " + name + " is listed twice");
    }
    out.push_back(d);
    at = comma + 1;
  }
  return out;
}

int RunSnapshotBench(const SnapshotBenchOptions& o) {
  const std::string context = o.source.synthetic.empty() ? o.source.model_path : "";
  if (o.kv_dtypes.empty()) return Fail(InvalidArgumentError("--kv-dtype is empty"));
  std::string dir = o.dir;
  if (dir.empty()) {
    auto made = MakeTempDirectory("snapshot");
    if (!made.ok()) return Fail(made.status());
    dir = *made;
  }
  auto store = SnapshotStore::Open(dir);
  if (!store.ok()) return Fail(store.status());

  // Per dtype: engine a holds the session that is captured; engine b (its own model and pool,
  // with the daemon's defaults and a 1 GiB pool) is where it is restored, and where sessions
  // are counted. One dtype's engines are gone before the next one's are made.
  const int64_t a_pool = int64_t{256} << 20;
  std::vector<CaseResult> cases;
  std::vector<CountResult> counts;
  std::string model_name, device, backend_name;
  std::vector<std::pair<kernels::KvDtype, int64_t>> bytes_per_token;
  int32_t block_size = 0, max_chunk = 0;
  for (kernels::KvDtype dtype : o.kv_dtypes) {
    auto a = MakeEngine(o.source, a_pool, o.threads, dtype, o.local_layer_caches);
    if (!a.ok()) return Fail(a.status(), context);
    const LlamaConfig& c = (*a)->model().config();
    for (int64_t w : o.windows) {
      if (o.sinks + w > c.context_length) {
        return Fail(InvalidArgumentError("--sinks + --window = " + std::to_string(o.sinks) + " + " +
                                         std::to_string(w) + " = " + std::to_string(o.sinks + w) +
                                         " is over the model context of " +
                                         std::to_string(c.context_length)));
      }
    }
    auto b = MakeEngine(o.source, o.count_pool_bytes, o.threads, dtype, o.local_layer_caches);
    if (!b.ok()) return Fail(b.status(), context);
    model_name = o.source.synthetic.empty() ? (*a)->model().config().name
                                            : "synthetic-" + o.source.synthetic;
    device = (*a)->model().device_description();
    backend_name = std::string((*a)->model().backend_name());
    block_size = (*b)->config().block_size;
    max_chunk = (*b)->config().max_chunk;
    bytes_per_token.emplace_back(dtype, (*a)->Stats().bytes_per_token);
    auto ctx = BenchSnapshotContext(o.source, (*a)->model(), model_name, (*a)->config().block_size);
    if (!ctx.ok()) return Fail(ctx.status(), context);
    const std::vector<int32_t> ids = OrdinaryIds((*a)->tokenizer());
    if (ids.empty()) return Fail(InvalidArgumentError("the vocabulary has no ordinary tokens"));

    // Another session in b first, so each restored one gets other block numbers than in a.
    std::mt19937_64 rng(99);
    const CacheSpec spacer_spec = SessionCache::Effective(
        {CacheMode::kSink, static_cast<int32_t>(o.sinks), 40, (*b)->config().max_chunk},
        c.context_length);
    const SessionState spacer = MakeIdleState(spacer_spec, c, 37, ids, rng);
    if (Status s = (*b)->Restore(spacer); !s.ok()) return Fail(s);

    for (int64_t w : o.windows) {
      for (int64_t seen : o.tokens_seen) {
        auto r = RunCase(**a, **b, **store, *ctx, ids, o, w, seen);
        if (!r.ok()) return Fail(r.status());
        cases.push_back(std::move(*r));
      }
    }
    if (Status s = (*b)->Close(spacer.id); !s.ok()) return Fail(s);
    // Local layers in a pool of their own: the two pools' shares follow the default window,
    // so each window is counted in an engine whose default it is (as a daemon of such
    // sessions would be configured); other models count in b.
    const bool split = o.local_layer_caches && !(*b)->model().LocalLayerSplit().empty();
    for (int64_t w : o.windows) {
      std::unique_ptr<Engine> sized;
      if (split) {
        b->reset();  // one model copy at a time
        auto made = MakeEngine(o.source, o.count_pool_bytes, o.threads, dtype, true, w);
        if (!made.ok()) return Fail(made.status(), context);
        sized = std::move(made).value();
      }
      auto r = CountSessions(split ? *sized : **b, o, w);
      if (!r.ok()) return Fail(r.status());
      counts.push_back(*r);
    }
  }
  if (o.dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  std::string per_token;
  for (const auto& [dtype, bytes] : bytes_per_token) {
    per_token +=
        (per_token.empty() ? "" : ", ") + std::to_string(bytes) + " (" + DtypeName(dtype) + ")";
  }
  std::printf(
      "snapshot: model %s on %s; sinks %lld, bytes of K/V per token %s; dir %s%s; "
      "median of %lld reps\n",
      model_name.c_str(), device.c_str(), static_cast<long long>(o.sinks), per_token.c_str(),
      dir.c_str(), o.dir.empty() ? " (removed)" : "", static_cast<long long>(o.reps));
  std::printf("%4s %6s %11s %7s %12s %12s %6s %8s %8s %8s %9s %8s %8s %8s %8s %9s %8s %9s\n", "K/V",
              "window", "tokens seen", "cached", "K/V bytes", "snap bytes", "x K/V", "capture",
              "encode", "write", "snapshot", "(cpu)", "read", "decode", "restore", "restore.",
              "(cpu)", "cold read");
  std::printf("%4s %6s %11s %7s %12s %12s %6s %8s %8s %8s %9s %8s %8s %8s %8s %9s %8s %9s\n", "",
              "", "", "", "", "", "", "ms", "ms", "ms", "total ms", "ms", "ms", "ms", "ms",
              "total ms", "ms", "ms");
  nlohmann::json results = nlohmann::json::array();
  for (const CaseResult& r : cases) {
    const Times& m = r.median;
    // No K/V (one token seen, none cached yet): no ratio.
    const double ratio =
        r.kv_bytes > 0 ? static_cast<double>(r.snapshot_bytes) / static_cast<double>(r.kv_bytes)
                       : 0.0;
    const int64_t goal = static_cast<int64_t>(1.1 * static_cast<double>(r.kv_bytes)) + 65536;
    char ratio_text[16] = "-";
    if (r.kv_bytes > 0) std::snprintf(ratio_text, sizeof(ratio_text), "%.4f", ratio);
    std::printf(
        "%4s %6lld %11lld %7lld %12lld %12lld %6s %8.3f %8.3f %8.3f %9.3f %8.3f %8.3f "
        "%8.3f %8.3f %9.3f %8.3f %9.3f\n",
        DtypeName(r.dtype), static_cast<long long>(r.window), static_cast<long long>(r.tokens_seen),
        static_cast<long long>(r.cached_tokens), static_cast<long long>(r.kv_bytes),
        static_cast<long long>(r.snapshot_bytes), ratio_text, m.capture, m.encode, m.write,
        m.snapshot, m.snapshot_cpu, m.read, m.decode, m.restore, m.restore_total, m.restore_cpu,
        m.read_cold);
    nlohmann::json runs = nlohmann::json::array();
    for (const Times& t : r.runs) runs.push_back(ToJson(t));
    nlohmann::json row = ToJson(m);
    row["kv_dtype"] = DtypeName(r.dtype);
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
  // Int8 beside f16, case by case, when both were measured.
  for (const CaseResult& i8 : cases) {
    if (i8.dtype != kernels::KvDtype::kInt8) continue;
    for (const CaseResult& f16 : cases) {
      if (f16.dtype != kernels::KvDtype::kF16 || f16.window != i8.window ||
          f16.tokens_seen != i8.tokens_seen || f16.snapshot_bytes == 0) {
        continue;
      }
      std::printf(
          "int8 / f16, window %lld, %lld seen: snapshot bytes %.4f, snapshot total %.3f, "
          "restore total %.3f\n",
          static_cast<long long>(i8.window), static_cast<long long>(i8.tokens_seen),
          static_cast<double>(i8.snapshot_bytes) / static_cast<double>(f16.snapshot_bytes),
          i8.median.snapshot / f16.median.snapshot,
          i8.median.restore_total / f16.median.restore_total);
    }
  }
  std::printf(
      "sessions per pool of %lld MiB (block %d, max_chunk %d, prefill headroom %d "
      "blocks; Open until RESOURCE_EXHAUSTED):\n",
      static_cast<long long>(o.count_pool_bytes >> 20), block_size, max_chunk,
      counts.empty() ? 0 : counts.front().headroom_blocks);
  nlohmann::json count_rows = nlohmann::json::array();
  const double gib = static_cast<double>(o.count_pool_bytes) / static_cast<double>(1 << 30);
  for (const CountResult& r : counts) {
    if (r.local_pool_blocks > 0) {
      // Two pools: the formula is the fewer of what each holds (the old bound knew one pool).
      std::printf(
          "  %s window %lld: %lld sessions (formula: the fewer of (%d - %d) / %d and the local "
          "layers' pool's (%d - %d) / %d = %lld; the pools shared for sessions of this window)\n",
          DtypeName(r.dtype), static_cast<long long>(r.window), static_cast<long long>(r.measured),
          r.pool_blocks, r.headroom_blocks, r.bound_blocks, r.local_pool_blocks, r.headroom_blocks,
          r.local_bound_blocks, static_cast<long long>(r.formula));
    } else {
      std::printf(
          "  %s window %lld: %lld sessions (formula (%d - %d) / %d = %lld); the old bound of "
          "%d blocks and no headroom: %d / %d = %lld\n",
          DtypeName(r.dtype), static_cast<long long>(r.window), static_cast<long long>(r.measured),
          r.pool_blocks, r.headroom_blocks, r.bound_blocks, static_cast<long long>(r.formula),
          r.old_bound_blocks, r.pool_blocks, r.old_bound_blocks,
          static_cast<long long>(r.old_formula));
    }
    count_rows.push_back({{"kv_dtype", DtypeName(r.dtype)},
                          {"window", r.window},
                          {"pool_bytes", o.count_pool_bytes},
                          {"pool_blocks", r.pool_blocks},
                          {"headroom_blocks", r.headroom_blocks},
                          {"bound_blocks", r.bound_blocks},
                          {"old_bound_blocks", r.old_bound_blocks},
                          {"local_pool_blocks", r.local_pool_blocks},
                          {"local_bound_blocks", r.local_bound_blocks},
                          {"sessions", r.measured},
                          {"sessions_per_gib", static_cast<double>(r.measured) / gib},
                          {"formula_sessions", r.formula},
                          {"old_formula_sessions", r.old_formula},
                          {"refusal", r.refusal}});
  }
  if (o.json) {
    const nlohmann::json out = {{"model", model_name},
                                {"backend", backend_name},
                                {"device", device},
                                {"sinks", o.sinks},
                                {"reps", o.reps},
                                {"dir", dir},
                                // of the first dtype; each row's kv_bytes are its own
                                {"bytes_per_token", bytes_per_token.front().second},
                                {"results", results},
                                {"sessions_per_gib", count_rows}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
