#include "tools/bench_decode.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/build_plan/step_timer.h"
#include "tools/commands.h"

namespace streamd::tools {
namespace {

struct Row {
  int64_t sessions = 0;
  bool fits = true;
  std::string error;
  double step_ms_p50 = 0, step_ms_min = 0;
  double tokens_per_s = 0;
  double kv_bytes = 0, total_bytes = 0, gbps = 0, x_ideal = 0;
};

StatusOr<Row> RunOne(ModelBackend& model, const DecodeStepBenchOptions& o, int64_t n) {
  Row row;
  row.sessions = n;
  auto timer = StepTimer::Create(model, {n, 1, o.sinks, o.window});
  if (!timer.ok()) {
    if (timer.status().code() == StatusCode::kInvalidArgument) return timer.status();
    row.fits = false;  // the pool does not fit
    row.error = timer.status().message();
    return row;
  }
  STREAMD_RETURN_IF_ERROR((*timer)->Run(3).status());  // warm-up (CUDA graph capture)
  STREAMD_ASSIGN_OR_RETURN(std::vector<double> ms, (*timer)->Run(o.steps));
  row.step_ms_p50 = Median(ms);
  row.step_ms_min = *std::min_element(ms.begin(), ms.end());
  row.tokens_per_s = 1e3 * static_cast<double>(n) / row.step_ms_p50;
  row.kv_bytes = (*timer)->kv_bytes_per_step();
  row.total_bytes = (*timer)->bytes_per_step();
  row.gbps = row.total_bytes / (row.step_ms_p50 * 1e6);
  if (o.reference_gbps > 0)
    row.x_ideal = row.step_ms_p50 * 1e6 / (row.total_bytes / o.reference_gbps);
  return row;
}

}  // namespace

int RunDecodeStepBench(const DecodeStepBenchOptions& o) {
  auto loaded = LoadBenchModel(o.source, /*with_tokenizer=*/false);
  if (!loaded.ok())
    return Fail(loaded.status(), o.source.synthetic.empty() ? o.source.model_path : "");
  ModelBackend& model = *loaded->model;
  if (o.threads > 0) {
    model.set_threads(static_cast<int32_t>(o.threads));
  } else if (o.source.plan_path.empty()) {  // else the plan's thread count
    model.set_threads(static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
  }
  std::printf("decode step: model %s on %s; sinks %lld window %lld; median of %lld steps\n",
              loaded->name.c_str(), model.device_description().c_str(),
              static_cast<long long>(o.sinks), static_cast<long long>(o.window),
              static_cast<long long>(o.steps));
  std::printf("%8s %10s %10s %12s %10s %10s %9s %8s\n", "sessions", "step ms", "min ms", "tok/s",
              "weights GB", "KV GB", "GB/s", "x ideal");
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t n : o.sessions) {
    auto row = RunOne(model, o, n);
    if (!row.ok()) return Fail(row.status());
    if (!row->fits) {
      std::printf("%8lld  does not fit: %s\n", static_cast<long long>(n), row->error.c_str());
      rows.push_back({{"sessions", n}, {"fits", false}, {"error", row->error}});
      continue;
    }
    std::printf("%8lld %10.3f %10.3f %12.1f %10.3f %10.3f %9.1f %8.2f\n", static_cast<long long>(n),
                row->step_ms_p50, row->step_ms_min, row->tokens_per_s, model.weight_bytes() / 1e9,
                row->kv_bytes / 1e9, row->gbps, row->x_ideal);
    rows.push_back({{"sessions", n},
                    {"fits", true},
                    {"step_ms_p50", row->step_ms_p50},
                    {"step_ms_min", row->step_ms_min},
                    {"tokens_per_s", row->tokens_per_s},
                    {"weight_bytes", model.weight_bytes()},
                    {"kv_bytes", row->kv_bytes},
                    {"gbps", row->gbps},
                    {"x_ideal", row->x_ideal}});
  }
  if (o.json) {
    const nlohmann::json out = {{"model", loaded->name},
                                {"backend", std::string(model.backend_name())},
                                {"device", model.device_description()},
                                {"sinks", o.sinks},
                                {"window", o.window},
                                {"steps", o.steps},
                                {"reference_gbps", o.reference_gbps},
                                {"results", rows}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
