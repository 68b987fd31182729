// The seam between the engine and the CUDA backend library (libstreamd_cuda.so).
//
// The CUDA backend is built as a loadable module, not linked into the binaries: `streamd`
// then starts on machines without the CUDA runtime or cuBLAS installed (a CPU host, a CPU
// container image), and only `backend: cuda|auto` looks for the module, next to the binary or
// at $STREAMD_CUDA_PLUGIN. The module and the binary come from the same build (same compiler,
// same headers), so C++ types cross the seam; kCudaPluginAbi and the struct sizes below catch
// a module from a different build.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/backends/cpu/llama_model.h"
#include "engine/model/model_backend.h"
#include "engine/util/status.h"

namespace streamd {

// 2: ModelBackend grew greedy_ids_on_device and CopyGreedyStepLogits (its vtable changed).
// 3: ModelBackend lost Forward, ForwardGreedy and its greedy rows (its layout changed).
inline constexpr int32_t kCudaPluginAbi = 3;

struct CudaPluginApi {
  int32_t abi = kCudaPluginAbi;
  uint32_t sizeof_config = sizeof(LlamaConfig);
  uint32_t sizeof_status = sizeof(Status);
  // Visible devices, or UNAVAILABLE with the runtime's reason.
  StatusOr<int> (*device_count)() = nullptr;
  // CudaModel::FromCpuModel / CudaModel::Random (engine/backends/cuda/cuda_model.h).
  StatusOr<std::unique_ptr<ModelBackend>> (*from_cpu_model)(const LlamaModel& model) = nullptr;
  StatusOr<std::unique_ptr<ModelBackend>> (*random)(const LlamaConfig& config,
                                                    uint64_t seed) = nullptr;
};

}  // namespace streamd

// The module's one exported symbol.
extern "C" const streamd::CudaPluginApi* streamd_cuda_plugin();
