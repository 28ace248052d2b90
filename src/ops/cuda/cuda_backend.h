// The CUDA backend's factory (sm_90a kernels + cuBLASLt). Plain C++ with no CUDA types: code built
// without CUDA may call it too, and then gets a deepinfer::Error saying so.
#pragma once

#include <memory>

#include "ops/backend.h"

namespace deepinfer::ops {

struct CudaBackendOptions {
  int device = 0;
  // Every row's reduction order independent of the batch (no M-dependent split-K or library
  // GEMMs); the default follows DEEPINFER_BATCH_INVARIANT.
  bool batch_invariant = false;
  // Row count from which linear() hands quantised/bf16 GEMMs to cuBLASLt (after dequantising the
  // weight to bf16); 0 disables the library path. Ignored in batch-invariant mode.
  int cublas_min_rows = 128;
};

// The backend on CUDA device `device` (options from the environment).
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);

}  // namespace deepinfer::ops
