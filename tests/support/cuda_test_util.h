// Helpers for the CUDA kernel tests: skip without a device (visibly, with the reason), checked
// device arrays that are poisoned before each run (0xff bytes: NaN for f32 and f16, -1 for
// ints) so a kernel that leaves an output unwritten fails, and relative-error measures.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace streamd::kernels::cuda::testing {

// Empty when a device is usable, else why not (the runtime's own words).
inline std::string NoDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "cudaGetDeviceCount reports 0 devices";
  return "";
}

#define STREAMD_SKIP_WITHOUT_CUDA_DEVICE()                                                   \
  do {                                                                                       \
    const std::string streamd_reason_ = ::streamd::kernels::cuda::testing::NoDeviceReason(); \
    if (!streamd_reason_.empty()) GTEST_SKIP() << "no CUDA device: " << streamd_reason_;     \
  } while (0)

#define ASSERT_CUDA_OK(expr)                                                               \
  do {                                                                                     \
    const cudaError_t streamd_e_ = (expr);                                                 \
    ASSERT_EQ(streamd_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(streamd_e_); \
  } while (0)

// A device array of T mirrored by a host vector.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)) !=
        cudaSuccess) {
      p_ = nullptr;
    }
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  bool ok() const { return p_ != nullptr; }
  cudaError_t Upload(const std::vector<T>& host) {
    return cudaMemcpy(p_, host.data(), std::min(host.size(), n_) * sizeof(T),
                      cudaMemcpyHostToDevice);
  }
  cudaError_t Poison() { return cudaMemset(p_, 0xff, n_ * sizeof(T)); }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::fill(host.begin(), host.end(), T{});
      ADD_FAILURE() << "device -> host copy failed: " << cudaGetErrorString(cudaGetLastError());
    }
    return host;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// max_i |a_i - b_i| / max(max_i |b_i|, tiny): error relative to the reference's scale, so
// values near zero do not dominate. NaN anywhere gives +inf.
inline double RelativeError(const std::vector<double>& got, const std::vector<double>& ref) {
  double scale = 1e-30, err = 0.0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - ref[i]));
  }
  return err / scale;
}

// Tolerances by the precision of the values compared (issue 6): f32 paths ~1e-5, paths that
// round through f16 ~1e-2 (f16 has an 11-bit significand: 4.9e-4 per rounding).
inline constexpr double kF32Tolerance = 1e-5;
inline constexpr double kF16Tolerance = 1e-2;

}  // namespace streamd::kernels::cuda::testing
