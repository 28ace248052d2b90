// Checking macros for every CUDA runtime and cuBLASLt call: a failure throws deepinfer::Error
// naming the call, the error and file:line. Internal to src/ops/cuda (CUDA builds only).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "common/error.h"

namespace deepinfer::ops::cuda {

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    throw_error("CUDA error {} ({}) in `{}` at {}:{}", cudaGetErrorName(status), cudaGetErrorString(status), call,
                file, line);
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw_error("cuBLASLt error {} in `{}` at {}:{}", cublasLtGetStatusName(status), call, file, line);
}

}  // namespace deepinfer::ops::cuda

#define DI_CUDA_CHECK(call) ::deepinfer::ops::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define DI_CUBLAS_CHECK(call) ::deepinfer::ops::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a launch wrapper: reports launch-configuration errors (the kernels' own faults go
// through the device error word).
#define DI_CUDA_CHECK_LAUNCH(what) \
  ::deepinfer::ops::cuda::check_cuda(cudaGetLastError(), what, __FILE__, __LINE__)
