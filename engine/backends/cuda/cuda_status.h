// Every CUDA runtime and cuBLAS call of the engine goes through these macros, which turn a
// failure into a Status naming the call, the error and the place (the engine never aborts on a
// device error; the failed step is reported to the sessions in it).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "engine/util/status.h"

namespace streamd::cuda {

Status CudaError(cudaError_t e, const char* call, const char* file, int line);
Status CublasError(cublasStatus_t e, const char* call, const char* file, int line);

// True for errors after which the context is unusable (every later call fails the same way):
// the process must be restarted (docs/CUDA.md, "Failure policy").
bool IsStickyCudaError(cudaError_t e);

}  // namespace streamd::cuda

#define STREAMD_CUDA_CHECK(call)                                                     \
  do {                                                                               \
    const cudaError_t streamd_cuda_e_ = (call);                                      \
    if (streamd_cuda_e_ != cudaSuccess) {                                            \
      return ::streamd::cuda::CudaError(streamd_cuda_e_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

#define STREAMD_CUBLAS_CHECK(call)                                                       \
  do {                                                                                   \
    const cublasStatus_t streamd_cublas_e_ = (call);                                     \
    if (streamd_cublas_e_ != CUBLAS_STATUS_SUCCESS) {                                    \
      return ::streamd::cuda::CublasError(streamd_cublas_e_, #call, __FILE__, __LINE__); \
    }                                                                                    \
  } while (0)
