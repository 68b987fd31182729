#include "engine/build_plan/cpu_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "engine/backends/cpu/k_quant_defaults.h"
#include "engine/build_plan/machine_load.h"
#include "engine/build_plan/step_timer.h"

namespace streamd {
namespace {

using kernels::cpu::Isa;
using Clock = std::chrono::steady_clock;

// The products of one tuner stage: decode steps of these many sessions, and a prefill chunk.
constexpr int64_t kPrefillProbeTokens = 64;
// One product sample lasts about this long (calls repeated to fill it): long enough to dwarf
// the timer, short enough that rounds alternate often.
constexpr double kProductSampleSeconds = 0.5e-3;

Status CheckOptions(const CpuTunerOptions& o) {
  if (o.rounds < 1 || o.rounds > 101) {
    return InvalidArgumentError("tuner: rounds = " + std::to_string(o.rounds) +
                                " outside [1, 101]");
  }
  if (o.steps_per_sample < 1 || o.steps_per_sample > 1000) {
    return InvalidArgumentError("tuner: steps_per_sample = " + std::to_string(o.steps_per_sample) +
                                " outside [1, 1000]");
  }
  if (!(o.min_gain >= 0 && o.min_gain < 1)) {
    return InvalidArgumentError("tuner: min_gain = " + std::to_string(o.min_gain) +
                                " outside [0, 1)");
  }
  for (int32_t t : o.thread_candidates) {
    if (t < 1 || t > 4096) {
      return InvalidArgumentError("tuner: thread candidate " + std::to_string(t) +
                                  " outside [1, 4096]");
    }
  }
  return OkStatus();
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The step workloads, created once and shared by every stage (their caches keep sliding).
class Workloads {
 public:
  Workloads(LlamaModel& model, const CpuTunerOptions& o) : model_(model), o_(o) {}
  StatusOr<StepTimer*> Get(int64_t sessions, int64_t tokens_per_session) {
    auto& slot = timers_[{sessions, tokens_per_session}];
    if (slot == nullptr) {
      STREAMD_ASSIGN_OR_RETURN(
          slot, StepTimer::Create(model_, {sessions, tokens_per_session, o_.sinks, o_.window}));
    }
    return slot.get();
  }
  static std::string Name(const StepTimer& t) {
    const StepWorkload& w = t.workload();
    if (w.tokens_per_session > 1) {
      return "prefill chunk of " + std::to_string(w.tokens_per_session) + " tokens";
    }
    return "decode step, " + std::to_string(w.sessions) +
           (w.sessions == 1 ? " session" : " sessions");
  }

 private:
  LlamaModel& model_;
  const CpuTunerOptions& o_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<StepTimer>> timers_;
};

// Per candidate, per workload: the median over rounds of each round's median step ms.
using Medians = std::vector<std::vector<double>>;

Status CheckDeadline(Clock::time_point deadline) {
  if (Clock::now() > deadline) {
    return Status(StatusCode::kDeadlineExceeded, "tuning ran past its time limit");
  }
  return OkStatus();
}

// timers[c]: candidate c's workloads (the same ones for every candidate, except where candidates
// differ in the cache their pools hold); every candidate has as many.
StatusOr<Medians> TimeCandidates(LlamaModel& model, const std::vector<CpuTuning>& candidates,
                                 const std::vector<std::vector<StepTimer*>>& timers, int32_t rounds,
                                 int64_t steps, Clock::time_point deadline) {
  const size_t nc = candidates.size();
  const size_t nw = timers.empty() ? 0 : timers[0].size();
  std::vector<std::vector<std::vector<double>>> samples(nc, std::vector<std::vector<double>>(nw));
  for (int32_t r = 0; r < rounds; ++r) {
    STREAMD_RETURN_IF_ERROR(CheckDeadline(deadline));
    for (size_t k = 0; k < nc; ++k) {
      const size_t c = (k + static_cast<size_t>(r)) % nc;
      STREAMD_RETURN_IF_ERROR(model.ApplyTuning(candidates[c]));
      for (size_t w = 0; w < nw; ++w) {
        STREAMD_RETURN_IF_ERROR(timers[c][w]->Run(1).status());  // a new pool's first step
        STREAMD_ASSIGN_OR_RETURN(std::vector<double> ms, timers[c][w]->Run(steps));
        samples[c][w].push_back(Median(std::move(ms)));
      }
    }
  }
  Medians out(nc, std::vector<double>(nw));
  for (size_t c = 0; c < nc; ++c) {
    for (size_t w = 0; w < nw; ++w) out[c][w] = Median(samples[c][w]);
  }
  return out;
}

// Every candidate on the same workloads.
StatusOr<Medians> TimeCandidates(LlamaModel& model, const std::vector<CpuTuning>& candidates,
                                 const std::vector<StepTimer*>& timers, int32_t rounds,
                                 int64_t steps, Clock::time_point deadline) {
  return TimeCandidates(model, candidates,
                        std::vector<std::vector<StepTimer*>>(candidates.size(), timers), rounds,
                        steps, deadline);
}

// The geometric mean over workloads: every workload counts the same, however long its step.
double Score(const std::vector<double>& per_workload) {
  double log_sum = 0;
  for (double ms : per_workload) log_sum += std::log(std::max(ms, 1e-9));
  return std::exp(log_sum / static_cast<double>(per_workload.size()));
}

// The fastest candidate if it beats candidate 0 (the one in place) by min_gain, else 0.
size_t PickWinner(const std::vector<double>& score, double min_gain) {
  size_t best = 0;
  for (size_t c = 1; c < score.size(); ++c) {
    if (score[c] < score[best]) best = c;
  }
  return score[best] <= score[0] * (1 - min_gain) ? best : 0;
}

class Tuner {
 public:
  Tuner(LlamaModel& model, const CpuTunerOptions& o) : model_(model), o_(o), workloads_(model, o) {}

  StatusOr<CpuTuningResult> Run() {
    result_.tuning = model_.tuning();
    if (!o_.numerics_exact_only) STREAMD_RETURN_IF_ERROR(TuneIsaPerShape());
    STREAMD_RETURN_IF_ERROR(TuneThreads());
    STREAMD_RETURN_IF_ERROR(TuneAttentionGrouping());
    STREAMD_RETURN_IF_ERROR(TuneAttentionPrefetch());
    for (int b = 0; b < kTokenBuckets; ++b) STREAMD_RETURN_IF_ERROR(TuneSplit(b));
    if (!o_.numerics_exact_only) STREAMD_RETURN_IF_ERROR(TuneDecodeByTokens());
    STREAMD_RETURN_IF_ERROR(model_.ApplyTuning(result_.tuning));
    return std::move(result_);
  }

  // Stages 3, 4 and 6 again, from the model's tuning in place.
  StatusOr<CpuTuningResult> RunAttention() {
    result_.tuning = model_.tuning();
    STREAMD_RETURN_IF_ERROR(TuneAttentionGrouping());
    STREAMD_RETURN_IF_ERROR(TuneAttentionPrefetch());
    if (!o_.numerics_exact_only) STREAMD_RETURN_IF_ERROR(TuneDecodeByTokens());
    STREAMD_RETURN_IF_ERROR(model_.ApplyTuning(result_.tuning));
    return std::move(result_);
  }

 private:
  void Say(const std::string& line) {
    if (o_.progress) o_.progress(line);
  }
  void Record(std::string what, double value, std::string unit) {
    result_.measurements.push_back({std::move(what), value, std::move(unit)});
  }

  // Times `candidates` (candidate 0: the tuning in place) on `timers`; keeps the winner in
  // result_.tuning and returns its index.
  StatusOr<size_t> Decide(const std::string& knob, const std::vector<CpuTuning>& candidates,
                          const std::vector<std::string>& labels,
                          const std::vector<StepTimer*>& timers) {
    STREAMD_ASSIGN_OR_RETURN(Medians m, TimeCandidates(model_, candidates, timers, o_.rounds,
                                                       o_.steps_per_sample, o_.deadline));
    std::vector<double> score;
    for (size_t c = 0; c < candidates.size(); ++c) {
      score.push_back(Score(m[c]));
      for (size_t w = 0; w < timers.size(); ++w) {
        Record(knob + " " + labels[c] + ": " + Workloads::Name(*timers[w]), m[c][w], "ms");
      }
    }
    const size_t win = PickWinner(score, o_.min_gain);
    std::string line = knob + ":";
    for (size_t c = 0; c < candidates.size(); ++c) {
      line += " " + labels[c] + " " + Fmt("%.3f", score[c]) + (c == win ? "*" : "");
    }
    Say(line + " ms");
    result_.tuning = candidates[win];
    return win;
  }

  Status TuneThreads() {
    const int32_t now = model_.threads();
    std::vector<int32_t> counts = o_.thread_candidates;
    if (counts.empty()) {
      const int32_t hw = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
      counts = {hw, hw - 1, hw / 2};
    }
    std::vector<CpuTuning> candidates{result_.tuning};
    candidates[0].threads = now;
    std::vector<std::string> labels{std::to_string(now)};
    for (int32_t t : counts) {
      if (t < 1 || t == now) continue;
      if (std::any_of(candidates.begin(), candidates.end(),
                      [&](const CpuTuning& c) { return c.threads == t; })) {
        continue;
      }
      candidates.push_back(result_.tuning);
      candidates.back().threads = t;
      labels.push_back(std::to_string(t));
    }
    if (candidates.size() < 2) return OkStatus();
    STREAMD_ASSIGN_OR_RETURN(StepTimer * one, workloads_.Get(1, 1));
    STREAMD_ASSIGN_OR_RETURN(StepTimer * sixteen, workloads_.Get(16, 1));
    const CpuTuning in_place = result_.tuning;
    const MachineLoad load;
    STREAMD_RETURN_IF_ERROR(Decide("threads", candidates, labels, {one, sixteen}).status());
    const double others = load.OthersShare();
    Record("CPU time other processes took while threads were timed", 100 * others, "%");
    if (others > o_.max_others_share && result_.tuning.threads != in_place.threads) {
      Say("threads: kept " + std::to_string(in_place.threads) + ": other processes took " +
          Fmt("%.0f", 100 * others) + "% of the CPU while they were timed");
      result_.tuning = in_place;
    }
    return OkStatus();
  }

  // Candidates that differ from the tuning in place in `field` alone, one per value.
  Status TuneField(const std::string& knob, int32_t CpuTuning::*field,
                   std::initializer_list<int32_t> values, const std::vector<StepTimer*>& timers) {
    std::vector<CpuTuning> candidates{result_.tuning};
    std::vector<std::string> labels{std::to_string(result_.tuning.*field)};
    for (int32_t v : values) {
      if (v == result_.tuning.*field) continue;
      candidates.push_back(result_.tuning);
      candidates.back().*field = v;
      labels.push_back(std::to_string(v));
    }
    return Decide(knob, candidates, labels, timers).status();
  }

  Status TuneAttentionGrouping() {
    STREAMD_ASSIGN_OR_RETURN(StepTimer * eight, workloads_.Get(8, 1));
    STREAMD_ASSIGN_OR_RETURN(StepTimer * sixteen, workloads_.Get(16, 1));
    STREAMD_ASSIGN_OR_RETURN(StepTimer * chunk, workloads_.Get(1, kPrefillProbeTokens));
    return TuneField("attention grouping factor", &CpuTuning::attention_batch_factor,
                     {1, 2, 4, 8, 16}, {eight, sixteen, chunk});
  }

  Status TuneAttentionPrefetch() {
    STREAMD_ASSIGN_OR_RETURN(StepTimer * one, workloads_.Get(1, 1));
    STREAMD_ASSIGN_OR_RETURN(StepTimer * sixteen, workloads_.Get(16, 1));
    return TuneField("attention prefetch blocks", &CpuTuning::attention_prefetch_runs,
                     {0, 1, 2, 3, 4, 6}, {one, sixteen});
  }

  // Token-parallel decode from 4, 8 or 16 sessions, or never (0), on decode steps of 4, 8 and
  // 16 sessions. It pays where a step is bound by arithmetic: no join per product, but every
  // thread streams all of the layers' weights. Only with more than one thread.
  Status TuneDecodeByTokens() {
    if (result_.tuning.threads < 2 && model_.threads() < 2) return OkStatus();
    STREAMD_ASSIGN_OR_RETURN(StepTimer * four, workloads_.Get(4, 1));
    STREAMD_ASSIGN_OR_RETURN(StepTimer * eight, workloads_.Get(8, 1));
    STREAMD_ASSIGN_OR_RETURN(StepTimer * sixteen, workloads_.Get(16, 1));
    return TuneField("decode token-parallel from", &CpuTuning::decode_by_tokens_from, {0, 4, 8, 16},
                     {four, eight, sixteen});
  }

  // One knob of the bucket's split at a time (items per thread, then the largest and the
  // smallest work item), each on the winner of the one before.
  Status TuneSplit(int b) {
    const int64_t probe = kBucketProbeTokens[static_cast<size_t>(b)];
    StatusOr<StepTimer*> timer =
        probe >= kPrefillProbeTokens ? workloads_.Get(1, probe) : workloads_.Get(probe, 1);
    if (!timer.ok()) return timer.status();
    const std::string knob = std::string("split ") + TokenBucketName(b) + " tokens";
    const auto try_values = [&](const char* field, const std::vector<int64_t>& values,
                                auto set) -> Status {
      std::vector<CpuTuning> candidates{result_.tuning};
      std::vector<std::string> labels{"in place"};
      for (int64_t v : values) {
        CpuTuning c = result_.tuning;
        set(c.split[static_cast<size_t>(b)], v);
        const RowSplit& s = c.split[static_cast<size_t>(b)];
        if (s == result_.tuning.split[static_cast<size_t>(b)] || s.min_rows > s.max_rows) continue;
        candidates.push_back(c);
        labels.push_back(std::to_string(v));
      }
      if (candidates.size() < 2) return OkStatus();
      return Decide(knob + " " + field, candidates, labels, {*timer}).status();
    };
    STREAMD_RETURN_IF_ERROR(
        try_values("items_per_thread", {1, 2, 3, 4},
                   [](RowSplit& s, int64_t v) { s.items_per_thread = static_cast<int32_t>(v); }));
    STREAMD_RETURN_IF_ERROR(try_values("max_rows", {384, 768, 1536, 3072},
                                       [](RowSplit& s, int64_t v) { s.max_rows = v; }));
    return try_values("min_rows", {48, 96, 192, 384},
                      [](RowSplit& s, int64_t v) { s.min_rows = v; });
  }

  // Stage 1: per distinct product shape and token bucket, every level this CPU runs (the
  // portable one aside: never the fastest where a vector level exists) and, where the active
  // level has the kernel, 8-bit activations; timed on the product alone through the model's own
  // split and threads.
  Status TuneIsaPerShape() {
    std::vector<Isa> levels;
    const Isa active = kernels::cpu::ActiveIsa();
    for (Isa isa : kernels::cpu::kAllIsas) {
      if (isa != Isa::kPortable && kernels::cpu::IsaSupported(isa) &&
          static_cast<int>(isa) < static_cast<int>(active)) {
        levels.push_back(isa);
      }
    }
    std::vector<const WeightMatrix*> shapes;
    for (const WeightMatrix* m : model_.ProductMatrices()) {
      const bool seen = std::any_of(shapes.begin(), shapes.end(), [&](const WeightMatrix* s) {
        return s->type == m->type && s->rows == m->rows && s->cols == m->cols;
      });
      if (!seen) shapes.push_back(m);
    }
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const WeightMatrix* w : shapes) {
      for (int b = 0; b < kTokenBuckets; ++b) {
        const int64_t n = kBucketProbeTokens[static_cast<size_t>(b)];
        std::vector<float> x(static_cast<size_t>(n * w->cols));
        for (float& v : x) v = normal(rng);
        std::vector<float> y(static_cast<size_t>(n * w->rows));
        std::vector<CpuTuning> candidates{result_.tuning};
        std::vector<std::string> labels{kernels::cpu::IsaName(active)};
        for (Isa isa : levels) {
          CpuTuning c = result_.tuning;
          c.isa.push_back({w->type, w->rows, w->cols, b, isa});
          candidates.push_back(std::move(c));
          labels.push_back(kernels::cpu::IsaName(isa));
        }
        if (kernels::cpu::FastInt8Activations(w->type)) {
          CpuTuning c = result_.tuning;
          c.isa.push_back({w->type, w->rows, w->cols, b, active, 8});
          candidates.push_back(std::move(c));
          labels.push_back(std::string(kernels::cpu::IsaName(active)) + " 8-bit");
        }
        if (candidates.size() < 2) continue;
        STREAMD_ASSIGN_OR_RETURN(std::vector<double> us,
                                 TimeProduct(*w, x.data(), n, y.data(), candidates));
        const size_t win = PickWinner(us, o_.min_gain);
        const std::string shape = std::to_string(w->rows) + "x" + std::to_string(w->cols) + " " +
                                  WeightTypeName(w->type) + ", " + std::to_string(n) +
                                  (n == 1 ? " token" : " tokens");
        std::string line = "level " + shape + ":";
        for (size_t c = 0; c < candidates.size(); ++c) {
          Record("product " + shape + ", " + labels[c], us[c], "us");
          line += " " + labels[c] + " " + Fmt("%.1f", us[c]) + (c == win ? "*" : "");
        }
        Say(line + " us");
        result_.tuning = candidates[win];
      }
    }
    return OkStatus();
  }

  // Microseconds per product for each candidate: medians of alternated rounds.
  StatusOr<std::vector<double>> TimeProduct(const WeightMatrix& w, const float* x, int64_t n,
                                            float* y, const std::vector<CpuTuning>& candidates) {
    STREAMD_RETURN_IF_ERROR(model_.ApplyTuning(candidates[0]));
    model_.RunProduct(w, x, n, y);  // warm
    const auto t0 = Clock::now();
    model_.RunProduct(w, x, n, y);
    const double once = std::chrono::duration<double>(Clock::now() - t0).count();
    const int64_t reps = std::clamp<int64_t>(
        static_cast<int64_t>(kProductSampleSeconds / std::max(once, 1e-7)), 1, 10000);
    const size_t nc = candidates.size();
    std::vector<std::vector<double>> samples(nc);
    for (int32_t r = 0; r < o_.rounds; ++r) {
      STREAMD_RETURN_IF_ERROR(CheckDeadline(o_.deadline));
      for (size_t k = 0; k < nc; ++k) {
        const size_t c = (k + static_cast<size_t>(r)) % nc;
        STREAMD_RETURN_IF_ERROR(model_.ApplyTuning(candidates[c]));
        model_.RunProduct(w, x, n, y);
        const auto s0 = Clock::now();
        for (int64_t i = 0; i < reps; ++i) model_.RunProduct(w, x, n, y);
        samples[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - s0).count() /
                             static_cast<double>(reps));
      }
    }
    std::vector<double> out;
    for (auto& s : samples) out.push_back(Median(std::move(s)));
    return out;
  }

