// Decode linears for bf16 weights (1..32 activation rows) on bf16 tensor cores, streaming the weight
// once at HBM speed: the lm head, the grouped output projection wo_a (all groups in one launch), the
// compressor and router projections. The bf16 activations are read in place (no staging launch).
// wo_a may also stay in its stored FP8 blocks (half the bytes): each code is widened to bf16 times its
// block scale in registers, which is exact, so the products and sums are those of the bf16 weight.
#include <algorithm>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/skinny_mma.cuh"

namespace deepinfer::ops::cuda {
namespace {

using skinny::kSkinnyWarps;
using skinny::load_stream16;
using skinny::resident_blocks;
using skinny::sum_splits_and_store;

// Streaming load of 8 bytes (an FP8 weight row's step).
__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// 8 e4m3 codes (K elements 0..7 of a lane's step) -> the 4 bf16x2 words a bf16 weight load would hold.
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8(uint2 codes, float scale) {
  return make_uint4(e4m3x2_to_bf16x2(codes.x & 0xffffu, scale), e4m3x2_to_bf16x2(codes.x >> 16, scale),
                    e4m3x2_to_bf16x2(codes.y & 0xffffu, scale), e4m3x2_to_bf16x2(codes.y >> 16, scale));
}

// J: groups of 8 activation rows per block (rows j*8 .. j*8+7 are the mma's N columns); U: 32-K steps
// whose loads a warp has in flight together. A block is kSkinnyWarps warps = (8 / splits) tiles of 16
// weight rows × `splits` K ranges (partials summed in split order by sum_splits_and_store). Tiles are
// numbered over all groups (group = tile / tiles per group). Per 32-K step, lane (g, tig) loads 16
// bytes (K elements tig*8 .. +7) of weight rows g and g+8 and of activation row g of each row group;
// words 0-1 feed one m16n8k16 and words 2-3 the next: A and B see the same K permutation. The f32
// accumulators are the mma's C operand, so a row's sum order depends on (N, K, splits) only.
// kFp8: FP8-block weights, 8 code bytes per row and step, widened to the bf16 words above.
template <int J, int U, bool kFp8>
__global__ void __launch_bounds__(kSkinnyWarps * 32) skinny_bf16_kernel(SkinnyBf16Args args) {
  enter_dependent_kernel();
  __shared__ float red[kSkinnyWarps][J * 4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int splits = args.splits;
  const int split = warp % splits;
  const std::int64_t tiles_per_group = (args.n + 15) / 16;
  const std::int64_t tile = static_cast<std::int64_t>(blockIdx.x) * (kSkinnyWarps / splits) + warp / splits;
  const bool tile_ok = tile < tiles_per_group * args.groups;
  const int grp = tile_ok ? static_cast<int>(tile / tiles_per_group) : 0;
  const std::int64_t n0 = tile_ok ? (tile % tiles_per_group) * 16 : 0;
  const std::int64_t ra = tile_ok ? n0 + g : args.n, rb = tile_ok ? n0 + g + 8 : args.n;
  const bool va = ra < args.n, vb = rb < args.n;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * 8 * J;
  const int mrows = static_cast<int>(min(static_cast<std::int64_t>(8 * J), args.x.rows - row0));
  const std::int64_t steps = args.k / 32;
  const std::int64_t per = (steps + splits - 1) / splits;
  const std::int64_t s_begin = split * per, s_end = min(steps, s_begin + per);

  // Loads are unconditional from clamped valid addresses; nothing loaded is used before the pass's
  // loads are all issued. Rows >= n and columns >= mrows compute values that are never stored.
  constexpr int kElemBytes = kFp8 ? 1 : 2;
  const auto* wbase = static_cast<const std::uint8_t*>(args.w[grp]);
  const std::uint8_t* pa = wbase + ((va ? ra : 0) * args.k + tig * 8) * kElemBytes;
  const std::uint8_t* pb = wbase + ((vb ? rb : 0) * args.k + tig * 8) * kElemBytes;
  // FP8: the 16-row tile lies in one block row of scales (block % 16 == 0); step s's scale is column
  // s * 32 / block of it.
  const std::uint8_t* scale_row = nullptr;
  if constexpr (kFp8)
    scale_row = static_cast<const std::uint8_t*>(args.w_scale[grp]) +
                (n0 / args.block) * args.scale_ld * (args.scale_f32 ? 4 : 1);
  const std::uint16_t* xp[J];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int c = j * 8 + g < mrows ? j * 8 + g : 0;
    xp[j] = static_cast<const std::uint16_t*>(args.x.base) + (row0 + c) * args.x.stride + grp * args.k + tig * 8;
  }
  float acc[J][4] = {};
  for (std::int64_t s0 = s_begin; s0 < s_end; s0 += U) {
    uint4 wa[U], wb[U];
    std::uint32_t sraw[kFp8 ? U : 1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t k0 = (s0 + u < s_end ? s0 + u : s0) * 32;
      if constexpr (kFp8) {
        const uint2 ca = load_stream8(pa + k0), cb = load_stream8(pb + k0);
        wa[u] = make_uint4(ca.x, ca.y, 0u, 0u);
        wb[u] = make_uint4(cb.x, cb.y, 0u, 0u);
        const std::int64_t col = k0 / args.block;
        sraw[u] = args.scale_f32 ? __float_as_uint(__ldg(reinterpret_cast<const float*>(scale_row) + col))
                                 : static_cast<std::uint32_t>(__ldg(scale_row + col));
      } else {
        wa[u] = load_stream16(pa + k0 * 2);
        wb[u] = load_stream16(pb + k0 * 2);
      }
    }
    // The activations (L1 / L2 hits) are loaded per step, after every weight load of the pass is in
    // flight: registers go to weight bytes in flight, not to activation copies.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (s0 + u >= s_end) break;
      const std::int64_t k0 = (s0 + u) * 32;
      uint4 xb[J];
#pragma unroll
      for (int j = 0; j < J; ++j) xb[j] = *reinterpret_cast<const uint4*>(xp[j] + k0);
      if constexpr (kFp8) {
        const float sc = args.scale_f32 ? __uint_as_float(sraw[u]) : ue8m0_to_f32(static_cast<std::uint8_t>(sraw[u]));
        wa[u] = e4m3x8_to_bf16x8(make_uint2(wa[u].x, wa[u].y), sc);
        wb[u] = e4m3x8_to_bf16x8(make_uint2(wb[u].x, wb[u].y), sc);
      }
      const std::uint32_t a0[4] = {wa[u].x, wb[u].x, wa[u].y, wb[u].y};
      const std::uint32_t a1[4] = {wa[u].z, wb[u].z, wa[u].w, wb[u].w};
#pragma unroll
      for (int j = 0; j < J; ++j) {
        if (j * 8 >= mrows) break;
        mma_m16n8k16_bf16(acc[j], a0, xb[j].x, xb[j].y);
        mma_m16n8k16_bf16(acc[j], a1, xb[j].z, xb[j].w);
      }
    }
  }
  SkinnyGemmArgs store;
  store.n = args.n;
  store.splits = splits;
  store.ldo = args.ldo;
  store.out_bf16 = args.out_bf16;
  void* out = args.out_bf16 ? static_cast<void*>(static_cast<std::uint16_t*>(args.out) + grp * args.n)
                            : static_cast<void*>(static_cast<float*>(args.out) + grp * args.n);
  sum_splits_and_store<J>(red, acc, store, out, row0, mrows, ra, rb, split == 0);
}

template <int J, int U>
void launch_bf16_config(SkinnyBf16Args args, cudaStream_t stream) {
  auto kernel = args.fp8 ? skinny_bf16_kernel<J, U, true> : skinny_bf16_kernel<J, U, false>;
  const std::int64_t tiles = (args.n + 15) / 16 * args.groups;
  const int tiles_per_block = kSkinnyWarps / args.splits;
  const dim3 grid(static_cast<unsigned>((tiles + tiles_per_block - 1) / tiles_per_block),
                  static_cast<unsigned>((args.x.rows + 8 * J - 1) / (8 * J)));
  launch_chained(kernel, grid, kSkinnyWarps * 32, 0, stream, args);
}

}  // namespace

