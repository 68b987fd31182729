// ForwardingBackend: a ModelBackend that passes every call to another one. Decorators (the
// fault injection of engine/backends, the tests' instrumented backends) derive from it and
// override only what they change.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "engine/model/model_backend.h"

namespace streamd {

class ForwardingBackend : public ModelBackend {
 public:
  explicit ForwardingBackend(std::unique_ptr<ModelBackend> inner) : inner_(std::move(inner)) {}

  const LlamaConfig& config() const override { return inner_->config(); }
  std::string_view backend_name() const override { return inner_->backend_name(); }
  std::string device_description() const override { return inner_->device_description(); }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  void set_threads(int32_t n) override { inner_->set_threads(n); }
  void RunOnHostThreads(int64_t n, const std::function<void(int64_t)>& fn) override {
    inner_->RunOnHostThreads(n, fn);
  }
  KvShape CacheShape() const override { return inner_->CacheShape(); }
  LayerSplit LocalLayerSplit() const override { return inner_->LocalLayerSplit(); }
  StatusOr<std::unique_ptr<BlockPool>> CreatePool(const KvShape& shape, int32_t block_size,
                                                  int64_t budget_bytes) override {
    return inner_->CreatePool(shape, block_size, budget_bytes);
  }
  StatusOr<int64_t> PoolBudgetFromFraction(double fraction) const override {
    return inner_->PoolBudgetFromFraction(fraction);
  }
  Status Execute(const StepPlan& plan, float* logits) override {
    return inner_->Execute(plan, logits);
  }
  Status ExecuteGreedy(const StepPlan& plan, int32_t* next_tokens) override {
    return inner_->ExecuteGreedy(plan, next_tokens);
  }
  bool greedy_ids_on_device() const override { return inner_->greedy_ids_on_device(); }
  Status CopyGreedyStepLogits(int64_t row, float* out) override {
    return inner_->CopyGreedyStepLogits(row, out);
  }
  Status Health() const override { return inner_->Health(); }

 protected:
  ModelBackend& inner() { return *inner_; }
  const ModelBackend& inner() const { return *inner_; }

 private:
  std::unique_ptr<ModelBackend> inner_;
};

}  // namespace streamd
