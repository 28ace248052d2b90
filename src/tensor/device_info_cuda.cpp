// cuda_device_info() through the CUDA runtime (compiled only in CUDA builds).
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "tensor/device_info.h"

namespace deepinfer {

bool built_with_cuda() { return true; }

CudaDeviceInfo cuda_device_info() {
  CudaDeviceInfo info;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    info.reason = fmt::format("no usable CUDA device ({})", cudaGetErrorString(status));
    return info;
  }
  if (count == 0) {
    info.reason = "no CUDA device present";
    return info;
  }
  info.count = count;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    info.name = prop.name;
    info.compute_capability = prop.major * 10 + prop.minor;
  }
  return info;
}

}  // namespace deepinfer
