// ServerConfig: every setting of the daemon (`streamd serve`), grouped as in config/streamd.yaml.
//
// Precedence: built-in defaults (the member initializers below) -> the YAML file -> command-line
// overrides `--section.key=value` (the dotted path is the key's YAML path). Every key is
// overridable; docs/CONFIG.md lists each with its default and limits, and config/streamd.yaml
// ships every key with its default (a test keeps the file and these initializers equal).
//
// Error policy: the config is untrusted input read once at start-up. Unknown keys, bad values
// and inconsistent combinations are INVALID_ARGUMENT errors that start with "config: " and name
// the key's full dotted path and the limit, e.g.
//   config: sessions.default_window = 0 is outside [1, 8188]
//   config: unknown key engine.thread (did you mean engine.threads?)
// yaml-cpp throws; exceptions are caught in LoadServerConfig and never leave this library.
//
// Units: durations are std::chrono::milliseconds written "250ms", "30s", "10m", "1h", "1m30s";
// sizes are bytes written "4MiB", "1GiB", "512KiB" or a plain integer.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/status.h"

namespace streamd {

enum class Backend { kAuto, kCpu, kCuda };
enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };
enum class LogFormat { kText, kJson };

std::string_view BackendName(Backend backend);     // "auto", "cpu", "cuda"
std::string_view LogLevelName(LogLevel level);     // "trace", ..., "warn", "error"
std::string_view LogFormatName(LogFormat format);  // "text", "json"
StatusOr<Backend> ParseBackend(std::string_view name);
StatusOr<LogLevel> ParseLogLevel(std::string_view name);
StatusOr<LogFormat> ParseLogFormat(std::string_view name);

// The KV block pool's budget: a fixed size, or a fraction of the memory available at start-up
// on the backend's device (host MemAvailable for cpu, free device memory for cuda). Exactly one
// of the two is non-zero. Written as one key: "1GiB" / "268435456" (bytes) or "0.25" (fraction).
struct KvPoolBudget {
  int64_t bytes = 1LL << 30;
  double fraction = 0.0;
  bool operator==(const KvPoolBudget&) const = default;
};

// Sampling defaults for sessions that do not set their own (engine/sampling/sampling_params.h
// has the meaning of each knob; the neutral value switches a stage off).
struct SamplingDefaults {
  float temperature = 0.8f;         // 0 = greedy; [0, 100]
  int32_t top_k = 40;               // 0 = off; [0, 1048576]
  float top_p = 0.95f;              // 1 = off; (0, 1]
  float min_p = 0.05f;              // 0 = off; [0, 1]
  float repetition_penalty = 1.0f;  // 1 = off; (0, 10]
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  int32_t penalty_last_n = 64;      // tokens the penalties look back over; [0, 1048576]
  bool operator==(const SamplingDefaults&) const = default;
};

