#include "engine/backends/backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "engine/backends/cuda_plugin_api.h"

namespace streamd {
namespace {

// Finds and loads libstreamd_cuda.so once: $STREAMD_CUDA_PLUGIN, then next to the running
// binary, then ../lib/streamd/ from it, then where this build put it.
const CudaPluginApi* LoadCudaPlugin(std::string* error) {
  static std::once_flag once;
  static const CudaPluginApi* api = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("STREAMD_CUDA_PLUGIN"); env != nullptr && *env != '\0') {
      candidates.push_back(env);
    }
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
      std::string dir(exe, static_cast<size_t>(len));
      dir = dir.substr(0, dir.rfind('/'));
      candidates.push_back(dir + "/libstreamd_cuda.so");
      candidates.push_back(dir + "/../lib/streamd/libstreamd_cuda.so");
    }
#if defined(STREAMD_CUDA_PLUGIN_BUILD_PATH)
    candidates.push_back(STREAMD_CUDA_PLUGIN_BUILD_PATH);
#endif
    std::string tried;
    for (const std::string& path : candidates) {
      if (access(path.c_str(), F_OK) != 0) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        failure = "cannot load the CUDA backend " + path + ": " + dlerror();
        return;
      }
      using Entry = const CudaPluginApi* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(handle, "streamd_cuda_plugin"));
      const CudaPluginApi* found = entry != nullptr ? entry() : nullptr;
      const CudaPluginApi expected;
      if (found == nullptr || found->abi != expected.abi ||
          found->sizeof_config != expected.sizeof_config ||
          found->sizeof_status != expected.sizeof_status) {
        failure = path + " is not a CUDA backend of this build of streamd";
        return;
      }
      api = found;
      return;
    }
    failure =
        "the CUDA backend library libstreamd_cuda.so is not installed (looked at " + tried + ")";
  });
  if (api == nullptr && error != nullptr) *error = failure;
  return api;
}

}  // namespace

std::string_view BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "?";
}

StatusOr<BackendKind> ParseBackendKind(std::string_view name) {
  for (BackendKind k : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda}) {
    if (name == BackendKindName(k)) return k;
  }
  return InvalidArgumentError("backend \"" + std::string(name) +
                              "\" is not one of auto, cpu, cuda");
}

bool CudaBackendBuilt() {
#if defined(STREAMD_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

BackendKind ResolveBackend(BackendKind kind, std::string* why) {
  if (kind != BackendKind::kAuto) return kind;
  if (!CudaBackendBuilt()) {
    if (why) *why = "auto: this build has no CUDA backend; using the CPU";
    return BackendKind::kCpu;
  }
  std::string error;
  const CudaPluginApi* api = LoadCudaPlugin(&error);
  if (api == nullptr) {
    if (why) *why = "auto: " + error + "; using the CPU";
    return BackendKind::kCpu;
  }
  auto count = api->device_count();
  if (count.ok()) {
    if (why) *why = "auto: " + std::to_string(*count) + " CUDA device(s) visible";
    return BackendKind::kCuda;
  }
  if (why) *why = "auto: " + count.status().message() + "; using the CPU";
  return BackendKind::kCpu;
}

namespace {

// The CUDA module, or the reason it cannot be used (FAILED_PRECONDITION: not built or not
// installed; the device itself is checked when a model is made).
StatusOr<const CudaPluginApi*> CudaPlugin() {
  if (!CudaBackendBuilt()) {
    return FailedPreconditionError(
        "backend cuda: this build has no CUDA backend (rebuild with nvcc and -DSTREAMD_CUDA=ON)");
  }
  std::string error;
  const CudaPluginApi* api = LoadCudaPlugin(&error);
  if (api == nullptr) return FailedPreconditionError("backend cuda: " + error);
  return api;
}

StatusOr<std::unique_ptr<ModelBackend>> Prefixed(StatusOr<std::unique_ptr<ModelBackend>> r) {
  if (r.ok()) return r;
  return Status(r.status().code(), "backend cuda: " + r.status().message());
}

}  // namespace

StatusOr<std::unique_ptr<ModelBackend>> MakeBackend(BackendKind kind,
                                                    std::unique_ptr<LlamaModel> model) {
  if (ResolveBackend(kind) == BackendKind::kCpu)
    return std::unique_ptr<ModelBackend>(std::move(model));
  // auto: a family the CUDA kernels do not run yet (qwen2, qwen3, gemma3) stays on the CPU; asking
  // for cuda by name gets the CUDA backend's error, which says so.
  if (kind == BackendKind::kAuto && !UsesPlainLlamaLayer(model->config())) {
    return std::unique_ptr<ModelBackend>(std::move(model));
  }
  STREAMD_ASSIGN_OR_RETURN(const CudaPluginApi* api, CudaPlugin());
  return Prefixed(api->from_cpu_model(*model));  // the host copy goes when `model` does
}

LlamaConfig SyntheticConfig(const SyntheticModelSpec& s) {
  LlamaConfig c;
  c.architecture = s.architecture;
  if (const ModelFamily* f = FindModelFamily(s.architecture)) c.family = *f;
  c.name = "synthetic";
  c.n_layers = s.n_layers;
  c.dim = s.dim;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads;
  c.ffn_dim = s.ffn_dim;
  c.vocab_size = s.vocab_size;
  c.context_length = s.context_length;
  c.rms_eps = 1e-5f;
  c.rope_base = s.rope_base;
  c.rope_dim = c.head_dim;
  c.tied_output = true;
  return c;
}

StatusOr<std::unique_ptr<ModelBackend>> MakeSyntheticBackend(BackendKind kind,
                                                             const SyntheticModelSpec& spec) {
  if (ResolveBackend(kind) == BackendKind::kCpu) {
    STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, MakeSyntheticModel(spec));
    return std::unique_ptr<ModelBackend>(std::move(model));
  }
  STREAMD_ASSIGN_OR_RETURN(const CudaPluginApi* api, CudaPlugin());
  return Prefixed(api->random(SyntheticConfig(spec), spec.seed));
}

}  // namespace streamd
