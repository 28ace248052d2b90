// Allocation accounting shared by the CUDA backend's allocators (internal to src/ops/cuda): every
// cudaMalloc / cudaFree of tensor or scratch memory is noted here, per device, so the memory
// planner can read the bytes the weights and a profiling forward took (cuda_allocation_stats).
#pragma once

#include <cstdint>

namespace deepinfer::ops::cuda {

// `bytes` > 0: allocated on `device`; < 0: freed.
void note_device_bytes(int device, std::int64_t bytes);

}  // namespace deepinfer::ops::cuda
