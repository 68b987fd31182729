#include "engine/backends/cuda/cuda_status.h"

#include <cstring>

namespace streamd::cuda {
namespace {

std::string Where(const char* call, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(" in ") + call + " (" + (base ? base + 1 : file) + ":" + std::to_string(line) +
         ")";
}

}  // namespace

bool IsStickyCudaError(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

Status CudaError(cudaError_t e, const char* call, const char* file, int line) {
  const std::string what = std::string("CUDA error ") + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ")" + Where(call, file, line);
  if (e == cudaErrorMemoryAllocation) return ResourceExhaustedError(what);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
      e == cudaErrorDevicesUnavailable) {
    return UnavailableError(what);
  }
  return InternalError(what);
}

Status CublasError(cublasStatus_t e, const char* call, const char* file, int line) {
  const std::string what = std::string("cuBLAS error ") + cublasGetStatusName(e) + " (" +
                           cublasGetStatusString(e) + ")" + Where(call, file, line);
  if (e == CUBLAS_STATUS_ALLOC_FAILED) return ResourceExhaustedError(what);
  return InternalError(what);
}

}  // namespace streamd::cuda
