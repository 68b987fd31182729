#include "server/metrics/registry.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>
#include <utility>

namespace streamd::metrics {
namespace {

// Misuse of the registry is a bug in the daemon, never a consequence of input: crash fast.
[[noreturn]] void Fatal(const std::string& message) {
  std::fprintf(stderr, "streamd metrics: %s\n", message.c_str());
  std::abort();
}

bool IsNameChar(char c, bool first, bool allow_colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  const bool digit = c >= '0' && c <= '9';
  return alpha || (allow_colon && c == ':') || (!first && digit);
}

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; [a-zA-Z_][a-zA-Z0-9_]* for label names.
bool IsValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, allow_colon)) return false;
  }
  return true;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

// ---- Family ------------------------------------------------------------------------------

Family::Family(std::string name, std::string help, MetricType type,
               std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)) {
  if (!IsValidName(name_, /*allow_colon=*/true)) Fatal("invalid metric name \"" + name_ + "\"");
  const bool total = EndsWith(name_, "_total");
  if (type_ == MetricType::kCounter && !total) {
    Fatal("counter \"" + name_ + "\" must end in _total");
  }
  if (type_ != MetricType::kCounter && total) {
    Fatal(std::string(MetricTypeName(type_)) + " \"" + name_ + "\" must not end in _total");
  }
  std::set<std::string> seen;
  for (const std::string& label : label_names_) {
    if (!IsValidName(label, /*allow_colon=*/false) || label.rfind("__", 0) == 0) {
      Fatal("metric \"" + name_ + "\": invalid label name \"" + label + "\"");
    }
    if (!seen.insert(label).second) {
      Fatal("metric \"" + name_ + "\": duplicate label name \"" + label + "\"");
    }
  }
}

void Family::CheckArity(const std::vector<std::string>& label_values) const {
  if (label_values.size() != label_names_.size()) {
    Fatal("metric \"" + name_ + "\" has " + std::to_string(label_names_.size()) +
          " label(s), got " + std::to_string(label_values.size()) + " value(s)");
  }
}

Metric& Family::GetOrCreate(const std::vector<std::string>& label_values,
                            const std::function<std::unique_ptr<Metric>()>& make) {
  CheckArity(label_values);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(label_values);
  if (it == children_.end()) it = children_.emplace(label_values, make()).first;
  return *it->second;
}

Metric& Family::Create(const std::vector<std::string>& label_values,
                       std::unique_ptr<Metric> child) {
  CheckArity(label_values);
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = children_.emplace(label_values, std::move(child));
  if (!inserted) Fatal("metric \"" + name_ + "\": child already exists");
  return *it->second;
}

FamilySnapshot Family::Collect() const {
  FamilySnapshot snapshot{name_, help_, type_, {}};
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, child] : children_) {
    LabelPairs labels;
    labels.reserve(values.size());
    for (size_t i = 0; i < values.size(); ++i) labels.emplace_back(label_names_[i], values[i]);
    child->Collect(name_, labels, &snapshot.samples);
  }
  return snapshot;
}

// ---- Typed families ----------------------------------------------------------------------

Counter& CounterFamily::WithLabels(const std::vector<std::string>& label_values) {
  return static_cast<Counter&>(
      GetOrCreate(label_values, [] { return std::make_unique<Counter>(); }));
}

Gauge& GaugeFamily::WithLabels(const std::vector<std::string>& label_values) {
  return static_cast<Gauge&>(GetOrCreate(label_values, [] { return std::make_unique<Gauge>(); }));
}

Gauge& GaugeFamily::AddCallback(const std::vector<std::string>& label_values,
                                std::function<double()> callback) {
  if (!callback) Fatal("metric \"" + name() + "\": empty callback");
  return static_cast<Gauge&>(Create(label_values, std::make_unique<Gauge>(std::move(callback))));
}

HistogramFamily::HistogramFamily(std::string name, std::string help, std::vector<double> bounds,
                                 std::vector<std::string> label_names)
    : Family(std::move(name), std::move(help), MetricType::kHistogram, std::move(label_names)),
      bounds_(std::move(bounds)) {
  for (const std::string& label : this->label_names()) {
    if (label == "le") Fatal("histogram \"" + this->name() + "\" may not use the label \"le\"");
  }
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && !(bounds_[i - 1] < bounds_[i]))) {
      Fatal("histogram \"" + this->name() + "\": bounds must be finite and strictly increasing");
    }
  }
}

Histogram& HistogramFamily::WithLabels(const std::vector<std::string>& label_values) {
  return static_cast<Histogram&>(
      GetOrCreate(label_values, [this] { return std::make_unique<Histogram>(bounds_); }));
}

// ---- Registry ----------------------------------------------------------------------------

Family& Registry::Insert(std::unique_ptr<Family> family) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = family->name();
  auto [it, inserted] = families_.emplace(name, std::move(family));
  if (!inserted) Fatal("metric \"" + name + "\" registered twice");
  return *it->second;
}

CounterFamily& Registry::AddCounter(std::string name, std::string help,
                                    std::vector<std::string> label_names) {
  auto& family = static_cast<CounterFamily&>(Insert(
      std::make_unique<CounterFamily>(std::move(name), std::move(help), std::move(label_names))));
  if (family.label_names().empty()) family.Get();
  return family;
}

GaugeFamily& Registry::AddGauge(std::string name, std::string help,
                                std::vector<std::string> label_names) {
  auto& family = static_cast<GaugeFamily&>(Insert(
      std::make_unique<GaugeFamily>(std::move(name), std::move(help), std::move(label_names))));
  if (family.label_names().empty()) family.Get();
  return family;
}

Gauge& Registry::AddCallbackGauge(std::string name, std::string help,
                                  std::function<double()> callback) {
  auto& family = static_cast<GaugeFamily&>(Insert(
      std::make_unique<GaugeFamily>(std::move(name), std::move(help), std::vector<std::string>{})));
  return family.AddCallback({}, std::move(callback));
}

HistogramFamily& Registry::AddHistogram(std::string name, std::string help,
                                        std::vector<double> bounds,
                                        std::vector<std::string> label_names) {
  auto& family = static_cast<HistogramFamily&>(Insert(std::make_unique<HistogramFamily>(
      std::move(name), std::move(help), std::move(bounds), std::move(label_names))));
  if (family.label_names().empty()) family.Get();
  return family;
}

void Registry::AddCollectHook(std::function<void()> hook) {
  if (!hook) Fatal("empty collect hook");
  std::lock_guard<std::mutex> lock(mu_);
  hooks_.push_back(std::move(hook));
}

std::vector<FamilySnapshot> Registry::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& hook : hooks_) hook();
  std::vector<FamilySnapshot> out;
  out.reserve(families_.size());
  for (const auto& [name, family] : families_) out.push_back(family->Collect());
  return out;
}

std::string Registry::Serialize() const {
  std::string out;
  for (const FamilySnapshot& family : Collect()) AppendTextFormat(family, &out);
  return out;
}

}  // namespace streamd::metrics
