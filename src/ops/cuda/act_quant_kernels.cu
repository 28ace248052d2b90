// Activation preparation for the linear kernels: the act quant (FP8 e4m3 codes + power-of-two block
// scales, optionally K-permuted for the wgmma GEMMs, or the fake-quantised values as bf16 / f32) and the
// bf16 / f32 staging copy zero-filled to the GEMM's padded K.
#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

// One block per row: optional FP8 fake quant per `block` elements along K (one warp per block),
// stored as OutT into out[row * ld + i], zero-filled to ld.
template <typename OutT>
__global__ void act_prep_kernel(DevRows x, int block, OutT* out, std::int64_t ld) {
  enter_dependent_kernel();
  const std::int64_t r = blockIdx.x;
  const std::int64_t k = x.width;
  OutT* dst = out + r * ld;
  auto put = [&](std::int64_t i, float v) {
    if constexpr (sizeof(OutT) == 2) {
      dst[i] = f32_to_bf16_bits(v);
    } else {
      dst[i] = v;
    }
  };
  if (block <= 0) {
    for (std::int64_t i = threadIdx.x; i < k; i += blockDim.x) put(i, load_elem(x, r, i));
  } else {
    const int lane = threadIdx.x % 32;
    const int warps = blockDim.x / 32;
    for (std::int64_t b0 = (threadIdx.x / 32) * static_cast<std::int64_t>(block); b0 < k;
         b0 += static_cast<std::int64_t>(warps) * block) {
      const std::int64_t b1 = min(b0 + block, k);
      float amax = 0.0f;
      for (std::int64_t i = b0 + lane; i < b1; i += 32) amax = fmaxf(amax, fabsf(load_elem(x, r, i)));
      const float s = fp8_block_scale(warp_max(amax));
      for (std::int64_t i = b0 + lane; i < b1; i += 32) put(i, fake_fp8(load_elem(x, r, i), s));
    }
  }
  for (std::int64_t i = k + threadIdx.x; i < ld; i += blockDim.x) put(i, 0.0f);
}

// Act quant with one warp per block of 32·E elements (E per lane, loaded together, so a row costs one
// memory round trip instead of one per block and element): MODE 0 writes e4m3 codes (uint8) and the
// f32 scales (block-major: scales[b * scale_ld + row]); MODE 3 the codes K-permuted within 32-column
// blocks (launch_act_quant_codes' k_permuted); MODE 1 / 2 write the fake-quantised values as
// bf16 / f32. Grid: (rows, ceil(blocks / 8)); [width, ld) is zero filled.
template <int E, int MODE>
__global__ void act_quant_warp_kernel(DevRows x, int nblocks, void* out, std::int64_t ld, float* scales,
                                      std::int64_t scale_ld) {
  // A GEMM launched as this kernel's dependent (fp8_wgmma_decode.cu) may start streaming its weights
  // now; it waits for this grid's completion before it reads the codes.
  enter_dependent_kernel();
  const std::int64_t r = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = static_cast<int>(blockIdx.y) * 8 + warp;
  const std::int64_t k = x.width;
  auto put = [&](std::int64_t i, float v, float s) {
    if constexpr (MODE == 0 || MODE == 3) {
      const std::int64_t at = MODE == 3 ? k_permuted_col(i) : i;
      static_cast<std::uint8_t*>(out)[r * ld + at] = s > 0.0f ? f32_to_e4m3(fminf(fmaxf(v / s, -kE4M3MaxF), kE4M3MaxF)) : 0;
    } else if constexpr (MODE == 1) {
      static_cast<std::uint16_t*>(out)[r * ld + i] = f32_to_bf16_bits(s > 0.0f ? fake_fp8(v, s) : 0.0f);
    } else {
      static_cast<float*>(out)[r * ld + i] = s > 0.0f ? fake_fp8(v, s) : 0.0f;
    }
  };
  if (b < nblocks) {
    const std::int64_t i0 = static_cast<std::int64_t>(b) * 32 * E + lane * E;
    float v[E];
    float amax = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      v[e] = i0 + e < k ? load_elem(x, r, i0 + e) : 0.0f;
      amax = fmaxf(amax, fabsf(v[e]));
    }
    const float s = fp8_block_scale(warp_max(amax));
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (i0 + e < k) put(i0 + e, v[e], s);
    if ((MODE == 0 || MODE == 3) && lane == 0) scales[b * scale_ld + r] = s;
  }
  if (blockIdx.y == 0)
    for (std::int64_t i = k + threadIdx.x; i < ld; i += blockDim.x) put(i, 0.0f, 0.0f);
}

