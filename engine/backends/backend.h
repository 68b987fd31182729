// Choosing and building a ModelBackend: the `backend: auto|cpu|cuda` setting of the daemon and
// `streamd bench --backend`. The CUDA backend exists only in builds with nvcc
// (STREAMD_HAVE_CUDA), as the loadable module libstreamd_cuda.so (cuda_plugin_api.h), so the
// binaries never need the CUDA libraries to start. Asking for cuda where it cannot run is a
// clear error naming the reason, never a silent fallback; auto falls back to the CPU and says
// why.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/synthetic_model.h"
#include "engine/model/model_backend.h"
#include "engine/util/status.h"

namespace streamd {

enum class BackendKind { kAuto, kCpu, kCuda };
std::string_view BackendKindName(BackendKind kind);  // "auto", "cpu", "cuda"
StatusOr<BackendKind> ParseBackendKind(std::string_view name);

// Whether this binary contains the CUDA backend.
bool CudaBackendBuilt();
// auto -> cuda when built with CUDA and a device is visible, else cpu; cpu and cuda stay.
// `why` (optional) gets a one-line reason for logs.
BackendKind ResolveBackend(BackendKind kind, std::string* why = nullptr);

// cpu: returns `model` itself; cuda: uploads its weights to the GPU (the host copy is then
// dropped). Errors name the device and the numbers (no GPU, weights that do not fit, ...).
StatusOr<std::unique_ptr<ModelBackend>> MakeBackend(BackendKind kind,
                                                    std::unique_ptr<LlamaModel> model);

// A random-weight model of `spec`'s shape: cpu builds the GGUF in memory
// (MakeSyntheticModel); cuda generates f16 weights on the device (an 8B shape never exists
// on the host). The two draw different random numbers: compare them only through the CPU
// model uploaded with MakeBackend.
StatusOr<std::unique_ptr<ModelBackend>> MakeSyntheticBackend(BackendKind kind,
                                                             const SyntheticModelSpec& spec);
// The LlamaConfig a synthetic GGUF of `spec` would load as.
LlamaConfig SyntheticConfig(const SyntheticModelSpec& spec);

}  // namespace streamd
