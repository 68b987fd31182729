#include "server/config/config_values.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>
#include <vector>

namespace streamd::config {
namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 62;
constexpr int64_t kMinPoolBytes = int64_t{1} << 20;
constexpr int64_t kMaxDurationMs = int64_t{3650} * 24 * 3600 * 1000;  // ten years

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

struct Unit {
  std::string_view name;
  int64_t scale;
};

// Largest first, so Format* can pick the largest exact one.
constexpr std::array<Unit, 5> kDurationUnits = {
    {{"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1000}, {"ms", 1}}};
constexpr std::array<Unit, 9> kSizeUnits = {{{"TiB", int64_t{1} << 40},
                                             {"GiB", int64_t{1} << 30},
                                             {"MiB", int64_t{1} << 20},
                                             {"KiB", int64_t{1} << 10},
                                             {"TB", 1'000'000'000'000},
                                             {"GB", 1'000'000'000},
                                             {"MB", 1'000'000},
                                             {"KB", 1000},
                                             {"B", 1}}};

template <size_t N>
const Unit* FindUnit(const std::array<Unit, N>& units, std::string_view name) {
  for (const Unit& u : units) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

StatusOr<int64_t> ParseInteger(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != end) {
    return InvalidArgumentError("is not an integer");
  }
  if (ec == std::errc::result_out_of_range) return InvalidArgumentError("is out of range");
  return value;
}

StatusOr<double> ParseNumber(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != end) {
    return InvalidArgumentError("is not a number");
  }
  if (ec == std::errc::result_out_of_range || !std::isfinite(value)) {
    return InvalidArgumentError("is not a finite number");
  }
  return value;
}

std::string FormatNumber(double value) {
  std::array<char, 64> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  return std::string(buf.data(), r.ptr);
}

std::string FormatNumber(float value) {
  std::array<char, 64> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  return std::string(buf.data(), r.ptr);
}

StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  static constexpr const char* kExpect = "is not a duration (e.g. 250ms, 30s, 10m, 1h, 1m30s)";
  text = Trim(text);
  if (text == "0") return std::chrono::milliseconds(0);
  if (!text.empty() && text.front() == '-') return InvalidArgumentError("must not be negative");
  if (text.empty()) return InvalidArgumentError(kExpect);
  int64_t total = 0;
  while (!text.empty()) {
    size_t n = 0;
    while (n < text.size() && IsDigit(text[n])) ++n;
    size_t u = n;
    while (u < text.size() && IsAlpha(text[u])) ++u;
    if (n == 0) return InvalidArgumentError(kExpect);
    if (u == n && n == text.size()) return InvalidArgumentError("needs a unit (ms, s, m, h, d)");
    if (u == n) return InvalidArgumentError(kExpect);
    const Unit* unit = FindUnit(kDurationUnits, text.substr(n, u - n));
    if (unit == nullptr) {
      return InvalidArgumentError("has unknown unit '" + std::string(text.substr(n, u - n)) +
                                  "' (use ms, s, m, h, d)");
    }
    auto count = ParseInteger(text.substr(0, n));
    if (!count.ok() || *count > kMaxDurationMs / unit->scale ||
        total + *count * unit->scale > kMaxDurationMs) {
      return InvalidArgumentError("is longer than ten years");
    }
    total += *count * unit->scale;
    text.remove_prefix(u);
  }
  return std::chrono::milliseconds(total);
}

std::string FormatDuration(std::chrono::milliseconds value) {
  const int64_t ms = value.count();
  if (ms == 0) return "0s";
  for (const Unit& u : kDurationUnits) {
    if (ms % u.scale == 0) return std::to_string(ms / u.scale) + std::string(u.name);
  }
  return std::to_string(ms) + "ms";  // unreachable: ms divides everything
}

StatusOr<int64_t> ParseByteSize(std::string_view text) {
  text = Trim(text);
  if (!text.empty() && text.front() == '-') return InvalidArgumentError("must not be negative");
  size_t n = 0;
  while (n < text.size() && (IsDigit(text[n]) || text[n] == '.')) ++n;
  const std::string_view number = text.substr(0, n);
  const std::string_view unit_name = Trim(text.substr(n));
  if (number.empty()) {
    return InvalidArgumentError("is not a size (e.g. 4194304, 512MiB, 1GiB)");
  }
  if (unit_name.empty()) {
    if (number.find('.') != std::string_view::npos) {
      return InvalidArgumentError("has a fraction but no unit (e.g. 1.5GiB)");
    }
    auto bytes = ParseInteger(number);
    if (!bytes.ok() || *bytes > kMaxBytes) return InvalidArgumentError("is larger than 2^62 bytes");
    return *bytes;
  }
  const Unit* unit = FindUnit(kSizeUnits, unit_name);
  if (unit == nullptr) {
    return InvalidArgumentError("has unknown unit '" + std::string(unit_name) +
                                "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  }
  auto value = ParseNumber(number);
  if (!value.ok()) return InvalidArgumentError("is not a size (e.g. 4194304, 512MiB, 1GiB)");
  const double bytes = std::floor(*value * static_cast<double>(unit->scale));
  if (bytes > static_cast<double>(kMaxBytes)) {
    return InvalidArgumentError("is larger than 2^62 bytes");
  }
  return static_cast<int64_t>(bytes);
}

std::string FormatByteSize(int64_t bytes) {
  if (bytes > 0) {
    for (const Unit& u : kSizeUnits) {
      const bool binary = u.name.size() == 3;
      if (binary && bytes % u.scale == 0) {
        return std::to_string(bytes / u.scale) + std::string(u.name);
      }
    }
  }
  return std::to_string(bytes);
}

StatusOr<KvPoolBudget> ParseKvPoolBudget(std::string_view text) {
  text = Trim(text);
  const bool fraction =
      !text.empty() && text.find('.') != std::string_view::npos &&
      std::all_of(text.begin(), text.end(), [](char c) { return IsDigit(c) || c == '.'; });
  KvPoolBudget budget;
  if (fraction) {
    auto value = ParseNumber(text);
    if (!value.ok()) return value.status();
    if (!(*value > 0.0 && *value <= 1.0)) {
      return InvalidArgumentError("is a fraction outside (0, 1]");
    }
    budget.bytes = 0;
    budget.fraction = *value;
    return budget;
  }
  auto bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    return InvalidArgumentError(bytes.status().message() +
                                "; give a size (1GiB) or a fraction of available memory (0.25)");
  }
  if (*bytes < kMinPoolBytes) return InvalidArgumentError("is below the minimum of 1MiB");
  budget.bytes = *bytes;
  budget.fraction = 0.0;
  return budget;
}

std::string FormatKvPoolBudget(const KvPoolBudget& budget) {
  if (budget.bytes > 0) return FormatByteSize(budget.bytes);
  std::string text = FormatNumber(budget.fraction);
  if (text.find('.') == std::string::npos) text += ".0";  // "1" would read back as 1 byte
  return text;
}

Status CheckAddress(std::string_view text, bool allow_unix) {
  if (text.starts_with("unix:")) {
    if (!allow_unix) return InvalidArgumentError("must be host:port (unix: sockets not allowed)");
    if (text.size() == 5) return InvalidArgumentError("names no socket path after unix:");
    return OkStatus();
  }
  if (std::any_of(text.begin(), text.end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; })) {
    return InvalidArgumentError("contains white space");
  }
  const size_t colon = text.rfind(':');
  std::string_view host = colon == std::string_view::npos ? text : text.substr(0, colon);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (colon == std::string_view::npos || host.empty() ||
      (!bracketed && host.find_first_of(":[]") != std::string_view::npos)) {
    return InvalidArgumentError(
        "is not host:port (e.g. 127.0.0.1:50051, [::1]:50051, 0.0.0.0:50051)");
  }
  auto port = ParseInteger(text.substr(colon + 1));
  if (!port.ok()) return InvalidArgumentError("has a port that is not a number");
  if (*port < 0 || *port > 65535) {
    return InvalidArgumentError("has port " + std::to_string(*port) + " outside [0, 65535]");
  }
  return OkStatus();
}

int32_t AddressPort(std::string_view text) {
  if (!CheckAddress(text, /*allow_unix=*/false).ok()) return -1;
  return static_cast<int32_t>(*ParseInteger(text.substr(text.rfind(':') + 1)));
}

std::string_view AddressHost(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (text.starts_with("unix:") || colon == std::string_view::npos) return {};
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

std::string ExpandHome(std::string path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  std::string home;
  if (const char* env = std::getenv("HOME"); env != nullptr && *env != '\0') {
    home = env;
  } else {
    std::vector<char> buf(16384);
    passwd pw{};
    passwd* found = nullptr;
    if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      home = found->pw_dir;
    }
  }
  if (home.empty()) return path;
  return home + path.substr(1);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace streamd::config
