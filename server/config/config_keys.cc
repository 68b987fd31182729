#include "server/config/config_keys.h"

#include <algorithm>
#include <array>
#include <set>
#include <type_traits>
#include <utility>

#include "server/config/config_values.h"

namespace streamd {
namespace {

template <typename E, size_t N>
StatusOr<E> ParseName(std::string_view name, const std::array<std::string_view, N>& names) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  std::string list;
  for (size_t i = 0; i < N; ++i) list += std::string(i == 0 ? "" : ", ") + std::string(names[i]);
  return InvalidArgumentError("is not one of " + list);
}

// Indexed by the enum's value.
constexpr std::array<std::string_view, 3> kBackendNames = {"auto", "cpu", "cuda"};
constexpr std::array<std::string_view, 5> kLevelNames = {"trace", "debug", "info", "warn", "error"};
constexpr std::array<std::string_view, 2> kFormatNames = {"text", "json"};

}  // namespace

std::string_view BackendName(Backend b) { return kBackendNames.at(static_cast<size_t>(b)); }
std::string_view LogLevelName(LogLevel l) { return kLevelNames.at(static_cast<size_t>(l)); }
std::string_view LogFormatName(LogFormat f) { return kFormatNames.at(static_cast<size_t>(f)); }
StatusOr<Backend> ParseBackend(std::string_view n) { return ParseName<Backend>(n, kBackendNames); }
StatusOr<LogLevel> ParseLogLevel(std::string_view n) { return ParseName<LogLevel>(n, kLevelNames); }
StatusOr<LogFormat> ParseLogFormat(std::string_view n) {
  return ParseName<LogFormat>(n, kFormatNames);
}

