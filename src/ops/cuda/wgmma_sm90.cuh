// Hopper warpgroup-MMA (sm_90a wgmma) building blocks shared by the wgmma kernels: the 128-byte
// swizzled K-major shared-memory layout and its matrix descriptor, and the async-proxy fences. Include
// only from kernel code compiled for sm_90a (see moe_prefill_wgmma.cu's __CUDA_ARCH_FEAT_SM90_ALL guard).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::ops::cuda::wgmma {

// Byte offset of 16-byte chunk c of row r in a 128-byte-swizzled tile (the pattern wgmma reads).
__device__ __forceinline__ std::uint32_t swizzled(int r, int c) {
  return static_cast<std::uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr) {
  return static_cast<std::uint64_t>((addr & 0x3ffffu) >> 4) | (std::uint64_t{16 >> 4} << 16) |
         (std::uint64_t{1024 >> 4} << 32) | (std::uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Generic-proxy shared-memory writes (st.shared, cp.async) made visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator registers across an in-flight wgmma.
__device__ __forceinline__ void fence_operands(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace deepinfer::ops::cuda::wgmma
