// The figures of a closed-loop load run (`streamd bench --sessions`), computed from each
// session's token event times. Plain math over seconds since the common start t0, so it is
// unit-tested without an engine or a clock. Definitions (also in `streamd bench --help`):
//   first_i, last_i        = session i's first and last token times
//   decode tokens          = sum_i (tokens_i - 1)             (every token after the first)
//   decode wall            = max_i last_i - min_i first_i      (the decode phase)
//   aggregate decode tok/s = decode tokens / decode wall
//   time to first token    = first_i, p50/p90/p99 over sessions
//   inter-token latency    = gaps between consecutive tokens of a session, over all gaps
//   per-session decode     = median_i (tokens_i - 1) / (last_i - first_i)
//   steady decode tok/s    = tokens with time in (max_i first_i, min_i last_i], over that
//                            window: every session is decoding, no prompt is being prefilled
//                            (0 when the window is empty). The aggregate figure above also
//                            spans the prefill of sessions that start decoding later.
// Percentiles are nearest-rank: the ceil(p/100 * n)-th smallest value.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/util/status.h"

namespace streamd::tools {

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

struct LoadMetrics {
  double decode_tokens = 0;
  double decode_wall_s = 0;
  double decode_tokens_per_s = 0;
  double total_wall_s = 0;         // max_i last_i
  double output_tokens_per_s = 0;  // sum_i tokens_i / total_wall_s
  double prompt_tokens_per_s = 0;  // prompt tokens / max_i first_i
  double session_decode_tokens_per_s_p50 = 0;
  double steady_decode_tokens = 0;
  double steady_decode_wall_s = 0;
  double steady_decode_tokens_per_s = 0;  // 0 when no window has every session decoding
  Percentiles ttft_ms, itl_ms;
};

// token_s[i]: session i's token times in seconds since t0, non-decreasing. Errors
// (INVALID_ARGUMENT): no sessions, a session with fewer than 2 tokens, or a decode phase of
// zero length.
StatusOr<LoadMetrics> ComputeLoadMetrics(const std::vector<std::vector<double>>& token_s,
                                         int64_t prompt_tokens_total);

// Every figure of m by its JSON name, in a fixed order (the benches add their own after these).
using NamedFigure = std::pair<const char*, double*>;
std::vector<NamedFigure> Figures(LoadMetrics& m);

// Nearest-rank percentile of a non-empty vector (any order).
double Percentile(std::vector<double> values, double p);
double Median(std::vector<double> values);  // 0 for an empty vector

// A run whose every figure is the median of that figure over runs; figures(run) lists a run's
// figures (std::vector<NamedFigure>) in the same order for every run.
template <class Run, class FiguresFn>
Run MedianOfRuns(std::vector<Run> runs, FiguresFn figures) {
  Run m{};
  auto out = figures(m);
  for (size_t k = 0; k < out.size(); ++k) {
    std::vector<double> values;
    for (Run& r : runs) values.push_back(*figures(r)[k].second);
    *out[k].second = Median(values);
  }
  return m;
}

}  // namespace streamd::tools
