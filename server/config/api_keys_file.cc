#include "server/config/api_keys_file.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/util/hex.h"

namespace streamd {
namespace {

// The scalar at `node` as a count in [0, 1000000].
StatusOr<int32_t> Count(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) return InvalidArgumentError(path + " must be a number");
  const std::string text = node.Scalar();
  if (text.empty() || text.size() > 7 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgumentError(path + " = " + text + " is not a whole number in [0, 1000000]");
  }
  const int value = std::stoi(text);
  if (value > 1'000'000) {
    return InvalidArgumentError(path + " = " + text + " is outside [0, 1000000]");
  }
  return static_cast<int32_t>(value);
}

Status ParseQuotas(const YAML::Node& node, const std::string& path, TenantQuotas* q) {
  if (!node.IsMap()) return InvalidArgumentError(path + " must be a mapping of quotas");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string name = it->first.Scalar();
    const std::string at = path + "." + name;
    if (name == "max_sessions") {
      STREAMD_ASSIGN_OR_RETURN(q->max_sessions, Count(it->second, at));
    } else if (name == "max_generations") {
      STREAMD_ASSIGN_OR_RETURN(q->max_generations, Count(it->second, at));
    } else if (name == "max_kv_blocks") {
      STREAMD_ASSIGN_OR_RETURN(q->max_kv_blocks, Count(it->second, at));
    } else if (name == "tokens_per_second") {
      STREAMD_ASSIGN_OR_RETURN(q->tokens_per_second, Count(it->second, at));
    } else {
      return InvalidArgumentError("unknown quota " + at +
                                  " (the quotas are max_sessions, max_generations, "
                                  "max_kv_blocks, tokens_per_second)");
    }
  }
  return OkStatus();
}

Status ParseKey(const YAML::Node& node, const std::string& path, ApiKeyEntry* key) {
  if (!node.IsMap()) return InvalidArgumentError(path + " must be a mapping");
  bool has_tenant = false, has_role = false, has_hash = false;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string name = it->first.Scalar();
    const std::string at = path + "." + name;
    if (!it->second.IsScalar()) return InvalidArgumentError(at + " must be a string");
    const std::string value = it->second.Scalar();
    if (name == "tenant") {
      if (!IsValidTenantName(value)) {
        return InvalidArgumentError(at + " = \"" + value +
                                    "\" is not a tenant name (1..64 bytes of A-Z a-z 0-9 . _ -)");
      }
      key->tenant = value;
      has_tenant = true;
    } else if (name == "role") {
      if (value != "user" && value != "admin") {
        return InvalidArgumentError(at + " = \"" + value + "\" is not one of user, admin");
      }
      key->admin = value == "admin";
      has_role = true;
    } else if (name == "sha256") {
      if (value.size() != 64) {
        return InvalidArgumentError(at + " is not 64 hex digits (the SHA-256 of the key; it has " +
                                    std::to_string(value.size()) + " characters)");
      }
      for (size_t i = 0; i < 32; ++i) {
        const int hi = HexDigitValue(value[2 * i]), lo = HexDigitValue(value[2 * i + 1]);
        if (hi < 0 || lo < 0) return InvalidArgumentError(at + " is not 64 hex digits");
        key->sha256[i] = static_cast<uint8_t>(hi << 4 | lo);
      }
      has_hash = true;
    } else {
      return InvalidArgumentError("unknown field " + at +
                                  " (a key has tenant, role and sha256; never the key itself)");
    }
  }
  if (!has_tenant) return InvalidArgumentError(path + ".tenant is missing");
  if (!has_role) return InvalidArgumentError(path + ".role is missing (user or admin)");
  if (!has_hash) return InvalidArgumentError(path + ".sha256 is missing");
  return OkStatus();
}

}  // namespace

bool IsValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

StatusOr<ApiKeys> ParseApiKeys(const std::string& text, const std::string& source) {
  const auto fail = [&](const Status& s) {
    return InvalidArgumentError("auth.keys_file " + source + ": " + s.message());
  };
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const std::exception& e) {
    return fail(InvalidArgumentError(std::string("not valid YAML: ") + e.what()));
  }
  if (!root.IsMap()) return fail(InvalidArgumentError("must be a mapping with `keys:`"));
  ApiKeys out;
  std::set<KeyHash> seen;
  try {
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string section = it->first.Scalar();
      const YAML::Node value = it->second;  // by value: the iterator yields a temporary pair
      if (section == "keys") {
        if (!value.IsSequence()) return fail(InvalidArgumentError("keys must be a list"));
        for (size_t i = 0; i < value.size(); ++i) {
          const std::string path = "keys[" + std::to_string(i) + "]";
          ApiKeyEntry key;
          if (Status s = ParseKey(value[i], path, &key); !s.ok()) return fail(s);
          if (!seen.insert(key.sha256).second) {
            return fail(InvalidArgumentError(path + ".sha256 is the hash of an earlier key"));
          }
          out.keys.push_back(std::move(key));
        }
      } else if (section == "tenants") {
        if (!value.IsMap()) return fail(InvalidArgumentError("tenants must be a mapping"));
        for (auto t = value.begin(); t != value.end(); ++t) {
          const std::string tenant = t->first.Scalar();
          const std::string path = "tenants." + tenant;
          if (!IsValidTenantName(tenant)) {
            return fail(InvalidArgumentError(path + " is not a tenant name (1..64 bytes of A-Z "
                                                    "a-z 0-9 . _ -)"));
          }
          TenantQuotas q;
          if (Status s = ParseQuotas(t->second, path, &q); !s.ok()) return fail(s);
          out.quotas[tenant] = q;
        }
      } else {
        return fail(InvalidArgumentError("unknown section " + section + " (keys, tenants)"));
      }
    }
  } catch (const std::exception& e) {  // yaml-cpp on a malformed node
    return fail(InvalidArgumentError(e.what()));
  }
  return out;
}

StatusOr<ApiKeys> LoadApiKeysFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string why =
        "auth.keys_file " + path + ": cannot be read (" + std::strerror(err) + ")";
    return err == EACCES ? Status(StatusCode::kPermissionDenied, why) : NotFoundError(why);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseApiKeys(text.str(), path);
}

}  // namespace streamd