  LlamaModel& model_;
  const CpuTunerOptions& o_;
  Workloads workloads_;
  CpuTuningResult result_;
};

}  // namespace

StatusOr<CpuTuningResult> TuneCpu(LlamaModel& model, const CpuTunerOptions& options) {
  STREAMD_RETURN_IF_ERROR(CheckOptions(options));
  Tuner tuner(model, options);
  return tuner.Run();
}

StatusOr<CpuTuningResult> RetuneAttention(LlamaModel& model, const CpuTunerOptions& options) {
  STREAMD_RETURN_IF_ERROR(CheckOptions(options));
  Tuner tuner(model, options);
  return tuner.RunAttention();
}

StatusOr<std::vector<PlanMeasurement>> CompareWithDefaults(LlamaModel& model,
                                                           const CpuTuning& tuned,
                                                           const CpuTunerOptions& options) {
  STREAMD_RETURN_IF_ERROR(CheckOptions(options));
  // What a daemon without a plan runs: the built-in defaults, with a K-quant file's matrices at
  // 8-bit activations where that is the default (k_quant_defaults.h).
  CpuTuning defaults = KQuantDefaultTuning(model.weights(), CpuTuning{});
  defaults.threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  // The defaults run on an f16 cache, as a daemon without a plan does; the tuned knobs on the
  // cache the model holds (the plan's: f16, or int8 with its scales).
  const KvShape tuned_cache = model.CacheShape();
  STREAMD_RETURN_IF_ERROR(model.SetInt8KvCache(nullptr));
  Workloads default_workloads(model, options);
  StatusOr<StepTimer*> one_default = default_workloads.Get(1, 1);
  StatusOr<StepTimer*> sixteen_default = default_workloads.Get(16, 1);
  STREAMD_RETURN_IF_ERROR(model.SetInt8KvCache(tuned_cache.int8_scales));  // before any return
  STREAMD_RETURN_IF_ERROR(one_default.status());
  STREAMD_RETURN_IF_ERROR(sixteen_default.status());
  Workloads tuned_workloads(model, options);
  STREAMD_ASSIGN_OR_RETURN(StepTimer * one, tuned_workloads.Get(1, 1));
  STREAMD_ASSIGN_OR_RETURN(StepTimer * sixteen, tuned_workloads.Get(16, 1));
  STREAMD_ASSIGN_OR_RETURN(
      Medians m,
      TimeCandidates(model, {defaults, tuned}, {{*one_default, *sixteen_default}, {one, sixteen}},
                     std::max(options.rounds, 7), std::max<int64_t>(options.steps_per_sample, 3),
                     options.deadline));
  std::vector<PlanMeasurement> out;
  const char* names[] = {"default", "tuned"};
  for (size_t c = 0; c < 2; ++c) {
    out.push_back({"decode step, 1 session, " + std::string(names[c]), m[c][0], "ms"});
    out.push_back({"decode step, 16 sessions, " + std::string(names[c]), m[c][1], "ms"});
  }
  for (size_t c = 0; c < 2; ++c) {
    out.push_back({"16 sessions over 1 session, decode throughput, " + std::string(names[c]),
                   16.0 * m[c][0] / m[c][1], "x"});
  }
  STREAMD_RETURN_IF_ERROR(model.ApplyTuning(tuned));
  return out;
}

}  // namespace streamd
