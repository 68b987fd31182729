#include "server/metrics/exposition.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace streamd::metrics {

std::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Shortest representation that parses back to the same double (Go's ParseFloat accepts
  // both "1024" and "1e+06").
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value);
  if (r.ec != std::errc()) return "NaN";  // cannot happen with 64 bytes
  return std::string(buf, r.ptr);
}

namespace {

// The text format escapes backslash and newline in HELP text, and also the double quote in
// label values.
std::string Escape(std::string_view text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) { return Escape(value, /*quotes=*/true); }

std::string EscapeHelp(std::string_view help) { return Escape(help, /*quotes=*/false); }

void AppendTextFormat(const FamilySnapshot& family, std::string* out) {
  *out += "# HELP ";
  *out += family.name;
  *out += ' ';
  *out += EscapeHelp(family.help);
  *out += "\n# TYPE ";
  *out += family.name;
  *out += ' ';
  *out += MetricTypeName(family.type);
  *out += '\n';
  for (const Sample& s : family.samples) {
    *out += s.name;
    if (!s.labels.empty()) {
      *out += '{';
      for (size_t i = 0; i < s.labels.size(); ++i) {
        if (i > 0) *out += ',';
        *out += s.labels[i].first;
        *out += "=\"";
        *out += EscapeLabelValue(s.labels[i].second);
        *out += '"';
      }
      *out += '}';
    }
    *out += ' ';
    *out += FormatValue(s.value);
    *out += '\n';
  }
}

}  // namespace streamd::metrics
