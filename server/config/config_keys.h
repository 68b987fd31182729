// The table of config keys: for each, its dotted path (= its YAML path = its override flag), how
// a scalar is parsed into ServerConfig (with the key's own limits) and how it is rendered back.
// The loader, the effective-config printer and the tests all walk this one table, so a key
// cannot be readable but not printable, or documented but not overridable.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/status.h"
#include "server/config/server_config.h"

namespace streamd::config {

struct ConfigKey {
  std::string path;  // "engine.threads"
  // Parses `value` into `config`. On error the message is only the reason and the limit
  // ("is outside [0, 1024]"); `config` is left unchanged.
  std::function<Status(std::string_view value, ServerConfig& config)> parse;
  // The value as it would be written in the YAML file; parse(render(c)) reproduces it.
  std::function<std::string(const ServerConfig& config)> render;
};

// Every key, in file order (grouped by section).
const std::vector<ConfigKey>& ConfigKeys();

// The key with this dotted path, or nullptr.
const ConfigKey* FindConfigKey(std::string_view path);

// True when `path` names a section ("engine", "sessions.default_sampling") rather than a key.
bool IsConfigSection(std::string_view path);

// The key or section closest to an unknown `path`, or "" when nothing is close.
std::string SuggestConfigKey(std::string_view path);

}  // namespace streamd::config
