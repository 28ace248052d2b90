// Whether this build holds kernel code the current device can run: the arch-specific targets
// (sm_90a, sm_100a) carry no PTX for later GPUs, so a missing image must be caught before the first op.
#include <cuda_runtime.h>

#include "ops/cuda/device_arch.h"

namespace deepinfer::ops::cuda {
namespace {

__global__ void arch_probe_kernel() {}

}  // namespace

int probe_kernel_image() {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, arch_probe_kernel);
  if (status != cudaSuccess) cudaGetLastError();  // not sticky: clear it for later calls
  return static_cast<int>(status);
}

}  // namespace deepinfer::ops::cuda
