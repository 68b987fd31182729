// The CUDA backend's entry point as a loadable module (see engine/backends/cuda_plugin_api.h).
#include "engine/backends/cuda/cuda_device.h"
#include "engine/backends/cuda/cuda_model.h"
#include "engine/backends/cuda_plugin_api.h"

namespace streamd::cuda {
namespace {

StatusOr<std::unique_ptr<ModelBackend>> FromCpuModel(const LlamaModel& model) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> m, CudaModel::FromCpuModel(model));
  return std::unique_ptr<ModelBackend>(std::move(m));
}

StatusOr<std::unique_ptr<ModelBackend>> Random(const LlamaConfig& config, uint64_t seed) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> m, CudaModel::Random(config, seed));
  return std::unique_ptr<ModelBackend>(std::move(m));
}

}  // namespace
}  // namespace streamd::cuda

extern "C" __attribute__((visibility("default"))) const streamd::CudaPluginApi*
streamd_cuda_plugin() {
  static const streamd::CudaPluginApi api = [] {
    streamd::CudaPluginApi a;
    a.device_count = &streamd::cuda::CudaDeviceCount;
    a.from_cpu_model = &streamd::cuda::FromCpuModel;
    a.random = &streamd::cuda::Random;
    return a;
  }();
  return &api;
}