// No act quant: bf16/f32 staging of x, 4 elements per thread loaded before any is stored.
// Grid: (rows, ceil(ld / 1024)).
template <typename OutT>
__global__ void act_copy_kernel(DevRows x, OutT* out, std::int64_t ld) {
  enter_dependent_kernel();
  const std::int64_t r = blockIdx.x;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * 1024 + threadIdx.x;
  float v[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const std::int64_t i = i0 + e * 256;
    v[e] = i < x.width ? load_elem(x, r, i) : 0.0f;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const std::int64_t i = i0 + e * 256;
    if (i >= ld) continue;
    if constexpr (sizeof(OutT) == 2) {
      out[r * ld + i] = f32_to_bf16_bits(v[e]);
    } else {
      out[r * ld + i] = v[e];
    }
  }
}

template <int MODE>
void launch_act_quant_mode(const DevRows& x, int block, void* out, std::int64_t ld, float* scales,
                           std::int64_t scale_ld, cudaStream_t stream) {
  const int nblocks = static_cast<int>((x.width + block - 1) / block);
  const dim3 grid(static_cast<unsigned>(x.rows), static_cast<unsigned>((nblocks + 7) / 8));
  switch (block / 32) {
    case 1:
      launch_chained(act_quant_warp_kernel<1, MODE>, grid, 256, 0, stream, x, nblocks, out, ld, scales, scale_ld);
      break;
    case 2:
      launch_chained(act_quant_warp_kernel<2, MODE>, grid, 256, 0, stream, x, nblocks, out, ld, scales, scale_ld);
      break;
    case 3:
      launch_chained(act_quant_warp_kernel<3, MODE>, grid, 256, 0, stream, x, nblocks, out, ld, scales, scale_ld);
      break;
    default:
      launch_chained(act_quant_warp_kernel<4, MODE>, grid, 256, 0, stream, x, nblocks, out, ld, scales, scale_ld);
      break;
  }
}

// Blocks the warp kernel handles: multiples of 32 up to 128 (every act block the models use).
bool warp_quant_block(int block) { return block > 0 && block % 32 == 0 && block <= 128; }

}  // namespace

void launch_act_prep_bf16(const DevRows& x, int act_block, std::uint16_t* out, std::int64_t ld, cudaStream_t stream) {
  if (x.rows == 0) return;
  if (warp_quant_block(act_block)) {
    launch_act_quant_mode<1>(x, act_block, out, ld, nullptr, 0, stream);
  } else if (act_block <= 0) {
    const dim3 grid(static_cast<unsigned>(x.rows), static_cast<unsigned>((ld + 1023) / 1024));
    launch_chained(act_copy_kernel<std::uint16_t>, grid, 256, 0, stream, x, out, ld);
  } else {
    launch_chained(act_prep_kernel<std::uint16_t>, static_cast<unsigned>(x.rows), 256, 0, stream, x, act_block, out,
                   ld);
  }
}

void launch_act_prep_f32(const DevRows& x, int act_block, float* out, std::int64_t ld, cudaStream_t stream) {
  if (x.rows == 0) return;
  if (warp_quant_block(act_block)) {
    launch_act_quant_mode<2>(x, act_block, out, ld, nullptr, 0, stream);
  } else if (act_block <= 0) {
    const dim3 grid(static_cast<unsigned>(x.rows), static_cast<unsigned>((ld + 1023) / 1024));
    launch_chained(act_copy_kernel<float>, grid, 256, 0, stream, x, out, ld);
  } else {
    launch_chained(act_prep_kernel<float>, static_cast<unsigned>(x.rows), 256, 0, stream, x, act_block, out, ld);
  }
}

void launch_act_quant_codes(const DevRows& x, int block, std::uint8_t* codes, std::int64_t ld, float* scales,
                            std::int64_t scale_ld, cudaStream_t stream, bool k_permuted) {
  if (x.rows == 0) return;
  if (k_permuted) {
    launch_act_quant_mode<3>(x, block, codes, ld, scales, scale_ld, stream);
  } else {
    launch_act_quant_mode<0>(x, block, codes, ld, scales, scale_ld, stream);
  }
}

}  // namespace deepinfer::ops::cuda
