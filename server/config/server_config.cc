#include "server/config/server_config.h"

#include <yaml-cpp/yaml.h>

#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "server/config/config_keys.h"
#include "server/config/config_values.h"

namespace streamd {
namespace {

using config::ConfigKey;

// Where each key's value came from, appended to error messages:
// " (at streamd.yaml:12:3)" or " (from the command line)".
using Origins = std::map<std::string, std::string, std::less<>>;

// A failed check: the key it is about (to look up its origin) and the message after "config: ".
struct KeyError {
  std::string key;
  std::string text;
};

// The value as written, quoted when it is empty or has white space in it.
std::string Shown(std::string_view value) {
  const bool plain = !value.empty() && value.find_first_of(" \t\r\n") == std::string_view::npos;
  return plain ? std::string(value) : "\"" + std::string(value) + "\"";
}

Status ValueError(const std::string& path, std::string_view value, const Status& reason,
                  const std::string& origin) {
  return InvalidArgumentError("config: " + path + " = " + Shown(value) + " " + reason.message() +
                              origin);
}

Status UnknownKeyError(std::string_view path, const std::string& origin) {
  std::string message = "config: unknown key " + std::string(path);
  if (const std::string guess = config::SuggestConfigKey(path); !guess.empty()) {
    message += " (did you mean " + guess + "?)";
  }
  return InvalidArgumentError(message + origin);
}

std::string At(const std::string& file, const YAML::Mark& mark) {
  return " (at " + file + ":" + std::to_string(mark.line + 1) + ":" +
         std::to_string(mark.column + 1) + ")";
}

// Applies one YAML mapping whose keys sit under `prefix` ("" for the top level).
Status ApplyMapping(const YAML::Node& node, const std::string& prefix, const std::string& file,
                    ServerConfig& config, Origins& origins) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    // By value: a yaml-cpp map iterator yields a temporary pair, so references to its members
    // would dangle past this statement (ASan: stack-use-after-scope).
    const YAML::Node name = it->first;
    const YAML::Node value = it->second;
    const std::string at = At(file, name.Mark());
    if (!name.IsScalar()) {
      return InvalidArgumentError("config: a key under " +
                                  (prefix.empty() ? std::string("the top level") : prefix) +
                                  " is not a plain name" + at);
    }
    const std::string path = prefix.empty() ? name.Scalar() : prefix + "." + name.Scalar();
    if (!origins.emplace(path, at).second) {
      return InvalidArgumentError("config: " + path + " appears twice" + at);
    }
    if (config::IsConfigSection(path)) {
      if (value.IsNull()) continue;  // an empty section: its keys keep their defaults
      if (!value.IsMap()) {
        return InvalidArgumentError("config: " + path + " is a section and must be a mapping" + at);
      }
      STREAMD_RETURN_IF_ERROR(ApplyMapping(value, path, file, config, origins));
      continue;
    }
    const ConfigKey* key = config::FindConfigKey(path);
    if (key == nullptr) return UnknownKeyError(path, at);
    if (value.IsNull()) return InvalidArgumentError("config: " + path + " has no value" + at);
    if (!value.IsScalar()) {
      return InvalidArgumentError("config: " + path + " must be a single value, not a " +
                                  (value.IsMap() ? "mapping" : "list") + at);
    }
    const Status status = key->parse(value.Scalar(), config);
    if (!status.ok()) return ValueError(path, value.Scalar(), status, At(file, value.Mark()));
    origins[path] = At(file, value.Mark());
  }
  return OkStatus();
}

Status ApplyFile(const std::string& file, ServerConfig& config, Origins& origins) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return NotFoundError("config: cannot read " + file);
  std::stringstream text;
  text << in.rdbuf();
  try {
    const YAML::Node root = YAML::Load(text.str());
    if (root.IsNull()) return OkStatus();  // an empty file: every key keeps its default
    if (!root.IsMap()) {
      return InvalidArgumentError(
          "config: the top level must be a mapping of sections (server, auth, model, "
          "engine, sessions, logging)" +
          At(file, root.Mark()));
    }
    return ApplyMapping(root, "", file, config, origins);
  } catch (const YAML::ParserException& e) {
    return InvalidArgumentError("config: " + file + ":" + std::to_string(e.mark.line + 1) + ":" +
                                std::to_string(e.mark.column + 1) + ": malformed YAML: " + e.msg);
  } catch (const std::exception& e) {
    return InvalidArgumentError("config: " + file + ": " + e.what());
  }
}

