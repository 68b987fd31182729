// Registry: the metric families one /metrics endpoint exposes, and their text serialization.
//
// A family has a name, help text, a type and a fixed list of label names; each distinct list
// of label values is one child (a Counter, Gauge or Histogram of metric.h). Children are never
// removed, so a reference returned by WithLabels/Get stays valid as long as the registry:
// resolve children once (at start-up, or once per session) and update them on the hot path
// without any lookup or lock.
//
// Thread-safety: everything may be called from any thread. WithLabels takes the family's
// mutex (a map lookup); updates of a child are lock-free (metric.h).
//
// Misuse is a programming error and aborts with a message naming the metric: an invalid or
// duplicate metric name, an invalid or duplicate label name, a counter whose name does not end
// in "_total" (or another type whose name does), histogram bounds that are not finite and
// strictly increasing, "le" as a histogram label, or the wrong number of label values.
//
// Output is stable: families sorted by name, children by label values (lexicographically,
// in label-name order); labels appear in the order the family declared them, "le" last.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/metrics/exposition.h"
#include "server/metrics/metric.h"

namespace streamd::metrics {

class Family {
 public:
  virtual ~Family() = default;
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Every child's samples, children sorted by label values.
  FamilySnapshot Collect() const;

 protected:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names);
  // The child for `label_values`, made by `make` if it does not exist yet.
  Metric& GetOrCreate(const std::vector<std::string>& label_values,
                      const std::function<std::unique_ptr<Metric>()>& make);
  // Adds a child that must not exist yet (a callback gauge).
  Metric& Create(const std::vector<std::string>& label_values, std::unique_ptr<Metric> child);

 private:
  void CheckArity(const std::vector<std::string>& label_values) const;

  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_;
};

class CounterFamily final : public Family {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names)
      : Family(std::move(name), std::move(help), MetricType::kCounter, std::move(label_names)) {}
  Counter& WithLabels(const std::vector<std::string>& label_values);
  Counter& Get() { return WithLabels({}); }  // the family without labels
};

class GaugeFamily final : public Family {
 public:
  GaugeFamily(std::string name, std::string help, std::vector<std::string> label_names)
      : Family(std::move(name), std::move(help), MetricType::kGauge, std::move(label_names)) {}
  Gauge& WithLabels(const std::vector<std::string>& label_values);
  Gauge& Get() { return WithLabels({}); }
  // A child whose value `callback` computes at each scrape (on the scraping thread, under the
  // registry's lock: it must be thread-safe, quick, and must not use this registry). The child
  // must not exist yet.
  Gauge& AddCallback(const std::vector<std::string>& label_values,
                     std::function<double()> callback);
};

class HistogramFamily final : public Family {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<double> bounds,
                  std::vector<std::string> label_names);
  Histogram& WithLabels(const std::vector<std::string>& label_values);
  Histogram& Get() { return WithLabels({}); }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // A family without labels gets its only child at once, so it is exposed (as 0) before its
  // first update. A labelled family exposes only the children created so far.
  CounterFamily& AddCounter(std::string name, std::string help,
                            std::vector<std::string> label_names = {});
  GaugeFamily& AddGauge(std::string name, std::string help,
                        std::vector<std::string> label_names = {});
  // A gauge without labels whose value `callback` computes at each scrape (see AddCallback).
  Gauge& AddCallbackGauge(std::string name, std::string help, std::function<double()> callback);
  // `bounds`: the finite upper bounds, strictly increasing; +Inf is added implicitly.
  HistogramFamily& AddHistogram(std::string name, std::string help, std::vector<double> bounds,
                                std::vector<std::string> label_names = {});

  // `hook` runs at the start of every collection, before any value is read: e.g. to copy a
  // component's statistics into gauges under one lock of that component, so that related
  // gauges come from one consistent snapshot. Hooks never run concurrently with each other;
  // they must not use this registry's Add* functions.
  void AddCollectHook(std::function<void()> hook);

  // Runs the hooks, then snapshots every family, sorted by name.
  std::vector<FamilySnapshot> Collect() const;
  // Collect() rendered in the text format 0.0.4 (exposition.h).
  std::string Serialize() const;

 private:
  Family& Insert(std::unique_ptr<Family> family);

  mutable std::mutex mu_;  // held for a whole collection, so hooks never overlap
  std::map<std::string, std::unique_ptr<Family>> families_;
  std::vector<std::function<void()>> hooks_;
};

}  // namespace streamd::metrics
