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

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (const char c : help) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

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