int skinny_bf16_splits(std::int64_t n, std::int64_t k) {
  // Split K (inside a block) until one group's blocks fill the GPU a few times over, while every warp
  // keeps at least two passes of loads. From (N, K) only: a row's sum order never depends on M or on
  // how many groups share the launch.
  const std::int64_t resident = resident_blocks<skinny_bf16_kernel<1, 4, false>>();
  const std::int64_t tiles = (n + 15) / 16, steps = k / 32;
  int splits = 1;
  while (splits < kSkinnyWarps && steps >= 2 * 4 * 2 * splits &&
         (tiles + kSkinnyWarps / splits - 1) / (kSkinnyWarps / splits) < 8 * resident)
    splits *= 2;
  return splits;
}

void launch_skinny_bf16(const SkinnyBf16Args& args, int unroll, cudaStream_t stream) {
  if (args.x.rows <= 8) {
    // FP8 rows move half the bytes per step: twice the steps in flight by default.
    const bool deep = unroll >= 8 || (unroll <= 0 && args.fp8);
    deep ? launch_bf16_config<1, 8>(args, stream) : launch_bf16_config<1, 4>(args, stream);
  } else if (args.x.rows <= 16) {
    launch_bf16_config<2, 4>(args, stream);
  } else {
    unroll == 2 ? launch_bf16_config<4, 2>(args, stream) : launch_bf16_config<4, 4>(args, stream);
  }
}

}  // namespace deepinfer::ops::cuda