Status ApplyOverride(const std::string& arg, ServerConfig& config, Origins& origins) {
  const std::string at = " (from the command line)";
  if (!LooksLikeConfigOverride(arg)) {
    return InvalidArgumentError("config: override " + Shown(arg) +
                                " is not of the form --section.key=value");
  }
  const size_t eq = arg.find('=');
  const std::string path = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
  if (config::IsConfigSection(path)) {
    return InvalidArgumentError("config: --" + path +
                                " names a section; override one of its keys"
                                " (--" +
                                path + ".<key>=value)");
  }
  const ConfigKey* key = config::FindConfigKey(path);
  if (key == nullptr) return UnknownKeyError(path, at);
  if (eq == std::string::npos) {
    return InvalidArgumentError("config: --" + path + " needs a value: --" + path + "=VALUE");
  }
  const std::string value = arg.substr(eq + 1);
  const Status status = key->parse(value, config);
  if (!status.ok()) return ValueError(path, value, status, at);
  origins[path] = at;
  return OkStatus();
}

bool SameListener(std::string_view a, std::string_view b) {
  const int32_t port = config::AddressPort(a);
  if (port <= 0 || port != config::AddressPort(b)) return false;  // port 0: any free port
  auto wildcard = [](std::string_view host) {
    return host == "0.0.0.0" || host == "::" || host == "*";
  };
  const std::string_view ha = config::AddressHost(a), hb = config::AddressHost(b);
  return ha == hb || wildcard(ha) || wildcard(hb);
}

std::optional<KeyError> CheckKeysAndCombinations(const ServerConfig& c) {
  // Each key's own limits: render it and parse it back into a scratch copy.
  ServerConfig scratch = c;
  for (const ConfigKey& key : config::ConfigKeys()) {
    const std::string value = key.render(c);
    if (const Status s = key.parse(value, scratch); !s.ok()) {
      return KeyError{key.path, key.path + " = " + Shown(value) + " " + s.message()};
    }
  }
  const auto n = [](int64_t v) { return std::to_string(v); };
  const ServerConfig::Sessions& s = c.sessions;
  if (s.default_sinks < 0 || s.default_sinks > s.max_sinks) {
    return KeyError{"sessions.default_sinks", "sessions.default_sinks = " + n(s.default_sinks) +
                                                  " is outside [0, " + n(s.max_sinks) +
                                                  "], the limit set by sessions.max_sinks"};
  }
  if (s.default_window < 1 || s.default_window > s.max_window) {
    return KeyError{"sessions.default_window", "sessions.default_window = " + n(s.default_window) +
                                                   " is outside [1, " + n(s.max_window) +
                                                   "], the limit set by sessions.max_window"};
  }
  if (s.default_max_tokens < 1 || s.default_max_tokens > s.max_tokens) {
    return KeyError{"sessions.default_max_tokens",
                    "sessions.default_max_tokens = " + n(s.default_max_tokens) +
                        " is outside [1, " + n(s.max_tokens) +
                        "], the limit set by sessions.max_tokens"};
  }
  if (s.max_append_tokens > s.max_pending_tokens) {
    return KeyError{"sessions.max_append_tokens",
                    "sessions.max_append_tokens = " + n(s.max_append_tokens) +
                        " is above sessions.max_pending_tokens = " + n(s.max_pending_tokens) +
                        " (such an append could never be accepted)"};
  }
  if (s.max_append_bytes > c.server.max_receive_message_bytes) {
    return KeyError{"sessions.max_append_bytes",
                    "sessions.max_append_bytes = " + config::FormatByteSize(s.max_append_bytes) +
                        " is above server.max_receive_message_bytes = " +
                        config::FormatByteSize(c.server.max_receive_message_bytes) +
                        " (such an append could never arrive)"};
  }
  const ServerConfig::Engine& e = c.engine;
  if (e.max_batch_sessions > e.max_batch_tokens) {
    return KeyError{"engine.max_batch_sessions",
                    "engine.max_batch_sessions = " + n(e.max_batch_sessions) +
                        " is above engine.max_batch_tokens = " + n(e.max_batch_tokens) +
                        " (a session in a step takes at least one token)"};
  }
  if (e.max_chunk > e.max_batch_tokens) {
    return KeyError{"engine.max_chunk",
                    "engine.max_chunk = " + n(e.max_chunk) +
                        " is above engine.max_batch_tokens = " + n(e.max_batch_tokens) +
                        " (a chunk must fit in one step)"};
  }
  if (e.shared_step_tokens > e.max_batch_tokens) {
    return KeyError{"engine.shared_step_tokens",
                    "engine.shared_step_tokens = " + n(e.shared_step_tokens) +
                        " is above engine.max_batch_tokens = " + n(e.max_batch_tokens) +
                        " (it can only make steps smaller)"};
  }
  if ((e.kv_pool.bytes > 0) == (e.kv_pool.fraction > 0.0)) {
    return KeyError{"engine.kv_pool", "engine.kv_pool must set exactly one of bytes and fraction"};
  }
  // The gRPC port's TLS and the metrics endpoint's follow the same rules.
  const auto check_tls = [](const std::string& prefix, const std::string& cert,
                            const std::string& key,
                            const std::string& client_ca) -> std::optional<KeyError> {
    if (cert.empty() != key.empty()) {
      const std::string set = prefix + (cert.empty() ? ".key_file" : ".cert_file");
      const std::string unset = prefix + (cert.empty() ? ".cert_file" : ".key_file");
      return KeyError{set, set + " is set but " + unset +
                               " is not: TLS needs both the certificate and its private key"};
    }
    if (!client_ca.empty() && cert.empty()) {
      return KeyError{prefix + ".client_ca_file",
                      prefix + ".client_ca_file is set but " + prefix + ".cert_file and " + prefix +
                          ".key_file are not: mTLS is TLS with client certificates"};
    }
    return std::nullopt;
  };
  const ServerConfig::Server::Tls& tls = c.server.tls;
  if (auto bad = check_tls("server.tls", tls.cert_file, tls.key_file, tls.client_ca_file)) {
    return bad;
  }
  const ServerConfig::Server::MetricsTls& mt = c.server.metrics_tls;
  if (auto bad = check_tls("server.metrics_tls", mt.cert_file, mt.key_file, mt.client_ca_file)) {
    return bad;
  }
  // A key can only be required where there are keys; without a keys file every caller is the
  // anonymous admin and the setting would silently change nothing.
  for (const auto& [key, set] :
       {std::pair{"auth.health_requires_key", c.auth.health_requires_key},
        {"auth.reflection_requires_key", c.auth.reflection_requires_key}}) {
    if (set && c.auth.keys_file.empty()) {
      return KeyError{key, std::string(key) +
                               " = true needs auth.keys_file: without API keys there is no key "
                               "to require"};
    }
  }
  if (!c.server.http_address.empty()) {
    for (const auto& [key, other] : {std::pair{"server.listen_address", &c.server.listen_address},
                                     {"server.metrics_address", &c.server.metrics_address}}) {
      if (SameListener(c.server.http_address, *other)) {
        return KeyError{"server.http_address", "server.http_address = " + c.server.http_address +
                                                   " uses the same port as " + key + " = " +
                                                   *other};
      }
    }
  }
  if (SameListener(c.server.listen_address, c.server.metrics_address)) {
    return KeyError{
        "server.metrics_address",
        "server.metrics_address = " + c.server.metrics_address +
            " uses the same port as server.listen_address = " + c.server.listen_address};
  }
  return std::nullopt;
}

}  // namespace

