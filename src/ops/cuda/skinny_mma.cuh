// Shared pieces of the skinny FP8 tensor-core GEMMs (dense: fp8_skinny_kernels.cu; grouped fp4
// experts: moe_fp4_kernels.cu; decode: skinny_bf16_kernels.cu, fp8_decode_kernels.cu): the m16n8k32
// e4m3 mma, the exact e2m1 -> e4m3 widening, streaming weight loads and block-scale reads, the K-split
// reduction at the end of a block, and the one-wave occupancy query. sm_89+ instructions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda::skinny {

constexpr int kSkinnyWarps = 8;

__device__ __forceinline__ void mma_e4m3(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t sel) {
  std::uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Four e2m1 nibbles (bits 0..15 of w) -> four e4m3 bytes, exactly: the magnitude through a byte
// table {0, 0.5, 1, 1.5, 2, 3, 4, 6}, the sign through prmt's sign-replicate mode (selector nibble 8
// replicates the msb of table byte 0 = 0x80 -> 0xff; nibble 0 copies 0x80), shifted into bit 7.
__device__ __forceinline__ std::uint32_t e2m1x4_to_e4m3x4(std::uint32_t w) {
  const std::uint32_t mag = prmt(0x3c383000u, 0x4c484440u, w & 0x7777u);
  const std::uint32_t rep = prmt(0x00000080u, 0u, w & 0x8888u);
  return mag | ((rep << 1) & 0x80808080u);
}

// Weight bytes are read once: 16 bytes that bypass L1, so the activations (re-read by every warp) stay.
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A weight block scale as loaded (f32 bits or the ue8m0 byte), and its value: split so a pass can
// issue every load before decoding any.
__device__ __forceinline__ std::uint32_t weight_scale_raw(const DevWeight& w, std::int64_t idx) {
  return w.scale_f32 ? __float_as_uint(__ldg(static_cast<const float*>(w.scale) + idx))
                     : static_cast<std::uint32_t>(__ldg(static_cast<const std::uint8_t*>(w.scale) + idx));
}
__device__ __forceinline__ float weight_scale_value(const DevWeight& w, std::uint32_t raw) {
  return w.scale_f32 ? __uint_as_float(raw) : ue8m0_to_f32(static_cast<std::uint8_t>(raw));
}

// The end of a skinny block: every warp parks its accumulators in `red`; the first split warp of each
// 16-row tile sums the tile's K-split partials in split order and writes the tile's outputs.
template <int J>
__device__ __forceinline__ void sum_splits_and_store(float (&red)[kSkinnyWarps][J * 4][32], const float (&acc)[J][4],
                                                     const SkinnyGemmArgs& args, void* out, std::int64_t row0,
                                                     int mrows, std::int64_t ra, std::int64_t rb, bool first_split) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tig = lane % 4;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[warp][j * 4 + e][lane] = acc[j][e];
  __syncthreads();
  if (!first_split) return;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = j * 8 + tig * 2 + (e & 1);
      const std::int64_t n = e < 2 ? ra : rb;
      if (col >= mrows || n >= args.n) continue;
      float total = 0.0f;
      for (int s2 = 0; s2 < args.splits; ++s2) total += red[warp + s2][j * 4 + e][lane];
      const std::int64_t row = row0 + col;
      if (args.out_bf16) {
        static_cast<std::uint16_t*>(out)[row * args.ldo + n] = f32_to_bf16_bits(total);
      } else {
        static_cast<float*>(out)[row * args.ldo + n] = total;
      }
    }
}

// Blocks of kSkinnyWarps warps of `Kernel` resident on the current device at once. Blocks per SM
// depend on the kernel's registers only (every device here is an sm_90 part).
template <auto Kernel>
inline std::int64_t resident_blocks() {
  static const int per_sm = [] {
    int n = 1;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, kSkinnyWarps * 32, 0);
    return n < 1 ? 1 : n;
  }();
  int device = 0, sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return static_cast<std::int64_t>(per_sm) * sms;
}

}  // namespace deepinfer::ops::cuda::skinny
