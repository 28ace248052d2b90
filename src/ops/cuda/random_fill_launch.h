// Launcher of the dummy-weight fill kernel (internal to src/ops/cuda, CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/random_fill.h"

namespace deepinfer::ops::cuda {

// Fills `bytes` bytes at device pointer `out` with spec's values (floats: bytes / element size).
void launch_random_fill(void* out, std::int64_t bytes, const RandomFillSpec& spec, int sm_count, cudaStream_t stream);

}  // namespace deepinfer::ops::cuda