ServerConfig DefaultServerConfig() {
  ServerConfig config;
  config.model.path = config::ExpandHome(config.model.path);
  config.sessions.snapshot_dir = config::ExpandHome(config.sessions.snapshot_dir);
  return config;
}

StatusOr<ServerConfig> LoadServerConfig(const std::string& yaml_path,
                                        const std::vector<std::string>& overrides) {
  ServerConfig config;
  Origins origins;
  if (!yaml_path.empty()) STREAMD_RETURN_IF_ERROR(ApplyFile(yaml_path, config, origins));
  for (const std::string& arg : overrides) {
    STREAMD_RETURN_IF_ERROR(ApplyOverride(arg, config, origins));
  }
  config.model.path = config::ExpandHome(config.model.path);
  config.sessions.snapshot_dir = config::ExpandHome(config.sessions.snapshot_dir);
  for (std::string* path :
       {&config.server.tls.cert_file, &config.server.tls.key_file,
        &config.server.tls.client_ca_file, &config.server.metrics_tls.cert_file,
        &config.server.metrics_tls.key_file, &config.server.metrics_tls.client_ca_file,
        &config.auth.keys_file, &config.model.plan}) {
    *path = config::ExpandHome(*path);
  }
  if (const std::optional<KeyError> error = CheckKeysAndCombinations(config)) {
    const auto origin = origins.find(error->key);
    return InvalidArgumentError("config: " + error->text +
                                (origin != origins.end() ? origin->second : std::string()));
  }
  return config;
}

Status ValidateServerConfig(const ServerConfig& config) {
  if (const std::optional<KeyError> error = CheckKeysAndCombinations(config)) {
    return InvalidArgumentError("config: " + error->text);
  }
  return OkStatus();
}

std::string EffectiveConfigYaml(const ServerConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // the sections currently open, outermost first
  for (const ConfigKey& key : config::ConfigKeys()) {
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
      const size_t dot = key.path.find('.', start);
      parts.push_back(key.path.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (; open.size() + 1 < parts.size(); open.push_back(parts[open.size()])) {
      out << YAML::Key << parts[open.size()] << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << parts.back() << YAML::Value << key.render(config);
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> ServerConfigKeys() {
  std::vector<std::string> paths;
  for (const ConfigKey& key : config::ConfigKeys()) paths.push_back(key.path);
  return paths;
}

bool LooksLikeConfigOverride(std::string_view arg) {
  if (!arg.starts_with("--")) return false;
  std::string_view name = arg.substr(2);
  name = name.substr(0, name.find('='));
  const size_t dot = name.find('.');
  return dot != std::string_view::npos && dot > 0 && dot + 1 < name.size();
}

}  // namespace streamd
