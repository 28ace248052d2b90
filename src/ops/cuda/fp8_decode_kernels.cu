// Dense FP8 decode linears in one launch (fp8-block weights, FP8 act quant, 1..8 rows): each block
// quantises its activation rows into shared memory — the same e4m3 codes and power-of-two scales as
// launch_act_quant_codes — then streams its weight tiles through m16n8k32 e4m3 mma's exactly as the
// skinny GEMM does (same fragments, same per-32-K scaling), with only weight bytes held in registers.
#include <algorithm>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/skinny_mma.cuh"

namespace deepinfer::ops::cuda {
namespace {

using skinny::kSkinnyWarps;
using skinny::load_stream16;
using skinny::mma_e4m3;
using skinny::sum_splits_and_store;
using skinny::weight_scale_raw;
using skinny::weight_scale_value;

constexpr int kRows = kFp8DecodeMaxRows;
constexpr int kCodePad = 64;  // code rows K + 64 bytes apart: 16-byte reads of 8 rows hit distinct banks

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// Rows [row0, row0 + mrows) of x -> e4m3 codes [kRows][k + kCodePad] and scales [k / act_block][kRows]
// in shared memory. 8 consecutive elements per thread (one 16-byte load), the act_block / 8 threads
// of a block reduce the amax by shuffles; R chunks per thread are loaded before any is used.
__device__ __forceinline__ void quantise_rows(const Fp8DecodeArgs& args, std::int64_t row0, int mrows,
                                              std::uint8_t* codes, float* scales) {
  constexpr int R = 2;
  const std::int64_t ldc = args.k + kCodePad;
  const std::int64_t row_chunks = args.k / 8;
  const std::int64_t total = mrows * row_chunks;
  const int width = args.act_block / 8;  // 8 or 16 lanes, aligned groups inside the warp
  for (std::int64_t base = 0; base < total; base += static_cast<std::int64_t>(blockDim.x) * R) {
    uint4 raw[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::int64_t c = base + r * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
      const std::int64_t row = c < total ? c / row_chunks : 0, col = c < total ? (c % row_chunks) * 8 : 0;
      raw[r] = *reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(args.x.base) +
                                               (row0 + row) * args.x.stride + col);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::int64_t c = base + r * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
      const std::uint32_t words[4] = {raw[r].x, raw[r].y, raw[r].z, raw[r].w};
      float v[8];
      float amax = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[e] = __uint_as_float((e % 2) ? (words[e / 2] & 0xffff0000u) : (words[e / 2] << 16));
        amax = fmaxf(amax, fabsf(v[e]));
      }
      for (int o = width / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      if (c >= total) continue;
      const float s = fp8_block_scale(amax);
      const std::int64_t row = c / row_chunks, col = (c % row_chunks) * 8;
      std::uint32_t packed[2] = {0u, 0u};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const std::uint32_t code = f32_to_e4m3(fminf(fmaxf(v[e] / s, -kE4M3MaxF), kE4M3MaxF));
        packed[e / 4] |= code << (8 * (e % 4));
      }
      *reinterpret_cast<uint2*>(codes + row * ldc + col) = make_uint2(packed[0], packed[1]);
      if (col % args.act_block == 0) scales[(col / args.act_block) * kRows + row] = s;
    }
  }
}

