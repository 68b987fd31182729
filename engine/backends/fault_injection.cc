#include "engine/backends/fault_injection.h"

#include <charconv>
#include <string>

#include "engine/model/forwarding_backend.h"

namespace streamd {
namespace {

class FaultInjectingBackend final : public ForwardingBackend {
 public:
  FaultInjectingBackend(std::unique_ptr<ModelBackend> inner, int64_t steps)
      : ForwardingBackend(std::move(inner)), steps_left_(steps) {}

  std::string device_description() const override {
    return inner().device_description() + " (fault injected after " + std::to_string(steps_left_) +
           " more steps)";
  }
  Status Execute(const StepPlan& plan, float* logits) override {
    if (Status s = Step(); !s.ok()) return s;
    return inner().Execute(plan, logits);
  }
  Status ExecuteGreedy(const StepPlan& plan, int32_t* next_tokens) override {
    if (Status s = Step(); !s.ok()) return s;
    return inner().ExecuteGreedy(plan, next_tokens);
  }
  Status Health() const override { return broken_; }

 private:
  Status Step() {
    if (!broken_.ok()) return broken_;
    if (steps_left_-- > 0) return OkStatus();
    broken_ = InternalError(std::string(kInjectBackendFaultEnv) +
                            ": injected device fault (the backend is unusable from now on)");
    return broken_;
  }

  int64_t steps_left_;
  Status broken_;
};

}  // namespace

StatusOr<std::optional<int64_t>> ParseInjectedFault(std::string_view value) {
  if (value.empty()) return std::optional<int64_t>();
  constexpr std::string_view kPrefix = "after_steps:";
  int64_t n = -1;
  if (value.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = value.substr(kPrefix.size());
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec != std::errc() || end != digits.data() + digits.size()) n = -1;
  }
  if (n < 0) {
    return InvalidArgumentError(std::string(kInjectBackendFaultEnv) + " = \"" + std::string(value) +
                                "\": expected after_steps:N (N >= 0)");
  }
  return std::optional<int64_t>(n);
}

std::unique_ptr<ModelBackend> InjectFaultAfterSteps(std::unique_ptr<ModelBackend> inner,
                                                    int64_t steps) {
  return std::make_unique<FaultInjectingBackend>(std::move(inner), steps);
}

}  // namespace streamd