struct ServerConfig {
  struct Server {
    std::string listen_address = "127.0.0.1:50051";  // gRPC; host:port, [v6]:port, unix:/path
    std::string metrics_address = "127.0.0.1:9464";  // Prometheus /metrics over HTTP; host:port
    // The OpenAI-compatible HTTP API (docs/HTTP.md); host:port, "" = off.
    std::string http_address;
    int64_t max_receive_message_bytes = 4LL << 20;     // [1KiB, 1GiB]
    int64_t max_send_message_bytes = 4LL << 20;        // [1KiB, 1GiB]
    std::chrono::milliseconds shutdown_grace{30'000};  // generations may finish; [0, 10m]
    // The transport's limits on what one client may hold (server_options.h: TransportOptions).
    int32_t max_streams_per_connection = 100;                // [1, 65536]
    std::chrono::milliseconds open_timeout{10'000};          // no session yet -> ended; 0 = never
    std::chrono::milliseconds max_connection_idle{600'000};  // no streams -> closed; 0 = never
    std::chrono::milliseconds max_connection_age{0};         // -> GOAWAY; 0 = never
    std::chrono::milliseconds max_connection_age_grace{300'000};
    std::chrono::milliseconds handshake_timeout{10'000};  // [100ms, 10m]
    int64_t grpc_memory_limit = 1LL << 30;                // gRPC's buffers; [16MiB, 1TiB]
    std::chrono::milliseconds min_ping_interval{10'000};  // client pings without data
    int32_t max_ping_strikes = 2;                         // then GOAWAY; [1, 100]
    // TLS on listen_address (docs/SECURITY.md). Paths; a leading "~/" is expanded to $HOME.
    struct Tls {
      std::string cert_file;       // PEM chain; empty = plaintext; set with key_file
      std::string key_file;        // PEM private key (unencrypted); set with cert_file
      std::string client_ca_file;  // PEM CAs; set = mTLS: a client certificate is required
      std::chrono::milliseconds reload_interval{60'000};  // whole seconds; [1s, 1d]
      bool operator==(const Tls&) const = default;
    } tls;
    // TLS on metrics_address (docs/METRICS.md): read at start; a restart rotates them.
    struct MetricsTls {
      std::string cert_file;       // PEM chain; empty = plain HTTP; set with key_file
      std::string key_file;        // PEM private key (unencrypted); set with cert_file
      std::string client_ca_file;  // PEM CAs; set = scrapers need a client certificate
      bool operator==(const MetricsTls&) const = default;
    } metrics_tls;
    bool operator==(const Server&) const = default;
  } server;

  struct Auth {
    // API keys, tenants and quotas (server/config/api_keys_file.h); empty = no keys.
    std::string keys_file;
    // Listen on a non-loopback address with no client authentication (no mTLS, no API keys).
    bool allow_insecure = false;
    // Health and reflection need a key too (needs keys_file); false = open to every caller.
    bool health_requires_key = false;
    bool reflection_requires_key = false;
    bool operator==(const Auth&) const = default;
  } auth;

  struct Model {
    // GGUF file. A leading "~/" is expanded to $HOME when the config is loaded.
    std::string path = "~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    // A build plan for this model and machine (`streamd build`), or empty: the defaults.
    std::string plan;
    // Without a plan: the activations' bits of a K-quant file's products on the CPU; 8 or 12.
    int32_t k_quant_activation_bits = 8;
    bool operator==(const Model&) const = default;
  } model;

  struct Engine {
    Backend backend = Backend::kAuto;  // auto = cuda when built with it and a GPU is present
    int32_t threads = 0;               // CPU forward-pass threads; 0 = all cores; [0, 1024]
    int32_t block_size = 16;           // tokens per KV block; [1, 256]
    KvPoolBudget kv_pool;              // allocated once at start-up
    int32_t max_batch_tokens = 512;    // tokens per forward pass; [1, 65536]
    int32_t max_batch_sessions = 256;  // sessions per forward pass; [1, max_batch_tokens]
    int32_t max_chunk = 256;  // prefill tokens of one session per step; [1, max_batch_tokens]
    // A step's token budget while more than one tenant has work; 0 = none; [0, max_batch_tokens]
    int32_t shared_step_tokens = 0;
    // Local layers (a native sliding window: Gemma 3) keep only that window, in a pool of their own
    bool local_layer_caches = true;
    bool operator==(const Engine&) const = default;
  } engine;

  struct Sessions {
    // Cache of an Open that names no mode: "sink" (S sinks + window W), "window" (S = 0, the
    // ablation) or "dense" (no eviction, bounded by the model context); spelled as the engine's
    // CacheModeName.
    std::string default_mode = "sink";
    int32_t default_sinks = 4;      // attention sinks S when a session does not ask; [0, max_sinks]
    int32_t default_window = 1020;  // window W when a session does not ask; [1, max_window]
    int32_t max_sinks = 64;         // [0, 65536]
    int32_t max_window = 8188;      // also capped by the model's context minus sinks; [1, 1048576]
    int32_t max_sessions = 4096;    // open sessions, admitted or waiting; [1, 1000000]
    int64_t max_pending_tokens = 1LL << 20;  // appended, not yet prefilled, per session
    // A detached session is closed for good (its snapshot deleted) after this; 0 = never.
    std::chrono::milliseconds idle_timeout{7LL * 24 * 3600 * 1000};
    // Durable sessions (docs/SESSIONS.md). Empty snapshot_dir = memory only. A leading "~/"
    // is expanded to $HOME when the config is loaded.
    std::string snapshot_dir = "~/.local/state/streamd/sessions";
    std::chrono::milliseconds snapshot_interval{2000};  // at most one write per session per this
    std::chrono::milliseconds offload_after{600'000};   // detached -> disk (or closed); 0 = never
    // A Resume meeting an offload or load in flight waits at most this, then UNAVAILABLE.
    std::chrono::milliseconds resume_wait{10'000};
    bool restore_on_start = true;            // read snapshots back at start
    int64_t max_snapshot_bytes = 1LL << 30;  // ImportSession; [1MiB, 64GiB]
    int32_t max_transfers = 4;  // ExportSession + ImportSession calls at once; [1, 1024]
    std::chrono::milliseconds admission_timeout{10'000};  // wait for KV blocks; 0 = fail at once
    int32_t max_waiting_opens = 1024;      // Opens waiting for blocks at once; [1, 1000000]
    float max_detached_share = 0.5f;       // of the pool, per client's detached sessions; (0, 1]
    int32_t max_queued_tokens = 1024;      // undelivered tokens per stream before it is cut as slow
    int64_t max_append_bytes = 1LL << 20;  // Append.text; [1, server.max_receive_message_bytes]
    int32_t max_append_tokens = 65536;     // Append.tokens; [1, max_pending_tokens]
    int32_t max_request_id_bytes = 128;    // Generate/Cancel request_id; [0, 4096]
    SamplingDefaults default_sampling;
    int32_t default_max_tokens = 256;  // per generation when the request does not say
    int32_t max_tokens = 4096;         // the most one Generate may ask for
    bool operator==(const Sessions&) const = default;
  } sessions;

  struct Logging {
    LogLevel level = LogLevel::kInfo;
    LogFormat format = LogFormat::kText;
    bool operator==(const Logging&) const = default;
  } logging;

  bool operator==(const ServerConfig&) const = default;
};

// The built-in defaults as LoadServerConfig returns them (model.path with "~" expanded).
ServerConfig DefaultServerConfig();

// defaults -> `yaml_path` (skipped when empty) -> `overrides` ("--engine.threads=4", applied in
// order, so a later one wins). Errors: NOT_FOUND when the file cannot be read; INVALID_ARGUMENT
// for malformed YAML (with line:column), unknown keys, bad values and failed cross-field checks.
StatusOr<ServerConfig> LoadServerConfig(const std::string& yaml_path,
                                        const std::vector<std::string>& overrides);

// The cross-field checks LoadServerConfig runs last, for configs built in code (tests).
Status ValidateServerConfig(const ServerConfig& config);

// The effective config as YAML, every key, in the order of config/streamd.yaml; loading it
// gives back `config`. Logged once at start-up.
std::string EffectiveConfigYaml(const ServerConfig& config);

// Every key's dotted path, in file order ("server.listen_address", ...).
std::vector<std::string> ServerConfigKeys();

// True for "--a.b=..." / "--a.b": the shape of a config override, so a command line can pass
// these to LoadServerConfig and parse the rest as its own flags.
bool LooksLikeConfigOverride(std::string_view arg);

}  // namespace streamd