// Q: 16-byte weight loads per row and pass (each spans two 32-K steps of the skinny layout: lane tig
// holds K elements tig*16 .. +15 of each 64-K chunk, bytes 0-7 for the first step, 8-15 the second).
// A block is kSkinnyWarps warps = (8 / splits) tiles of 16 weight rows × `splits` K ranges.
template <int Q>
__global__ void __launch_bounds__(kSkinnyWarps * 32, 2) fp8_decode_kernel(Fp8DecodeArgs args) {
  enter_dependent_kernel();
  extern __shared__ __align__(16) std::uint8_t smem[];
  __shared__ float red[kSkinnyWarps][4][32];
  const std::int64_t ldc = args.k + kCodePad;
  std::uint8_t* codes = smem;
  auto* xs = reinterpret_cast<float*>(smem + kRows * ldc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int splits = args.splits;
  const int split = warp % splits;
  const std::int64_t n0 = (static_cast<std::int64_t>(blockIdx.x) * (kSkinnyWarps / splits) + warp / splits) * 16;
  const std::int64_t ra = n0 + g, rb = n0 + g + 8;
  const bool va = ra < args.n, vb = rb < args.n;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * kRows;
  const int mrows = static_cast<int>(min(static_cast<std::int64_t>(kRows), args.x.rows - row0));
  const std::int64_t steps = args.k / 32;
  const std::int64_t per = ((steps + splits - 1) / splits + 1) / 2 * 2;  // even: a load spans two steps
  const std::int64_t s_begin = split * per, s_end = min(steps, s_begin + per);
  const auto* wdata = static_cast<const std::uint8_t*>(args.w.data);
  const std::uint8_t* pa = wdata + (va ? ra : 0) * args.k + tig * 16;
  const std::uint8_t* pb = wdata + (vb ? rb : 0) * args.k + tig * 16;
  // The first pass's weights head for L2 while the block quantises its activations.
#pragma unroll
  for (int q = 0; q < Q; ++q)
    if (s_begin + 2 * q < s_end) {
      prefetch_l2(pa + (s_begin + 2 * q) * 32);
      prefetch_l2(pb + (s_begin + 2 * q) * 32);
    }
  quantise_rows(args, row0, mrows, codes, xs);
  __syncthreads();

  const std::uint8_t* xrow = codes + (g < mrows ? g : 0) * ldc + tig * 16;
  const int c0 = tig * 2 < mrows ? tig * 2 : 0, c1 = tig * 2 + 1 < mrows ? tig * 2 + 1 : 0;
  // Rows g and g + 8 of a 16-row tile lie in one weight block (block % 64 == 0): one scale for both.
  const std::int64_t sr = va ? (ra / args.w.block) * args.w.scale_ld : 0;
  float acc[1][4] = {};
  // One 32-K step: the mma from zero, then its sum scaled by weight × activation block scale (the
  // skinny GEMM's per-step promotion, so both give the same bits for the same split).
  auto step = [&](const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1, float s, float x0, float x1) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_e4m3(c, a, b0, b1);
    acc[0][0] = fmaf(c[0], s * x0, acc[0][0]);
    acc[0][1] = fmaf(c[1], s * x1, acc[0][1]);
    acc[0][2] = fmaf(c[2], s * x0, acc[0][2]);
    acc[0][3] = fmaf(c[3], s * x1, acc[0][3]);
  };
  for (std::int64_t s0 = s_begin; s0 < s_end; s0 += 2 * Q) {
    uint4 wa[Q], wb[Q];
    std::uint32_t rs[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const std::int64_t k0 = (s0 + 2 * q < s_end ? s0 + 2 * q : s0) * 32;
      wa[q] = load_stream16(pa + k0);
      wb[q] = load_stream16(pb + k0);
      rs[q] = weight_scale_raw(args.w, sr + k0 / args.w.block);
    }
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      if (s0 + 2 * q >= s_end) break;
      const std::int64_t k0 = (s0 + 2 * q) * 32;
      const uint4 xv = *reinterpret_cast<const uint4*>(xrow + k0);
      const std::int64_t kb = k0 / args.act_block * kRows;
      const float x0 = xs[kb + c0], x1 = xs[kb + c1];
      const float sw = weight_scale_value(args.w, rs[q]);
      const std::uint32_t a0[4] = {wa[q].x, wb[q].x, wa[q].y, wb[q].y};
      const std::uint32_t a1[4] = {wa[q].z, wb[q].z, wa[q].w, wb[q].w};
      step(a0, xv.x, xv.y, sw, x0, x1);
      step(a1, xv.z, xv.w, sw, x0, x1);
    }
  }
  SkinnyGemmArgs store;
  store.n = args.n;
  store.splits = splits;
  store.ldo = args.ldo;
  store.out_bf16 = args.out_bf16;
  sum_splits_and_store<1>(red, acc, store, args.out, row0, mrows, ra, rb, split == 0);
}

template <int Q>
void launch_fp8_decode_config(Fp8DecodeArgs args, cudaStream_t stream) {
  auto kernel = fp8_decode_kernel<Q>;
  const int smem = static_cast<int>(fp8_decode_smem_bytes(args.k, args.act_block));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  // Split K per 16-row tile as far as one wave of blocks allows (as the skinny GEMM; each block
  // quantises its rows once, so a second wave would repeat that work).
  int per_sm = 1, device = 0, sms = 1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kSkinnyWarps * 32, smem);
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const std::int64_t resident = static_cast<std::int64_t>(std::max(per_sm, 1)) * sms;
  const std::int64_t tiles = (args.n + 15) / 16, steps = args.k / 32;
  const auto grid_y = static_cast<unsigned>((args.x.rows + kRows - 1) / kRows);
  auto blocks = [&](int s) { return (tiles + kSkinnyWarps / s - 1) / (kSkinnyWarps / s) * grid_y; };
  args.splits = 1;
  while (args.splits < kSkinnyWarps && blocks(args.splits * 2) <= resident && steps >= 4 * args.splits)
    args.splits *= 2;
  const int tiles_per_block = kSkinnyWarps / args.splits;
  const dim3 grid(static_cast<unsigned>((tiles + tiles_per_block - 1) / tiles_per_block), grid_y);
  launch_chained(kernel, grid, kSkinnyWarps * 32, smem, stream, args);
}

}  // namespace

std::size_t fp8_decode_smem_bytes(std::int64_t k, int act_block) {
  return static_cast<std::size_t>(kRows * (k + kCodePad) + (k / act_block) * kRows * 4);
}

void launch_fp8_decode(const Fp8DecodeArgs& args, int unroll, cudaStream_t stream) {
  if (unroll >= 8) {
    launch_fp8_decode_config<8>(args, stream);
  } else {
    launch_fp8_decode_config<4>(args, stream);
  }
}

}  // namespace deepinfer::ops::cuda
