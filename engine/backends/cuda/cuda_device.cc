#include "engine/backends/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "engine/backends/cuda/cuda_status.h"

namespace streamd::cuda {

std::string FormatBytes(int64_t bytes) {
  char buf[64];
  if (bytes >= (1LL << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1LL << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1LL << 20));
  }
  return buf;
}

std::string CudaDeviceInfo::Describe() const {
  return "device " + std::to_string(index) + " (" + name + ", sm_" + std::to_string(cc_major) +
         std::to_string(cc_minor) + ", " + std::to_string(sm_count) + " SMs, " +
         FormatBytes(free_bytes) + " free of " + FormatBytes(total_bytes) + ")";
}

StatusOr<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError(std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" +
                            cudaGetErrorString(e) + ")");
  }
  if (n == 0) return UnavailableError("no usable CUDA device: cudaGetDeviceCount reports 0");
  return n;
}

StatusOr<CudaDeviceInfo> QueryCudaDevice(int index) {
  STREAMD_ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (index < 0 || index >= count) {
    return InvalidArgumentError("CUDA device " + std::to_string(index) + " does not exist (" +
                                std::to_string(count) + " visible)");
  }
  STREAMD_CUDA_CHECK(cudaSetDevice(index));
  cudaDeviceProp prop{};
  STREAMD_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  size_t free_bytes = 0, total_bytes = 0;
  STREAMD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  CudaDeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.total_bytes = static_cast<int64_t>(total_bytes);
  info.free_bytes = static_cast<int64_t>(free_bytes);
  return info;
}

}  // namespace streamd::cuda
