// RAII owner of one cudaMalloc allocation. Move-only; freeing happens in the destructor (a
// failing cudaFree at teardown has nobody to report to and is ignored).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "engine/backends/cuda/cuda_device.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/util/status.h"

namespace streamd::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = o.bytes_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Allocates `bytes` (contents undefined); `what` names the buffer in the error, which also
  // gives the device's free memory.
  Status Allocate(size_t bytes, const std::string& what) {
    Reset();
    const cudaError_t e = cudaMalloc(&p_, bytes > 0 ? bytes : 1);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // an allocation failure is not sticky
      p_ = nullptr;
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      return ResourceExhaustedError(
          what + ": cannot allocate " + FormatBytes(static_cast<int64_t>(bytes)) +
          " of device memory (" + FormatBytes(static_cast<int64_t>(free_b)) + " free of " +
          FormatBytes(static_cast<int64_t>(total_b)) + "): " + cudaGetErrorString(e));
    }
    bytes_ = bytes;
    return OkStatus();
  }
  void Reset() {
    if (p_ != nullptr) (void)cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }

  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace streamd::cuda
