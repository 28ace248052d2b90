// Pieces shared by the prefill expert GEMMs (moe_prefill_kernels.cu: mma.sync; moe_prefill_wgmma.cu:
// wgmma): the tile shape and the exact fp4 -> bf16 widening of a weight tile.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "ops/cuda/kernels.h"
#include "ops/cuda/skinny_mma.cuh"

namespace deepinfer::ops::cuda::prefill {

constexpr int kBM = kMoePrefillRows;  // rows per item
constexpr int kBN = 128;              // weight rows (output columns) per block
constexpr int kBK = 64;               // K per pipeline stage
constexpr int kStages = 3;
constexpr int kRawBytes = kBK / 2;    // fp4 bytes per weight row and stage
constexpr int kScaleSmem = kBN * (kMoePrefillMaxK / 32);  // a block's ue8m0 scales, loaded once

// 8 e2m1 nibbles (element j = bits 4j..4j+3) times a power-of-two scale -> 8 bf16 (exact): through
// the exact e4m3 widening, the hardware e4m3 -> f16 pair conversion and f32.
__device__ __forceinline__ uint4 fp4x8_to_bf16x8(std::uint32_t word, float scale) {
  const std::uint32_t q[2] = {skinny::e2m1x4_to_e4m3x4(word & 0xffffu), skinny::e2m1x4_to_e4m3x4(word >> 16)};
  std::uint32_t out[4];
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const auto pair = static_cast<__nv_fp8x2_storage_t>((q[p / 2] >> (16 * (p % 2))) & 0xffffu);
    const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&hr));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
    out[p] = *reinterpret_cast<const std::uint32_t*>(&b);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace deepinfer::ops::cuda::prefill
