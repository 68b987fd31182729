#include "tools/bench/load_metrics.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace streamd::tools {

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

std::vector<NamedFigure> Figures(LoadMetrics& m) {
  return {{"decode_tokens_per_s", &m.decode_tokens_per_s},
          {"steady_decode_tokens_per_s", &m.steady_decode_tokens_per_s},
          {"decode_tokens", &m.decode_tokens},
          {"decode_wall_s", &m.decode_wall_s},
          {"session_decode_tokens_per_s_p50", &m.session_decode_tokens_per_s_p50},
          {"output_tokens_per_s", &m.output_tokens_per_s},
          {"prompt_tokens_per_s", &m.prompt_tokens_per_s},
          {"total_wall_s", &m.total_wall_s},
          {"ttft_ms_p50", &m.ttft_ms.p50},
          {"ttft_ms_p90", &m.ttft_ms.p90},
          {"ttft_ms_p99", &m.ttft_ms.p99},
          {"itl_ms_p50", &m.itl_ms.p50},
          {"itl_ms_p90", &m.itl_ms.p90},
          {"itl_ms_p99", &m.itl_ms.p99}};
}

StatusOr<LoadMetrics> ComputeLoadMetrics(const std::vector<std::vector<double>>& token_s,
                                         int64_t prompt_tokens_total) {
  if (token_s.empty()) return InvalidArgumentError("load metrics: no sessions");
  LoadMetrics m;
  std::vector<double> ttft, itl, session_rate;
  double first_min = token_s[0].empty() ? 0.0 : token_s[0].front();
  double first_max = first_min, last_max = first_min, tokens = 0;
  for (size_t i = 0; i < token_s.size(); ++i) {
    const std::vector<double>& t = token_s[i];
    if (t.size() < 2) {
      return InvalidArgumentError("load metrics: session " + std::to_string(i) + " has " +
                                  std::to_string(t.size()) + " tokens; at least 2 are needed");
    }
    first_min = std::min(first_min, t.front());
    first_max = std::max(first_max, t.front());
    last_max = std::max(last_max, t.back());
    ttft.push_back(1e3 * t.front());
    for (size_t k = 1; k < t.size(); ++k) itl.push_back(1e3 * (t[k] - t[k - 1]));
    const double n_after_first = static_cast<double>(t.size() - 1);
    if (t.back() > t.front()) session_rate.push_back(n_after_first / (t.back() - t.front()));
    m.decode_tokens += n_after_first;
    tokens += static_cast<double>(t.size());
  }
  m.decode_wall_s = last_max - first_min;
  if (!(m.decode_wall_s > 0)) {
    return InvalidArgumentError("load metrics: the decode phase has no duration");
  }
  m.decode_tokens_per_s = m.decode_tokens / m.decode_wall_s;
  m.total_wall_s = last_max;
  m.output_tokens_per_s = last_max > 0 ? tokens / last_max : 0.0;
  m.prompt_tokens_per_s =
      first_max > 0 ? static_cast<double>(prompt_tokens_total) / first_max : 0.0;
  m.session_decode_tokens_per_s_p50 = Median(session_rate);
  double last_min = token_s[0].back();
  for (const std::vector<double>& t : token_s) last_min = std::min(last_min, t.back());
  if (last_min > first_max) {
    m.steady_decode_wall_s = last_min - first_max;
    for (const std::vector<double>& t : token_s) {
      m.steady_decode_tokens +=
          static_cast<double>(std::upper_bound(t.begin(), t.end(), last_min) -
                              std::upper_bound(t.begin(), t.end(), first_max));
    }
    m.steady_decode_tokens_per_s = m.steady_decode_tokens / m.steady_decode_wall_s;
  }
  m.ttft_ms = {Percentile(ttft, 50), Percentile(ttft, 90), Percentile(ttft, 99)};
  m.itl_ms = {Percentile(itl, 50), Percentile(itl, 90), Percentile(itl, 99)};
  return m;
}

}  // namespace streamd::tools
