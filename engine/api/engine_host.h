// The engine as a daemon hosts it: the model loaded, the session parts built (registry, driver,
// admission queue, token budgets, snapshots on disk) and the session API over them. A daemon
// (server/serve_command.cc, server/grpc_server.cc) holds one api::EngineHost and never sees the
// parts: it passes plain settings in, gets plain hooks called and reads plain stats for its
// metrics. The implementation lives in engine/sessions (session_host.h); this header includes
// only the standard library, Status and the session API.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/api/session_api.h"
#include "engine/util/status.h"

namespace streamd::api {

enum class BackendChoice { kAuto, kCpu, kCuda };

// The engine's settings (the config's engine.* and sessions.* limits).
struct EngineSettings {
  int32_t block_size = 16;
  int64_t pool_bytes = 256LL << 20;  // the KV pool, unless pool_fraction > 0
  double pool_fraction = 0;          // of the backend's memory, resolved when the engine starts
  int32_t max_batch_tokens = 512;
  int32_t max_batch_sessions = 256;
  int32_t shared_step_tokens = 0;
  int32_t threads = 0;  // 0 = all cores
  int32_t max_chunk = 256;
  int32_t max_sessions = 4096;
  int32_t max_sinks = 64;
  int32_t max_window = 8192;
  int64_t max_pending_tokens = 1 << 20;
  // Local layers (Gemma 3) in a KV pool of their own (EngineConfig::local_layer_caches).
  bool local_layer_caches = true;
};

// How the host keeps sessions (the config's sessions.*): residency, admission, snapshots.
struct HostOptions {
  SessionDefaults session_defaults;  // Open's absent fields
  int32_t default_max_tokens = 256;
  // A detached session is closed for good after this long; 0 = never.
  std::chrono::milliseconds idle_timeout{std::chrono::hours(24 * 7)};
  double max_detached_share = 0.5;  // of the pool, per client's detached sessions
  int32_t max_waiting_opens = 1024;
  // Sessions on disk (docs/SESSIONS.md); empty snapshot_dir = memory only.
  std::string snapshot_dir;
  std::chrono::milliseconds snapshot_interval{2000};
  std::chrono::milliseconds offload_after{std::chrono::minutes(10)};
  std::chrono::milliseconds resume_wait{std::chrono::seconds(10)};
  bool restore_on_start = true;
};

// What the host reports as it happens, in plain values (metrics, logs). Every hook is optional;
// they run on engine threads and must not block or call into the host.
struct HostHooks {
  // One engine step: its duration and the tokens of its forward pass.
  std::function<void(double seconds, int64_t tokens)> on_step;
  // Snapshots: `session` is the id ("" when unknown); `why` the error.
  std::function<void(const std::string& session, int64_t bytes, double seconds)> on_written;
  std::function<void(const std::string& session, const Status& why)> on_write_failed;
  std::function<void(const std::string& session, int64_t bytes, double seconds)> on_loaded;
  // A file refused; `moved_to` empty when it was left where it is.
  std::function<void(const std::string& file, const std::string& moved_to, const Status& why)>
      on_rejected;
  std::function<void()> on_close;    // a session closed
  std::function<void()> on_offload;  // a session went to disk
  // A residency transition ended ("offload", "load", ... and "ok", "kept", ...), and a Resume
  // that waited for one was answered ("attached", "refused", "timed_out").
  std::function<void(const std::string& session, std::string_view transition,
                     std::string_view outcome, double seconds)>
      on_transition;
  std::function<void(const std::string& session, std::string_view outcome, double seconds)>
      on_resume_waited;
};

struct HostSetup {
  std::string model_path;
  // A build plan (`streamd build`), or empty, or "auto": the plan beside the model (its path
  // with .plan) when one is there and current, else the defaults with a note saying why; only
  // the CPU backend runs plans.
  std::string plan_path;
  // Without a plan, the bits of the activations that a K-quant file's matrices are multiplied
  // with on the CPU backend: 8 (where that kernel is fast) or 12 (model.k_quant_activation_bits).
  int k_quant_activation_bits = 8;
  BackendChoice backend = BackendChoice::kAuto;
  EngineSettings engine;
  std::string streamd_version;  // stamped into snapshots
  HostOptions options;
  HostHooks hooks;
};

// One line for the daemon's log about the start (the plan, the backend, the snapshot directory).
struct HostNote {
  enum class Level { kInfo, kWarning, kError };
  Level level = Level::kInfo;
  std::string text;
};

// What the daemon prints about the engine it hosts.
struct HostInfo {
  std::string model_name;
  std::string backend_name;  // "cpu", "cuda"
  std::string device;        // where the model runs
  std::string model_fingerprint;
  std::vector<HostNote> notes;  // in order, for the log
};

// A reading for a metrics scrape: one consistent look at each part.
struct HostStats {
  int32_t sessions = 0;  // resident in the engine
  int32_t generating = 0;
  int32_t waiting_opens = 0;  // in the admission queue
  int32_t attached = 0;       // sessions with a stream
  int32_t offloaded = 0, offloading = 0, loading = 0;
  int32_t blocks_total = 0, blocks_used = 0;
  int32_t blocks_reserved = 0;  // admitted sessions' bounds plus the prefill headroom
  int64_t block_bytes = 0;      // KV bytes of one block
  // The local layers' pool of a model whose local layers keep caches of their own (its blocks
  // hold those layers only; the counts above are of the others'): bytes held and in all.
  int64_t local_used_bytes = 0, local_capacity_bytes = 0;
  int64_t tokens_appended = 0, tokens_out = 0, tokens_evicted = 0;  // totals since start
};

struct TenantUsage {
  int32_t sessions = 0;  // resident or on disk
  int32_t generating = 0;
  int64_t blocks = 0;  // reserved by its resident sessions
};

class EngineHost {
 public:
  virtual ~EngineHost() = default;
  // The session API (valid as long as the host).
  virtual Engine& sessions() = 0;
  virtual const HostInfo& info() const = 0;
  // Before Start: the limits of the tenant an Open is for, checked again just before the Open is
  // tried (two Opens of one tenant that race cannot both pass), and a refusal's report. `limits`
  // null: no quotas. Both must stay callable while sessions are served.
  virtual void SetTenantLimits(std::function<TenantLimits(const std::string& tenant)> limits,
                               std::function<void(const Status&)> on_refusal) = 0;
  // Registers the snapshots on disk (and, with restore_on_start, starts reading them back in
  // the background), then starts the reaper. Once, before sessions are served; returns notes
  // for the log.
  virtual std::vector<HostNote> Start() = 0;
  // Writes every session that changed since its snapshot; false when the deadline passed first
  // (true without a snapshot directory).
  virtual bool PersistAll(std::chrono::steady_clock::time_point deadline) = 0;
  virtual HostStats Stats() const = 0;
  virtual TenantUsage UsageOf(const std::string& tenant) const = 0;
};

// Loads the GGUF (validated), its tokenizer and chat template, picks the backend (auto: CUDA when
// this build has it and a GPU is visible), creates the engine and, with a snapshot directory,
// opens this model's directory in it. Errors name the file, the field or the device.
StatusOr<std::unique_ptr<EngineHost>> LoadEngineHost(const HostSetup& setup);

// "dense", "window", "sink" (the config's spelling); errors name the accepted values.
StatusOr<CacheMode> ParseCacheMode(std::string_view name);
// Limits of Generate.stop the engine enforces.
size_t MaxStopStrings();
size_t MaxStopBytes();

}  // namespace streamd::api
