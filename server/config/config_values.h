// Scalar value syntax of the daemon's config (server_config.h): durations, byte sizes, the KV
// pool budget, numbers, addresses, "~" paths. Each parser takes the scalar exactly as written in
// the YAML file or after `=` on the command line and returns INVALID_ARGUMENT whose message is
// only the reason ("needs a unit (ms, s, m, h)"); the caller prefixes the key and the value.
// Each Format* is the inverse of its Parse*: Parse(Format(x)) == x.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/util/status.h"
#include "server/config/server_config.h"

namespace streamd::config {

// A decimal integer, optional leading '-'. "4", "-1"; not "4.0", "+4", "0x10", "".
StatusOr<int64_t> ParseInteger(std::string_view text);

// A finite decimal number: "0.25", "1", "1e-3", "-2".
StatusOr<double> ParseNumber(std::string_view text);

// Shortest text that parses back to exactly `value` ("0.8", "1", "0.95").
std::string FormatNumber(double value);
std::string FormatNumber(float value);

// One or more <non-negative integer><unit> terms, units ms, s, m, h, d: "250ms", "30s", "10m",
// "1h", "1m30s". "0" alone is allowed; any other number needs a unit.
StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);

// The largest unit that represents `value` exactly: 600000ms -> "10m", 1500ms -> "1500ms".
std::string FormatDuration(std::chrono::milliseconds value);

// A non-negative byte count: a plain integer ("4194304") or a number with a unit: binary KiB,
// MiB, GiB, TiB (1024^n) or decimal KB, MB, GB, TB (1000^n), e.g. "512MiB", "1.5GiB"
// (rounded down to a whole byte), "0". At most 2^62.
StatusOr<int64_t> ParseByteSize(std::string_view text);

// The largest binary unit that represents `bytes` exactly: 4194304 -> "4MiB", 1000 -> "1000".
std::string FormatByteSize(int64_t bytes);

// A size ("1GiB", "268435456": bytes) or a number with a decimal point and no unit ("0.25",
// "1.0": a fraction in (0, 1] of the memory available at start-up). Sizes are at least 1MiB.
StatusOr<KvPoolBudget> ParseKvPoolBudget(std::string_view text);
std::string FormatKvPoolBudget(const KvPoolBudget& budget);

// A listen address: "host:port" or "[ipv6]:port" with port in [0, 65535] (0 = any free port),
// or, when `allow_unix`, "unix:/path" / "unix:relative".
Status CheckAddress(std::string_view text, bool allow_unix);

// The port of a "host:port" address, or -1 for unix: addresses and unparsable text.
int32_t AddressPort(std::string_view text);
// The host part of a "host:port" address without brackets, or "" when there is none.
std::string_view AddressHost(std::string_view text);

// "~" and "~/rest" become $HOME and $HOME/rest (the passwd entry when HOME is unset); anything
// else, including "~user/...", is returned unchanged.
std::string ExpandHome(std::string path);

// Levenshtein distance, for "did you mean" suggestions.
size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace streamd::config
