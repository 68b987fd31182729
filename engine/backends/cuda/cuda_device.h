// The GPU the CUDA backend runs on: presence, name, SMs and memory, for start-up checks and
// for error messages that name the device and the numbers.
#pragma once

#include <cstdint>
#include <string>

#include "engine/util/status.h"

namespace streamd::cuda {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;

  // "device 0 (NVIDIA H200, sm_90, 132 SMs, 140.4 GiB free of 141.0 GiB)"
  std::string Describe() const;
};

// Number of usable devices; UNAVAILABLE with the runtime's reason when there is no driver,
// no device, or the runtime cannot initialise.
StatusOr<int> CudaDeviceCount();
// Sets `index` current on this thread and reads its properties and free memory.
StatusOr<CudaDeviceInfo> QueryCudaDevice(int index);
std::string FormatBytes(int64_t bytes);  // "1.5 GiB"

}  // namespace streamd::cuda
