#include "engine/backend/fault_injection.h"

#include <charconv>
#include <string>

namespace streamd {
namespace {

class FaultInjectingBackend final : public ModelBackend {
 public:
  FaultInjectingBackend(std::unique_ptr<ModelBackend> inner, int64_t steps)
      : inner_(std::move(inner)), steps_left_(steps) {}

  const LlamaConfig& config() const override { return inner_->config(); }
  std::string_view backend_name() const override { return inner_->backend_name(); }
  std::string device_description() const override {
    return inner_->device_description() + " (fault injected after " +
           std::to_string(steps_left_) + " more steps)";
  }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  void set_threads(int32_t n) override { inner_->set_threads(n); }
  void RunOnHostThreads(int64_t n, const std::function<void(int64_t)>& fn) override {
    inner_->RunOnHostThreads(n, fn);
  }
  StatusOr<std::unique_ptr<BlockPool>> CreatePool(const KvShape& shape, int32_t block_size,
                                                  int64_t budget_bytes) override {
    return inner_->CreatePool(shape, block_size, budget_bytes);
  }
  StatusOr<int64_t> PoolBudgetFromFraction(double fraction) const override {
    return inner_->PoolBudgetFromFraction(fraction);
  }
  Status Execute(const StepPlan& plan, float* logits) override {
    if (Status s = Step(); !s.ok()) return s;
    return inner_->Execute(plan, logits);
  }
  Status ExecuteGreedy(const StepPlan& plan, int32_t* next_tokens) override {
    if (Status s = Step(); !s.ok()) return s;
    return inner_->ExecuteGreedy(plan, next_tokens);
  }
  bool greedy_ids_on_device() const override { return inner_->greedy_ids_on_device(); }
  Status CopyGreedyStepLogits(int64_t row, float* out) override {
    return inner_->CopyGreedyStepLogits(row, out);
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

  std::unique_ptr<ModelBackend> inner_;
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
    return InvalidArgumentError(std::string(kInjectBackendFaultEnv) + " = \"" +
                                std::string(value) + "\": expected after_steps:N (N >= 0)");
  }
  return std::optional<int64_t>(n);
}

std::unique_ptr<ModelBackend> InjectFaultAfterSteps(std::unique_ptr<ModelBackend> inner,
                                                    int64_t steps) {
  return std::make_unique<FaultInjectingBackend>(std::move(inner), steps);
}

}  // namespace streamd
