// Counter, Gauge, Histogram: one labelled child of a metric family (registry.h creates them).
//
// Hot path: every update is one or two relaxed atomic operations, no lock and no allocation,
// so the scheduler thread and every stream may update them freely. A scrape reads the atomics
// while updates continue: each value it reports is one that existed, and a histogram's
// _count always equals its +Inf bucket (both are derived from the same bucket counts); only
// _sum may lag an observation that is in flight at that instant.
//
// Values are doubles, as in Prometheus: integer counts stay exact up to 2^53.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "server/metrics/exposition.h"

namespace streamd::metrics {

class Metric {
 public:
  virtual ~Metric() = default;
  // Appends this child's samples to *out. `name`: the family's name; `labels`: the child's.
  virtual void Collect(const std::string& name, const LabelPairs& labels,
                       std::vector<Sample>* out) const = 0;
};

// Only goes up. The family's name ends in "_total".
class Counter final : public Metric {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // `amount` must be >= 0; a negative or NaN amount is ignored (a counter never goes down).
  void Inc(double amount = 1.0) {
    if (amount >= 0.0) value_.fetch_add(amount, std::memory_order_relaxed);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

  void Collect(const std::string& name, const LabelPairs& labels,
               std::vector<Sample>* out) const override;

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down: set by its owner, or computed by a callback at each scrape.
class Gauge final : public Metric {
 public:
  Gauge() = default;
  // A callback gauge: Value() calls `callback` (on the scraping thread; it must be
  // thread-safe and quick). Set/Inc/Dec have no effect on it.
  explicit Gauge(std::function<double()> callback) : callback_(std::move(callback)) {}
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Inc(double delta = 1.0) { value_.fetch_add(delta, std::memory_order_relaxed); }
  void Dec(double delta = 1.0) { value_.fetch_sub(delta, std::memory_order_relaxed); }
  double Value() const { return callback_ ? callback_() : value_.load(std::memory_order_relaxed); }
  bool is_callback() const { return static_cast<bool>(callback_); }

  void Collect(const std::string& name, const LabelPairs& labels,
               std::vector<Sample>* out) const override;

 private:
  std::atomic<double> value_{0.0};
  const std::function<double()> callback_;  // empty for a plain gauge; fixed at construction
};

// Counts observations into buckets with upper bounds b_0 < b_1 < ... < b_{n-1} (inclusive:
// a value v lands in the first bucket with v <= b_i) plus the implicit +Inf bucket.
// Exposed as cumulative _bucket{le="b_i"} samples, _bucket{le="+Inf"}, _sum and _count.
class Histogram final : public Metric {
 public:
  // `bounds`: finite and strictly increasing (HistogramFamily checks this).
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN is ignored (it belongs to no bucket); +Inf counts in the +Inf bucket only.
  void Observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  // [bounds.size() + 1]: observations <= each bound, then the total (the +Inf bucket).
  std::vector<uint64_t> CumulativeCounts() const;
  uint64_t Count() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }

  void Collect(const std::string& name, const LabelPairs& labels,
               std::vector<Sample>* out) const override;

 private:
  const std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> counts_;  // [bounds.size() + 1], per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

}  // namespace streamd::metrics
