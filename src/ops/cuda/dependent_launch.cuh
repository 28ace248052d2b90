// Programmatic dependent launch (sm_90+): a kernel launched with launch_chained() may start while
// the previous kernel on its stream is still running; it must call grid_dependency_wait() before it
// touches anything that kernel writes (or anything that kernel still reads: write-after-read), and
// may do independent work first (a GEMM streaming its immutable weights). A primary kernel that
// calls allow_dependents_early() lets such a secondary start before its own blocks finish. Both
// instructions are no-ops when the launch carries no programmatic dependency.
//
// Every kernel of the backend is launched through launch_chained() and waits in every block before
// its first access to memory another kernel touches (most kernels: enter_dependent_kernel() as their
// first statement). That wait is what makes the chain safe: a kernel completes only after its wait,
// so "the previous kernel completed" implies every earlier kernel on the stream completed too.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents_early() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The first statement of a kernel launched with launch_chained(): wait for the stream's previous
// kernel (its writes visible), then let the next kernel's CTAs launch while this one runs, so a
// chain of small kernels pays each launch behind its predecessor's work rather than after it.
__device__ __forceinline__ void enter_dependent_kernel() {
  grid_dependency_wait();
  allow_dependents_early();
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the stream's previous
// kernel when dependent_launch_enabled() (CudaBackendOptions::dependent_launch; captured into CUDA
// graphs as a programmatic edge). Launch errors are reported by the caller's DI_CUDA_CHECK_LAUNCH
// (cudaGetLastError), as for <<<>>>.
template <typename... Params, typename... Args>
void launch_chained(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                    Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace deepinfer::ops::cuda
