#include "server/config/server_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "server/config/config_values.h"

namespace streamd {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A YAML file under the test's temp dir, removed at the end of the test.
class TempYaml {
 public:
  explicit TempYaml(const std::string& text) {
    static int counter = 0;
    path_ = ::testing::TempDir() + "streamd_config_test_" + std::to_string(getpid()) + "_" +
            std::to_string(counter++) + ".yaml";
    std::ofstream(path_) << text;
  }
  ~TempYaml() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string LoadError(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  TempYaml file(yaml);
  auto config = LoadServerConfig(file.path(), overrides);
  EXPECT_FALSE(config.ok());
  return config.ok() ? "" : config.status().message();
}

std::string OverrideError(const std::vector<std::string>& overrides) {
  auto config = LoadServerConfig("", overrides);
  EXPECT_FALSE(config.ok());
  if (!config.ok()) {
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  }
  return config.ok() ? "" : config.status().message();
}

TEST(ServerConfigTest, DefaultsAreTheDocumentedOnes) {
  const ServerConfig c = DefaultServerConfig();
  EXPECT_EQ(c.server.listen_address, "127.0.0.1:50051");
  EXPECT_EQ(c.server.metrics_address, "127.0.0.1:9464");
  EXPECT_EQ(c.server.shutdown_grace, milliseconds(30'000));
  EXPECT_EQ(c.sessions.default_mode, "sink");
  EXPECT_EQ(c.sessions.max_tokens, 4096);
  EXPECT_EQ(c.engine.backend, Backend::kAuto);
  EXPECT_EQ(c.engine.threads, 0);
  EXPECT_EQ(c.engine.max_batch_tokens, 512);
  EXPECT_EQ(c.engine.max_batch_sessions, 256);
  EXPECT_EQ(c.sessions.default_sinks, 4);
  EXPECT_EQ(c.sessions.default_window, 1020);
  EXPECT_EQ(c.sessions.max_sinks, 64);
  EXPECT_EQ(c.sessions.max_window, 8188);
  EXPECT_EQ(c.sessions.idle_timeout, milliseconds(7LL * 24 * 3600 * 1000));
  EXPECT_EQ(c.sessions.snapshot_interval, milliseconds(2000));
  EXPECT_EQ(c.sessions.offload_after, milliseconds(600'000));
  EXPECT_TRUE(c.sessions.restore_on_start);
  EXPECT_EQ(c.sessions.max_snapshot_bytes, int64_t{1} << 30);
  EXPECT_EQ(c.sessions.max_transfers, 4);
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    EXPECT_EQ(c.sessions.snapshot_dir, std::string(home) + "/.local/state/streamd/sessions");
  }
  EXPECT_EQ(c.logging.level, LogLevel::kInfo);
  EXPECT_EQ(c.logging.format, LogFormat::kText);
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    EXPECT_EQ(c.model.path,
              std::string(home) + "/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  }
  EXPECT_TRUE(ValidateServerConfig(c).ok());
  auto loaded = LoadServerConfig("", {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, c);
}

TEST(ServerConfigTest, ShippedFileEqualsTheBuiltInDefaults) {
  auto loaded = LoadServerConfig(STREAMD_DEFAULT_CONFIG, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*loaded, DefaultServerConfig())
      << "config/streamd.yaml and server_config.h disagree; effective file config:\n"
      << EffectiveConfigYaml(*loaded);
}

TEST(ServerConfigTest, ShippedFileHasEveryKeyWithACommentAboveIt) {
  const YAML::Node root = YAML::LoadFile(STREAMD_DEFAULT_CONFIG);
  for (const std::string& path : ServerConfigKeys()) {
    YAML::Node node = YAML::Clone(root);
    std::stringstream parts(path);
    for (std::string part; std::getline(parts, part, '.');) {
      ASSERT_TRUE(node.IsMap()) << path;
      node = node[part];
    }
    EXPECT_TRUE(node.IsDefined() && node.IsScalar()) << path << " is missing from the file";
  }
  // Every line holding a key or a section has a comment line right above it.
  std::ifstream in(STREAMD_DEFAULT_CONFIG);
  std::string line, previous;
  int number = 0;
  for (; std::getline(in, line); ++number) {
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos) {
      previous.clear();
      continue;
    }
    if (line[first] != '#') {
      EXPECT_EQ(previous.find_first_not_of(' ') != std::string::npos &&
                    previous[previous.find_first_not_of(' ')] == '#',
                true)
          << "line " << number + 1 << " (" << line << ") has no comment above it";
    }
    previous = line;
  }
}

// Aggregate field counting: the most AnyField initializers T{...} accepts.
struct AnyField {
  template <typename T>
  operator T() const;  // NOLINT: only used in unevaluated contexts
};
template <typename T, typename... A>
constexpr size_t FieldCount() {
  if constexpr (requires { T{A{}..., AnyField{}}; }) {
    return FieldCount<T, A..., AnyField>();
  } else {
    return sizeof...(A);
  }
}

TEST(ServerConfigTest, EveryFieldHasAKey) {
  // A field added to ServerConfig without a key (and a line in config/streamd.yaml) fails here.
  static_assert(FieldCount<ServerConfig>() == 6);
  // A nested struct is one field of its parent and its own fields are the keys.
  constexpr size_t kLeaves =
      FieldCount<ServerConfig::Server>() - 2 + FieldCount<ServerConfig::Server::Tls>() +
      FieldCount<ServerConfig::Server::MetricsTls>() + FieldCount<ServerConfig::Auth>() +
      FieldCount<ServerConfig::Model>() + FieldCount<ServerConfig::Engine>() +
      FieldCount<ServerConfig::Sessions>() - 1 + FieldCount<SamplingDefaults>() +
      FieldCount<ServerConfig::Logging>();
  EXPECT_EQ(ServerConfigKeys().size(), kLeaves);
}

TEST(ServerConfigTest, FileThenOverridesInOrder) {
  TempYaml file(
      "engine:\n"
      "  threads: 2\n"
      "  kv_pool: 512MiB\n"
      "sessions:\n"
      "  idle_timeout: 5m\n"
      "  default_sampling:\n"
      "    temperature: 0\n");
  auto c = LoadServerConfig(file.path(),
                            {"--engine.threads=4", "--logging.format=json", "--logging.format=text",
                             "--model.path=~/m.gguf", "--server.max_receive_message_bytes=16MiB"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->engine.threads, 4);                                 // override beats file
  EXPECT_EQ(c->engine.kv_pool, (KvPoolBudget{512LL << 20, 0.0}));  // file beats default
  EXPECT_EQ(c->sessions.idle_timeout, milliseconds(300'000));
  EXPECT_EQ(c->sessions.default_sampling.temperature, 0.0f);
  EXPECT_EQ(c->sessions.default_sampling.top_k, 40);  // default kept
  EXPECT_EQ(c->engine.block_size, 16);
  EXPECT_EQ(c->logging.format, LogFormat::kText);  // the later override wins
  EXPECT_EQ(c->model.path, config::ExpandHome("~/m.gguf"));
  EXPECT_EQ(c->server.max_receive_message_bytes, 16LL << 20);
}

TEST(ServerConfigTest, EmptyFileAndEmptySectionsKeepDefaults) {
  TempYaml empty("# nothing set\n");
  EXPECT_EQ(*LoadServerConfig(empty.path(), {}), DefaultServerConfig());
  TempYaml sections("server:\nengine:\n");
  EXPECT_EQ(*LoadServerConfig(sections.path(), {}), DefaultServerConfig());
}

TEST(ServerConfigTest, UnknownKeysAreNamedWithASuggestion) {
  TempYaml file("engine:\n  thread: 4\n");
  auto c = LoadServerConfig(file.path(), {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "config: unknown key engine.thread (did you mean "
            "engine.threads?) (at " +
                file.path() + ":2:3)");
  EXPECT_EQ(OverrideError({"--engine.thread=4"}),
            "config: unknown key engine.thread (did you mean engine.threads?) (from the command "
            "line)");
  EXPECT_THAT(LoadError("servr:\n  listen_address: 127.0.0.1:1\n"),
              StartsWith("config: unknown key servr (did you mean server?)"));
  EXPECT_THAT(OverrideError({"--server.threads=4"}),
              StartsWith("config: unknown key server.threads (did you mean engine.threads?)"));
  EXPECT_EQ(OverrideError({"--foo.bar=1"}), "config: unknown key foo.bar (from the command line)");
}

TEST(ServerConfigTest, BadValuesNameTheKeyAndTheLimit) {
  EXPECT_EQ(OverrideError({"--sessions.default_window=0"}),
            "config: sessions.default_window = 0 is outside [1, 8188], the limit set by "
            "sessions.max_window (from the command line)");
  TempYaml file("engine:\n  threads: -1\n");
  EXPECT_EQ(LoadServerConfig(file.path(), {}).status().message(),
            "config: engine.threads = -1 is outside [0, 1024] (at " + file.path() + ":2:12)");
  EXPECT_EQ(OverrideError({"--engine.backend=gpu"}),
            "config: engine.backend = gpu is not one of auto, cpu, cuda (from the command line)");
  EXPECT_THAT(OverrideError({"--sessions.idle_timeout=10"}),
              StartsWith("config: sessions.idle_timeout = 10 needs a unit (ms, s, m, h, d)"));
  EXPECT_THAT(OverrideError({"--sessions.idle_timeout=366d"}),
              StartsWith("config: sessions.idle_timeout = 366d is outside [0s, 365d]"));
  EXPECT_THAT(OverrideError({"--sessions.restore_on_start=yes"}),
              StartsWith("config: sessions.restore_on_start = yes is not true or false"));
  EXPECT_THAT(OverrideError({"--sessions.snapshot_interval=2h"}),
              StartsWith("config: sessions.snapshot_interval = 2h is outside [0s, 1h]"));
  EXPECT_THAT(OverrideError({"--sessions.max_snapshot_bytes=1KiB"}),
              StartsWith("config: sessions.max_snapshot_bytes = 1KiB is outside [1MiB, 64GiB]"));
  EXPECT_THAT(OverrideError({"--sessions.max_transfers=0"}),
              StartsWith("config: sessions.max_transfers = 0 is outside [1, 1024]"));
  EXPECT_THAT(OverrideError({"--server.max_send_message_bytes=2GiB"}),
              StartsWith("config: server.max_send_message_bytes = 2GiB is outside [1KiB, 1GiB]"));
  EXPECT_THAT(OverrideError({"--sessions.default_sampling.top_p=0"}),
              StartsWith("config: sessions.default_sampling.top_p = 0 is outside (0, 1]"));
  EXPECT_THAT(
      OverrideError({"--sessions.default_sampling.temperature=nan"}),
      StartsWith("config: sessions.default_sampling.temperature = nan is not a finite number"));
  EXPECT_THAT(OverrideError({"--engine.threads=four"}),
              StartsWith("config: engine.threads = four is not an integer"));
  EXPECT_THAT(OverrideError({"--model.path="}), StartsWith("config: model.path = \"\" must not"));
  EXPECT_THAT(OverrideError({"--server.listen_address=localhost"}),
              StartsWith("config: server.listen_address = localhost is not host:port"));
  EXPECT_THAT(OverrideError({"--sessions.default_mode=full"}),
              StartsWith("config: sessions.default_mode = full is not one of sink, window, dense"));
  EXPECT_THAT(OverrideError({"--model.k_quant_activation_bits=16"}),
              StartsWith("config: model.k_quant_activation_bits = 16 is not one of 8, 12"));
  EXPECT_THAT(OverrideError({"--model.k_quant_activation_bits=eight"}),
              StartsWith("config: model.k_quant_activation_bits = eight is not an integer"));
  EXPECT_THAT(OverrideError({"--logging.level=verbose"}),
              StartsWith("config: logging.level = verbose is not one of trace, debug, info, "
                         "warn, error"));
}

TEST(ServerConfigTest, CrossFieldChecks) {
  EXPECT_THAT(OverrideError({"--sessions.max_sinks=2"}),
              StartsWith("config: sessions.default_sinks = 4 is outside [0, 2], the limit set by "
                         "sessions.max_sinks"));
  EXPECT_THAT(OverrideError({"--sessions.max_window=512"}),
              StartsWith("config: sessions.default_window = 1020 is outside [1, 512]"));
  EXPECT_THAT(OverrideError({"--sessions.default_max_tokens=5000"}),
              StartsWith("config: sessions.default_max_tokens = 5000 is outside [1, 4096], the "
                         "limit set by sessions.max_tokens"));
  EXPECT_THAT(OverrideError({"--sessions.max_pending_tokens=1000"}),
              StartsWith("config: sessions.max_append_tokens = 65536 is above "
                         "sessions.max_pending_tokens = 1000"));
  EXPECT_THAT(OverrideError({"--server.max_receive_message_bytes=512KiB"}),
              StartsWith("config: sessions.max_append_bytes = 1MiB is above "
                         "server.max_receive_message_bytes = 512KiB"));
  EXPECT_THAT(OverrideError({"--engine.max_chunk=1024"}),
              StartsWith("config: engine.max_chunk = 1024 is above engine.max_batch_tokens = 512"));
  EXPECT_THAT(
      OverrideError({"--engine.shared_step_tokens=513"}),
      StartsWith("config: engine.shared_step_tokens = 513 is above engine.max_batch_tokens = 512"));
  EXPECT_THAT(OverrideError({"--engine.max_batch_sessions=600"}),
              StartsWith("config: engine.max_batch_sessions = 600 is above "
                         "engine.max_batch_tokens = 512"));
  EXPECT_THAT(OverrideError({"--server.metrics_address=127.0.0.1:50051"}),
              StartsWith("config: server.metrics_address = 127.0.0.1:50051 uses the same port as "
                         "server.listen_address = 127.0.0.1:50051"));
  EXPECT_THAT(OverrideError({"--server.metrics_address=0.0.0.0:50051"}),
              HasSubstr("uses the same port"));
  // The HTTP API: off when empty, an address otherwise, and a port of its own.
  EXPECT_TRUE(LoadServerConfig("", {"--server.http_address="}).ok());
  EXPECT_TRUE(LoadServerConfig("", {"--server.http_address=127.0.0.1:8080"}).ok());
  EXPECT_THAT(OverrideError({"--server.http_address=localhost"}),
              StartsWith("config: server.http_address = localhost is not host:port"));
  EXPECT_THAT(OverrideError({"--server.http_address=unix:/tmp/s"}),
              HasSubstr("unix: sockets not allowed"));
  EXPECT_THAT(OverrideError({"--server.http_address=127.0.0.1:9464"}),
              StartsWith("config: server.http_address = 127.0.0.1:9464 uses the same port as "
                         "server.metrics_address = 127.0.0.1:9464"));
  EXPECT_THAT(OverrideError({"--server.http_address=0.0.0.0:50051"}),
              HasSubstr("uses the same port as server.listen_address"));
  // Port 0 picks a free port for each, so two port-0 addresses do not clash.
  EXPECT_TRUE(LoadServerConfig("", {"--server.listen_address=127.0.0.1:0",
                                    "--server.metrics_address=127.0.0.1:0"})
                  .ok());
  // Raising the limit in the same load makes the value valid.
  EXPECT_TRUE(
      LoadServerConfig("", {"--sessions.max_window=2040", "--sessions.default_window=2040"}).ok());
}

TEST(ServerConfigTest, TlsKeys) {
  const ServerConfig d = DefaultServerConfig();
  EXPECT_TRUE(d.server.tls.cert_file.empty() && d.server.tls.key_file.empty() &&
              d.server.tls.client_ca_file.empty());
  EXPECT_EQ(d.server.tls.reload_interval, milliseconds(60'000));
  EXPECT_FALSE(d.auth.allow_insecure);
  auto c = LoadServerConfig(
      "", {"--server.tls.cert_file=/etc/s/cert.pem", "--server.tls.key_file=~/key.pem",
           "--server.tls.client_ca_file=/etc/s/ca.pem", "--server.tls.reload_interval=2s",
           "--auth.allow_insecure=true"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server.tls.cert_file, "/etc/s/cert.pem");
  EXPECT_EQ(c->server.tls.key_file, config::ExpandHome("~/key.pem"));
  EXPECT_EQ(c->server.tls.client_ca_file, "/etc/s/ca.pem");
  EXPECT_EQ(c->server.tls.reload_interval, milliseconds(2000));
  EXPECT_TRUE(c->auth.allow_insecure);
  // Both or neither of the certificate and the key; a client CA only with them.
  EXPECT_EQ(OverrideError({"--server.tls.cert_file=/c.pem"}),
            "config: server.tls.cert_file is set but server.tls.key_file is not: TLS needs both "
            "the certificate and its private key (from the command line)");
  EXPECT_THAT(OverrideError({"--server.tls.key_file=/k.pem"}),
              StartsWith("config: server.tls.key_file is set but server.tls.cert_file is not"));
  EXPECT_THAT(OverrideError({"--server.tls.client_ca_file=/ca.pem"}),
              StartsWith("config: server.tls.client_ca_file is set but server.tls.cert_file and "
                         "server.tls.key_file are not"));
  // gRPC's watcher counts seconds: a fraction of one would be silently rounded.
  EXPECT_THAT(OverrideError({"--server.tls.reload_interval=1500ms"}),
              StartsWith("config: server.tls.reload_interval = 1500ms is not a whole number of "
                         "seconds"));
  EXPECT_THAT(OverrideError({"--server.tls.reload_interval=0"}),
              StartsWith("config: server.tls.reload_interval = 0 is outside [1s, 1d]"));
  EXPECT_THAT(OverrideError({"--auth.allow_insecure=yes"}),
              StartsWith("config: auth.allow_insecure = yes is not true or false"));
}

TEST(ServerConfigTest, HealthAndReflectionKeys) {
  // Open by default, as before the keys existed: probes and load balancers hold no key.
  const ServerConfig d = DefaultServerConfig();
  EXPECT_FALSE(d.auth.health_requires_key);
  EXPECT_FALSE(d.auth.reflection_requires_key);
  auto c =
      LoadServerConfig("", {"--auth.keys_file=/etc/s/keys.yaml", "--auth.health_requires_key=true",
                            "--auth.reflection_requires_key=true"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->auth.health_requires_key);
  EXPECT_TRUE(c->auth.reflection_requires_key);
  // Each may be closed alone.
  c = LoadServerConfig("", {"--auth.keys_file=/k.yaml", "--auth.reflection_requires_key=true"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->auth.health_requires_key);
  EXPECT_TRUE(c->auth.reflection_requires_key);
  // Without keys there is no key to require: an error naming the key, not a silent no-op.
  EXPECT_EQ(OverrideError({"--auth.health_requires_key=true"}),
            "config: auth.health_requires_key = true needs auth.keys_file: without API keys "
            "there is no key to require (from the command line)");
  EXPECT_THAT(OverrideError({"--auth.reflection_requires_key=true"}),
              StartsWith("config: auth.reflection_requires_key = true needs auth.keys_file"));
  EXPECT_THAT(OverrideError({"--auth.keys_file=/k.yaml", "--auth.health_requires_key=1"}),
              StartsWith("config: auth.health_requires_key = 1 is not true or false"));
  ServerConfig built = DefaultServerConfig();
  built.auth.reflection_requires_key = true;
  EXPECT_THAT(ValidateServerConfig(built).message(),
              StartsWith("config: auth.reflection_requires_key = true needs auth.keys_file"));
}

TEST(ServerConfigTest, ValidateChecksConfigsBuiltInCode) {
  ServerConfig c = DefaultServerConfig();
  c.engine.threads = -5;
  EXPECT_EQ(ValidateServerConfig(c).message(), "config: engine.threads = -5 is outside [0, 1024]");
  c = DefaultServerConfig();
  c.engine.kv_pool = {1LL << 30, 0.5};
  EXPECT_EQ(ValidateServerConfig(c).message(),
            "config: engine.kv_pool must set exactly one of bytes and fraction");
  c = DefaultServerConfig();
  c.sessions.default_sinks = 65;
  EXPECT_THAT(ValidateServerConfig(c).message(), StartsWith("config: sessions.default_sinks = 65"));
}

TEST(ServerConfigTest, OverrideSyntaxErrors) {
  EXPECT_EQ(OverrideError({"engine.threads=4"}),
            "config: override engine.threads=4 is not of the form --section.key=value");
  EXPECT_EQ(OverrideError({"--threads=4"}),
            "config: override --threads=4 is not of the form --section.key=value");
  EXPECT_EQ(OverrideError({"--engine.threads"}),
            "config: --engine.threads needs a value: --engine.threads=VALUE");
  EXPECT_THAT(OverrideError({"--sessions.default_sampling=1"}),
              StartsWith("config: --sessions.default_sampling names a section"));
  EXPECT_TRUE(LooksLikeConfigOverride("--engine.threads=4"));
  EXPECT_TRUE(LooksLikeConfigOverride("--engine.threads"));
  EXPECT_FALSE(LooksLikeConfigOverride("--config=streamd.yaml"));
  EXPECT_FALSE(LooksLikeConfigOverride("--help"));
  EXPECT_FALSE(LooksLikeConfigOverride("engine.threads=4"));
  EXPECT_FALSE(LooksLikeConfigOverride("--.x=1"));
}

TEST(ServerConfigTest, FileStructureErrors) {
  EXPECT_THAT(LoadError("engine: 4\n"), StartsWith("config: engine is a section and must be a "
                                                   "mapping (at "));
  EXPECT_THAT(LoadError("engine:\n  threads:\n"),
              StartsWith("config: engine.threads has no value"));
  EXPECT_THAT(LoadError("engine:\n  threads: [1, 2]\n"),
              StartsWith("config: engine.threads must be a single value, not a list"));
  EXPECT_THAT(LoadError("engine:\n  threads: {a: 1}\n"),
              StartsWith("config: engine.threads must be a single value, not a mapping"));
  EXPECT_THAT(LoadError("engine:\n  threads: 1\n  threads: 2\n"),
              StartsWith("config: engine.threads appears twice (at "));
  EXPECT_THAT(LoadError("- a\n- b\n"), StartsWith("config: the top level must be a mapping"));
  auto missing = LoadServerConfig("/nonexistent/streamd.yaml", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "config: cannot read /nonexistent/streamd.yaml");
}

TEST(ServerConfigTest, MalformedYamlReportsLineAndColumn) {
  TempYaml file(
      "server:\n"
      "  listen_address: 127.0.0.1:50051\n"
      "engine:\n"
      "  threads: [1, 2\n"
      "  block_size: 16\n");
  auto c = LoadServerConfig(file.path(), {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), StartsWith("config: " + file.path() + ":5:"));
  EXPECT_THAT(c.status().message(), HasSubstr("malformed YAML"));
}

TEST(ServerConfigTest, EffectiveYamlRoundTrips) {
  auto c = LoadServerConfig(
      "", {"--engine.kv_pool=0.3", "--engine.backend=cpu", "--sessions.idle_timeout=1m30s",
           "--logging.level=trace", "--sessions.default_sampling.top_p=0.9",
           "--server.listen_address=[::1]:0", "--model.path=/m/x y.gguf"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string yaml = EffectiveConfigYaml(*c);
  for (const char* key : {"listen_address", "kv_pool: 0.3", "idle_timeout: 90s", "top_p: 0.9",
                          "level: trace", "default_sampling:"}) {
    EXPECT_THAT(yaml, HasSubstr(key)) << yaml;
  }
  TempYaml file(yaml);
  auto back = LoadServerConfig(file.path(), {});
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << yaml;
  EXPECT_EQ(*back, *c) << yaml;
  TempYaml defaults(EffectiveConfigYaml(DefaultServerConfig()));
  EXPECT_EQ(*LoadServerConfig(defaults.path(), {}), DefaultServerConfig());
}

}  // namespace
}  // namespace streamd
