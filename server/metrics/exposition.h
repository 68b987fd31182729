// Prometheus text exposition format 0.0.4: the plain data a scrape produces and the function
// that renders it. Storage (metric.h, registry.h) knows nothing of the format; this file knows
// nothing of storage.
//
// Format (https://prometheus.io/docs/instrumenting/exposition_formats/), per family:
//   # HELP <name> <help, with '\' -> "\\" and newline -> "\n">
//   # TYPE <name> counter|gauge|histogram
//   <sample name>{<label>="<value, with '\' -> "\\", '"' -> "\"", newline -> "\n">",...} <value>
// Values are shortest round-trip decimals ("0.25", "1e+06"), or "+Inf", "-Inf", "NaN".
// A sample without labels has no braces. Samples appear in the order the snapshot lists them:
// the registry sorts families by name and children by label values, so output is stable.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace streamd::metrics {

// The Content-Type of a scrape answer in this format.
inline constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge, kHistogram };
std::string_view MetricTypeName(MetricType type);  // "counter", "gauge", "histogram"

using LabelPairs = std::vector<std::pair<std::string, std::string>>;  // (name, value), in order

struct Sample {
  std::string name;  // the family name, or the family name plus _bucket / _sum / _count
  LabelPairs labels;
  double value = 0.0;
};

struct FamilySnapshot {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<Sample> samples;
};

std::string FormatValue(double value);
std::string EscapeLabelValue(std::string_view value);
std::string EscapeHelp(std::string_view help);

// Appends one family (HELP, TYPE, then every sample) to *out.
void AppendTextFormat(const FamilySnapshot& family, std::string* out);

}  // namespace streamd::metrics
