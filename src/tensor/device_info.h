// What accelerators this process can see. Plain C++: callable from code built without CUDA.
#pragma once

#include <string>

namespace deepinfer {

struct CudaDeviceInfo {
  int count = 0;            // visible CUDA devices (0 when none, or when built without CUDA)
  std::string reason;       // why count is 0, for skip messages ("built without CUDA", driver error)
  std::string name;         // device 0's name when count > 0
  int compute_capability = 0;  // e.g. 90 for sm_90
};

CudaDeviceInfo cuda_device_info();
bool built_with_cuda();

}  // namespace deepinfer