namespace config {
namespace {

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMinute = 60'000;
constexpr int64_t kDay = 24 * 60 * kMinute;

// A reference to one field of a (const or non-const) ServerConfig.
#define STREAMD_FIELD(member) \
  [](auto& c) -> auto& { return c.member; }

Status Outside(const std::string& lo, const std::string& hi, bool lo_open = false,
               bool hi_open = false) {
  return InvalidArgumentError("is outside " + std::string(lo_open ? "(" : "[") + lo + ", " + hi +
                              (hi_open ? ")" : "]"));
}

template <typename Get>
ConfigKey IntKey(std::string path, Get get, int64_t lo, int64_t hi) {
  return {std::move(path),
          [get, lo, hi](std::string_view v, ServerConfig& c) -> Status {
            auto x = ParseInteger(v);
            if (!x.ok()) return x.status();
            if (*x < lo || *x > hi) return Outside(std::to_string(lo), std::to_string(hi));
            get(c) = static_cast<std::remove_reference_t<decltype(get(c))>>(*x);
            return OkStatus();
          },
          [get](const ServerConfig& c) { return std::to_string(get(c)); }};
}

template <typename Get>
ConfigKey SizeKey(std::string path, Get get, int64_t lo, int64_t hi) {
  return {std::move(path),
          [get, lo, hi](std::string_view v, ServerConfig& c) -> Status {
            auto x = ParseByteSize(v);
            if (!x.ok()) return x.status();
            if (*x < lo || *x > hi) return Outside(FormatByteSize(lo), FormatByteSize(hi));
            get(c) = *x;
            return OkStatus();
          },
          [get](const ServerConfig& c) { return FormatByteSize(get(c)); }};
}

template <typename Get>
ConfigKey DurationKey(std::string path, Get get, int64_t lo_ms, int64_t hi_ms) {
  using std::chrono::milliseconds;
  return {std::move(path),
          [get, lo_ms, hi_ms](std::string_view v, ServerConfig& c) -> Status {
            auto x = ParseDuration(v);
            if (!x.ok()) return x.status();
            if (x->count() < lo_ms || x->count() > hi_ms) {
              return Outside(FormatDuration(milliseconds(lo_ms)),
                             FormatDuration(milliseconds(hi_ms)));
            }
            get(c) = *x;
            return OkStatus();
          },
          [get](const ServerConfig& c) { return FormatDuration(get(c)); }};
}

// A duration in whole seconds (a consumer that counts seconds: gRPC's certificate watcher).
template <typename Get>
ConfigKey WholeSecondsKey(std::string path, Get get, int64_t lo_ms, int64_t hi_ms) {
  ConfigKey key = DurationKey(std::move(path), get, lo_ms, hi_ms);
  key.parse = [inner = key.parse](std::string_view v, ServerConfig& c) -> Status {
    if (auto x = ParseDuration(v); x.ok() && x->count() % 1000 != 0) {
      return InvalidArgumentError("is not a whole number of seconds");
    }
    return inner(v, c);
  };
  return key;
}

// A file path, or empty for "none". Not checked here: the files are read where they are used
// (start-up errors name the key and the path).
template <typename Get>
ConfigKey PathKey(std::string path, Get get) {
  return {std::move(path),
          [get](std::string_view v, ServerConfig& c) -> Status {
            get(c) = std::string(v);
            return OkStatus();
          },
          [get](const ServerConfig& c) { return get(c); }};
}

struct FloatRange {
  float lo, hi;
  bool lo_open = false, hi_open = false;
};

template <typename Get>
ConfigKey FloatKey(std::string path, Get get, FloatRange r) {
  return {std::move(path),
          [get, r](std::string_view v, ServerConfig& c) -> Status {
            auto x = ParseNumber(v);
            if (!x.ok()) return x.status();
            const float f = static_cast<float>(*x);
            if (f < r.lo || f > r.hi || (r.lo_open && f == r.lo) || (r.hi_open && f == r.hi)) {
              return Outside(FormatNumber(r.lo), FormatNumber(r.hi), r.lo_open, r.hi_open);
            }
            get(c) = f;
            return OkStatus();
          },
          [get](const ServerConfig& c) { return FormatNumber(get(c)); }};
}

template <typename Get>
ConfigKey BoolKey(std::string path, Get get) {
  return {std::move(path),
          [get](std::string_view v, ServerConfig& c) -> Status {
            if (v == "true") {
              get(c) = true;
            } else if (v == "false") {
              get(c) = false;
            } else {
              return InvalidArgumentError("is not true or false");
            }
            return OkStatus();
          },
          [get](const ServerConfig& c) { return std::string(get(c) ? "true" : "false"); }};
}

// `parse` returns StatusOr<E>; `name` maps E to its spelling.
template <typename Get, typename Parse, typename Name>
ConfigKey EnumKey(std::string path, Get get, Parse parse, Name name) {
  return {std::move(path),
          [get, parse](std::string_view v, ServerConfig& c) -> Status {
            auto x = parse(v);
            if (!x.ok()) return x.status();
            get(c) = *x;
            return OkStatus();
          },
          [get, name](const ServerConfig& c) { return std::string(name(get(c))); }};
}

template <typename Get>
ConfigKey AddressKey(std::string path, Get get, bool allow_unix) {
  return {std::move(path),
          [get, allow_unix](std::string_view v, ServerConfig& c) -> Status {
            STREAMD_RETURN_IF_ERROR(CheckAddress(v, allow_unix));
            get(c) = std::string(v);
            return OkStatus();
          },
          [get](const ServerConfig& c) { return get(c); }};
}

// An address that may be empty (a listener that is off).
template <typename Get>
ConfigKey OptionalAddressKey(std::string path, Get get) {
  return {std::move(path),
          [get](std::string_view v, ServerConfig& c) -> Status {
            if (!v.empty()) STREAMD_RETURN_IF_ERROR(CheckAddress(v, /*allow_unix=*/false));
            get(c) = std::string(v);
            return OkStatus();
          },
          [get](const ServerConfig& c) { return get(c); }};
}

// A string that must be one of `choices`.
template <typename Get>
ConfigKey ChoiceKey(std::string path, Get get, std::vector<std::string> choices) {
  return {std::move(path),
          [get, choices](std::string_view v, ServerConfig& c) -> Status {
            if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
              std::string list;
              for (const std::string& choice : choices) list += (list.empty() ? "" : ", ") + choice;
              return InvalidArgumentError("is not one of " + list);
            }
            get(c) = std::string(v);
            return OkStatus();
          },
          [get](const ServerConfig& c) { return get(c); }};
}

std::vector<ConfigKey> MakeKeys() {
  constexpr int64_t kIntMax = 2147483647;
  std::vector<ConfigKey> k;
  // server
  k.push_back(AddressKey("server.listen_address", STREAMD_FIELD(server.listen_address), true));
  k.push_back(AddressKey("server.metrics_address", STREAMD_FIELD(server.metrics_address), false));
  k.push_back(OptionalAddressKey("server.http_address", STREAMD_FIELD(server.http_address)));
  k.push_back(SizeKey("server.max_receive_message_bytes",
                      STREAMD_FIELD(server.max_receive_message_bytes), kKiB, kGiB));
  k.push_back(SizeKey("server.max_send_message_bytes", STREAMD_FIELD(server.max_send_message_bytes),
                      kKiB, kGiB));
  k.push_back(
      DurationKey("server.shutdown_grace", STREAMD_FIELD(server.shutdown_grace), 0, 10 * kMinute));
  k.push_back(IntKey("server.max_streams_per_connection",
                     STREAMD_FIELD(server.max_streams_per_connection), 1, 65536));
  k.push_back(
      DurationKey("server.open_timeout", STREAMD_FIELD(server.open_timeout), 0, 10 * kMinute));
  k.push_back(DurationKey("server.max_connection_idle", STREAMD_FIELD(server.max_connection_idle),
                          0, 365 * kDay));
  k.push_back(DurationKey("server.max_connection_age", STREAMD_FIELD(server.max_connection_age), 0,
                          365 * kDay));
  k.push_back(DurationKey("server.max_connection_age_grace",
                          STREAMD_FIELD(server.max_connection_age_grace), 0, 365 * kDay));
  k.push_back(DurationKey("server.handshake_timeout", STREAMD_FIELD(server.handshake_timeout), 100,
                          10 * kMinute));
  k.push_back(SizeKey("server.grpc_memory_limit", STREAMD_FIELD(server.grpc_memory_limit),
                      16 * kMiB, 1024 * kGiB));
  k.push_back(DurationKey("server.min_ping_interval", STREAMD_FIELD(server.min_ping_interval), 0,
                          60 * kMinute));
  k.push_back(IntKey("server.max_ping_strikes", STREAMD_FIELD(server.max_ping_strikes), 1, 100));
  k.push_back(PathKey("server.tls.cert_file", STREAMD_FIELD(server.tls.cert_file)));
  k.push_back(PathKey("server.tls.key_file", STREAMD_FIELD(server.tls.key_file)));
  k.push_back(PathKey("server.tls.client_ca_file", STREAMD_FIELD(server.tls.client_ca_file)));
  k.push_back(WholeSecondsKey("server.tls.reload_interval",
                              STREAMD_FIELD(server.tls.reload_interval), 1000, kDay));
  k.push_back(PathKey("server.metrics_tls.cert_file", STREAMD_FIELD(server.metrics_tls.cert_file)));
  k.push_back(PathKey("server.metrics_tls.key_file", STREAMD_FIELD(server.metrics_tls.key_file)));
  k.push_back(PathKey("server.metrics_tls.client_ca_file",
                      STREAMD_FIELD(server.metrics_tls.client_ca_file)));
  // auth
  k.push_back(PathKey("auth.keys_file", STREAMD_FIELD(auth.keys_file)));
  k.push_back(BoolKey("auth.allow_insecure", STREAMD_FIELD(auth.allow_insecure)));
  k.push_back(BoolKey("auth.health_requires_key", STREAMD_FIELD(auth.health_requires_key)));
  k.push_back(BoolKey("auth.reflection_requires_key", STREAMD_FIELD(auth.reflection_requires_key)));
  // model
  k.push_back({"model.path",
               [](std::string_view v, ServerConfig& c) -> Status {
                 if (v.empty()) return InvalidArgumentError("must not be empty");
                 c.model.path = std::string(v);
                 return OkStatus();
               },
               [](const ServerConfig& c) { return c.model.path; }});
  k.push_back(PathKey("model.plan", STREAMD_FIELD(model.plan)));
  k.push_back(
      {"model.k_quant_activation_bits",
       [](std::string_view v, ServerConfig& c) -> Status {
         auto x = ParseInteger(v);
         if (!x.ok()) return x.status();
         if (*x != 8 && *x != 12) return InvalidArgumentError("is not one of 8, 12");
         c.model.k_quant_activation_bits = static_cast<int32_t>(*x);
         return OkStatus();
       },
       [](const ServerConfig& c) { return std::to_string(c.model.k_quant_activation_bits); }});
  // engine
  k.push_back(EnumKey("engine.backend", STREAMD_FIELD(engine.backend), ParseBackend, BackendName));
  k.push_back(IntKey("engine.threads", STREAMD_FIELD(engine.threads), 0, 1024));
  k.push_back(IntKey("engine.block_size", STREAMD_FIELD(engine.block_size), 1, 256));
  k.push_back({"engine.kv_pool",
               [](std::string_view v, ServerConfig& c) -> Status {
                 auto x = ParseKvPoolBudget(v);
                 if (!x.ok()) return x.status();
                 c.engine.kv_pool = *x;
                 return OkStatus();
               },
               [](const ServerConfig& c) { return FormatKvPoolBudget(c.engine.kv_pool); }});
  k.push_back(IntKey("engine.max_batch_tokens", STREAMD_FIELD(engine.max_batch_tokens), 1, 65536));
  k.push_back(
      IntKey("engine.max_batch_sessions", STREAMD_FIELD(engine.max_batch_sessions), 1, 65536));
  k.push_back(IntKey("engine.max_chunk", STREAMD_FIELD(engine.max_chunk), 1, 65536));
  k.push_back(
      IntKey("engine.shared_step_tokens", STREAMD_FIELD(engine.shared_step_tokens), 0, 65536));
  k.push_back(BoolKey("engine.local_layer_caches", STREAMD_FIELD(engine.local_layer_caches)));
  // sessions; default_sinks and default_window are range-checked against max_* afterwards.
  k.push_back(ChoiceKey("sessions.default_mode", STREAMD_FIELD(sessions.default_mode),
                        {"sink", "window", "dense"}));
  k.push_back(
      IntKey("sessions.default_sinks", STREAMD_FIELD(sessions.default_sinks), -kIntMax, kIntMax));
  k.push_back(
      IntKey("sessions.default_window", STREAMD_FIELD(sessions.default_window), -kIntMax, kIntMax));
  k.push_back(IntKey("sessions.max_sinks", STREAMD_FIELD(sessions.max_sinks), 0, 65536));
  k.push_back(IntKey("sessions.max_window", STREAMD_FIELD(sessions.max_window), 1, 1 << 20));
  k.push_back(IntKey("sessions.max_sessions", STREAMD_FIELD(sessions.max_sessions), 1, 1'000'000));
  k.push_back(IntKey("sessions.max_pending_tokens", STREAMD_FIELD(sessions.max_pending_tokens), 1,
                     int64_t{1} << 30));
  k.push_back(
      DurationKey("sessions.idle_timeout", STREAMD_FIELD(sessions.idle_timeout), 0, 365 * kDay));
  k.push_back({"sessions.snapshot_dir",
               [](std::string_view v, ServerConfig& c) -> Status {
                 c.sessions.snapshot_dir = std::string(v);  // empty: memory only
                 return OkStatus();
               },
               [](const ServerConfig& c) { return c.sessions.snapshot_dir; }});
  k.push_back(DurationKey("sessions.snapshot_interval", STREAMD_FIELD(sessions.snapshot_interval),
                          0, 60 * kMinute));
  k.push_back(
      DurationKey("sessions.offload_after", STREAMD_FIELD(sessions.offload_after), 0, 365 * kDay));
  k.push_back(
      DurationKey("sessions.resume_wait", STREAMD_FIELD(sessions.resume_wait), 100, 5 * kMinute));
  k.push_back(BoolKey("sessions.restore_on_start", STREAMD_FIELD(sessions.restore_on_start)));
  k.push_back(SizeKey("sessions.max_snapshot_bytes", STREAMD_FIELD(sessions.max_snapshot_bytes),
                      kMiB, 64 * kGiB));
  k.push_back(DurationKey("sessions.admission_timeout", STREAMD_FIELD(sessions.admission_timeout),
                          0, 10 * kMinute));
  k.push_back(IntKey("sessions.max_transfers", STREAMD_FIELD(sessions.max_transfers), 1, 1024));
  k.push_back(IntKey("sessions.max_waiting_opens", STREAMD_FIELD(sessions.max_waiting_opens), 1,
                     1'000'000));
  k.push_back(FloatKey("sessions.max_detached_share", STREAMD_FIELD(sessions.max_detached_share),
                       {0.0f, 1.0f, true, false}));
  k.push_back(
      IntKey("sessions.max_queued_tokens", STREAMD_FIELD(sessions.max_queued_tokens), 1, 1 << 20));
  k.push_back(
      SizeKey("sessions.max_append_bytes", STREAMD_FIELD(sessions.max_append_bytes), 1, kGiB));
  k.push_back(
      IntKey("sessions.max_append_tokens", STREAMD_FIELD(sessions.max_append_tokens), 1, 1 << 24));
  k.push_back(IntKey("sessions.max_request_id_bytes", STREAMD_FIELD(sessions.max_request_id_bytes),
                     0, 4096));
  const std::string s = "sessions.default_sampling.";
  k.push_back(FloatKey(s + "temperature", STREAMD_FIELD(sessions.default_sampling.temperature),
                       {0.0f, 100.0f}));
  k.push_back(IntKey(s + "top_k", STREAMD_FIELD(sessions.default_sampling.top_k), 0, 1 << 20));
  k.push_back(FloatKey(s + "top_p", STREAMD_FIELD(sessions.default_sampling.top_p),
                       {0.0f, 1.0f, true, false}));
  k.push_back(FloatKey(s + "min_p", STREAMD_FIELD(sessions.default_sampling.min_p), {0.0f, 1.0f}));
  k.push_back(FloatKey(s + "repetition_penalty",
                       STREAMD_FIELD(sessions.default_sampling.repetition_penalty),
                       {0.0f, 10.0f, true, false}));
  k.push_back(FloatKey(s + "presence_penalty",
                       STREAMD_FIELD(sessions.default_sampling.presence_penalty), {-2.0f, 2.0f}));
  k.push_back(FloatKey(s + "frequency_penalty",
                       STREAMD_FIELD(sessions.default_sampling.frequency_penalty), {-2.0f, 2.0f}));
  k.push_back(IntKey(s + "penalty_last_n", STREAMD_FIELD(sessions.default_sampling.penalty_last_n),
                     0, 1 << 20));
  k.push_back(IntKey("sessions.default_max_tokens", STREAMD_FIELD(sessions.default_max_tokens),
                     -kIntMax, kIntMax));  // checked against max_tokens afterwards
  k.push_back(IntKey("sessions.max_tokens", STREAMD_FIELD(sessions.max_tokens), 1, 1 << 24));
  // logging
  k.push_back(EnumKey("logging.level", STREAMD_FIELD(logging.level), ParseLogLevel, LogLevelName));
  k.push_back(
      EnumKey("logging.format", STREAMD_FIELD(logging.format), ParseLogFormat, LogFormatName));
  return k;
}

#undef STREAMD_FIELD

const std::set<std::string, std::less<>>& Sections() {
  static const auto* sections = [] {
    auto* s = new std::set<std::string, std::less<>>();
    for (const ConfigKey& key : ConfigKeys()) {
      for (size_t dot = key.path.find('.'); dot != std::string::npos;
           dot = key.path.find('.', dot + 1)) {
        s->insert(key.path.substr(0, dot));
      }
    }
    return s;
  }();
  return *sections;
}

std::string_view LastComponent(std::string_view path) {
  const size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

}  // namespace

const std::vector<ConfigKey>& ConfigKeys() {
  static const auto* keys = new std::vector<ConfigKey>(MakeKeys());
  return *keys;
}

const ConfigKey* FindConfigKey(std::string_view path) {
  for (const ConfigKey& key : ConfigKeys()) {
    if (key.path == path) return &key;
  }
  return nullptr;
}

bool IsConfigSection(std::string_view path) { return Sections().contains(path); }

std::string SuggestConfigKey(std::string_view path) {
  std::vector<std::string_view> names;
  for (const ConfigKey& key : ConfigKeys()) names.push_back(key.path);
  for (const std::string& section : Sections()) names.push_back(section);
  std::string_view best;
  size_t best_distance = SIZE_MAX;
  for (std::string_view name : names) {
    const size_t d = EditDistance(path, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  if (best_distance <= 3 && best_distance * 4 <= path.size()) return std::string(best);
  // A known key put in the wrong section: "server.threads" -> "engine.threads".
  for (const ConfigKey& key : ConfigKeys()) {
    if (LastComponent(key.path) == LastComponent(path)) return key.path;
  }
  return "";
}

}  // namespace config
}  // namespace streamd
