// cuda_device_info() for builds without the CUDA backend.
#include "tensor/device_info.h"

namespace deepinfer {

bool built_with_cuda() { return false; }

CudaDeviceInfo cuda_device_info() { return {0, "deepinfer was built without CUDA", "", 0}; }

}  // namespace deepinfer
