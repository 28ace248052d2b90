// Grouped fp4 GEMM for the routed experts (launch_skinny_fp4_wide): the expert weights stay fp4 in
// HBM and are widened to e4m3 in registers for the m16n8k32 FP8 mma (Hopper has no fp4 MMA).

#include <cuda_fp8.h>

#include <algorithm>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/skinny_mma.cuh"

namespace deepinfer::ops::cuda {
namespace {

using skinny::e2m1x4_to_e4m3x4;
using skinny::kSkinnyWarps;
using skinny::mma_e4m3;
using skinny::resident_blocks;
using skinny::sum_splits_and_store;

// ---- grouped fp4 GEMM with 16-byte weight loads ------------------------------------------------------
// The kernel above loads 4 bytes of fp4 per lane and step (a quad must hold one 32-K scale block), so
// a warp has ~2 KB in flight and the grouped expert GEMMs stream at ~1 TB/s. Here each lane loads 16
// bytes (a whole 32-K block) of rows g and g+8 per 128-K chunk; the quad's four blocks are turned
// into the four steps' fragments through a per-warp shared-memory transpose (store 16 bytes, read
// back word `tig` of each block), so every mma still sees one weight scale and the A / B K
// permutation of the kernel above (bit-identical partial sums per 32-K step). Work units
// {item, weight set, 16·(8 / splits) rows} are walked by a grid of one wave (grid-stride, active
// items first), so every SM streams whatever the number of touched experts.
constexpr int kWideRowBytes = 80;  // transpose slot per row: 20 words, conflict-free word reads

template <int J, int Q>
__global__ void __launch_bounds__(kSkinnyWarps * 32, 2) skinny_fp4_wide_kernel(SkinnyGemmArgs args, int grid_z,
                                                                               std::int64_t tile_blocks) {
  enter_dependent_kernel();
  __shared__ __align__(16) std::uint8_t stage[kSkinnyWarps][Q][2][8 * kWideRowBytes];
  __shared__ float red[kSkinnyWarps][J * 4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int splits = args.splits;
  const int split = warp % splits;
  const std::int64_t chunks = args.k / 128;
  const std::int64_t per = (chunks + splits - 1) / splits;
  const std::int64_t c_begin = split * per, c_end = min(chunks, c_begin + per);
  const std::int64_t row_bytes = args.k / 2;
  const std::int64_t active = static_cast<std::int64_t>(*args.item_count) * grid_z * tile_blocks;
  for (std::int64_t v = blockIdx.x; v < active; v += gridDim.x) {
    const std::int64_t tb = v % tile_blocks;
    const int z = static_cast<int>(v / tile_blocks % grid_z);
    const int4 item = args.items[v / tile_blocks / grid_z];
    const DevWeight w = args.tables[z][item.x];
    const std::int64_t row0 = item.y;
    const int mrows = item.z;
    const std::int64_t n0 = (tb * (kSkinnyWarps / splits) + warp / splits) * 16;
    const std::int64_t ra = n0 + g, rb = n0 + g + 8;
    const bool va = ra < args.n, vb = rb < args.n;
    auto act_row = [&](int c) -> std::int64_t {
      if (c >= mrows) c = 0;
      return args.x_rows ? args.x_rows[row0 + c] : row0 + c;
    };
    const std::uint8_t* xp[J];
    const float* xsp[J][2];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      xp[j] = args.x + act_row(j * 8 + g) * args.ldx + tig * 8;
#pragma unroll
      for (int e = 0; e < 2; ++e) xsp[j][e] = args.xs + act_row(j * 8 + tig * 2 + e);
    }
    const auto* pa = static_cast<const std::uint8_t*>(w.data) + (va ? ra : 0) * row_bytes + tig * 16;
    const auto* pb = static_cast<const std::uint8_t*>(w.data) + (vb ? rb : 0) * row_bytes + tig * 16;
    // ue8m0 scales [n][k / 32]: the four of a 128-K chunk are one aligned word.
    const auto* sa_p = reinterpret_cast<const std::uint32_t*>(static_cast<const std::uint8_t*>(w.scale) +
                                                              (va ? ra : 0) * w.scale_ld);
    const auto* sb_p = reinterpret_cast<const std::uint32_t*>(static_cast<const std::uint8_t*>(w.scale) +
                                                              (vb ? rb : 0) * w.scale_ld);
    float acc[J][4] = {};
    for (std::int64_t c0 = c_begin; c0 < c_end; c0 += Q) {
      uint4 wa[Q], wb[Q];
      std::uint32_t rsa[Q], rsb[Q];
      uint2 xb[Q][4][J];
      float xsv[Q][J][2];
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        const std::int64_t c = c0 + q < c_end ? c0 + q : c0;
        wa[q] = __ldg(reinterpret_cast<const uint4*>(pa + c * 64));
        wb[q] = __ldg(reinterpret_cast<const uint4*>(pb + c * 64));
        rsa[q] = __ldg(sa_p + c);
        rsb[q] = __ldg(sb_p + c);
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int j = 0; j < J; ++j) xb[q][s][j] = *reinterpret_cast<const uint2*>(xp[j] + c * 128 + s * 32);
        const std::int64_t xs_off = c * 128 / args.act_block * args.xs_ld;
#pragma unroll
        for (int j = 0; j < J; ++j) {
          xsv[q][j][0] = xsp[j][0][xs_off];
          xsv[q][j][1] = xsp[j][1][xs_off];
        }
      }
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        *reinterpret_cast<uint4*>(&stage[warp][q][0][g * kWideRowBytes + tig * 16]) = wa[q];
        *reinterpret_cast<uint4*>(&stage[warp][q][1][g * kWideRowBytes + tig * 16]) = wb[q];
      }
      __syncwarp();
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        if (c0 + q >= c_end) break;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const std::uint32_t ua = *reinterpret_cast<const std::uint32_t*>(&stage[warp][q][0][g * kWideRowBytes + s * 16 + tig * 4]);
          const std::uint32_t ub = *reinterpret_cast<const std::uint32_t*>(&stage[warp][q][1][g * kWideRowBytes + s * 16 + tig * 4]);
          const std::uint32_t a[4] = {e2m1x4_to_e4m3x4(ua), e2m1x4_to_e4m3x4(ub), e2m1x4_to_e4m3x4(ua >> 16),
                                      e2m1x4_to_e4m3x4(ub >> 16)};
          const float sa = ue8m0_to_f32(static_cast<std::uint8_t>(rsa[q] >> (8 * s)));
          const float sb = ue8m0_to_f32(static_cast<std::uint8_t>(rsb[q] >> (8 * s)));
#pragma unroll
          for (int j = 0; j < J; ++j) {
            if (j * 8 >= mrows) break;
            float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_e4m3(cc, a, xb[q][s][j].x, xb[q][s][j].y);
            const float x0 = xsv[q][j][0], x1 = xsv[q][j][1];
            acc[j][0] = fmaf(cc[0], sa * x0, acc[j][0]);
            acc[j][1] = fmaf(cc[1], sa * x1, acc[j][1]);
            acc[j][2] = fmaf(cc[2], sb * x0, acc[j][2]);
            acc[j][3] = fmaf(cc[3], sb * x1, acc[j][3]);
          }
        }
      }
      __syncwarp();
    }
    sum_splits_and_store<J>(red, acc, args, args.out[z], row0, mrows, ra, rb, split == 0);
    __syncthreads();  // red is rewritten by the next unit
  }
}

// Splits K (per 16-row tile) until the work units number at least 4 per resident block, so the
// grid-stride walk leaves at most ~25% imbalance between SMs, or until a split would hold fewer than
// min_passes passes of Q chunks; the grid is one wave of blocks.
template <int J, int Q>
void launch_fp4_wide_config(const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  auto kernel = skinny_fp4_wide_kernel<J, Q>;
  const std::int64_t resident = resident_blocks<skinny_fp4_wide_kernel<J, Q>>();
  const std::int64_t tiles = (args.n + 15) / 16;
  const std::int64_t chunks = args.k / 128;
  auto tile_blocks = [&](int splits) {
    return (tiles + kSkinnyWarps / splits - 1) / (kSkinnyWarps / splits);
  };
  SkinnyGemmArgs a = args;
  a.splits = 1;
  const std::int64_t min_chunks = static_cast<std::int64_t>(std::max(args.min_passes, 1)) * Q;
  while (a.splits < kSkinnyWarps && tile_blocks(a.splits) * grid_y * grid_z < 4 * resident &&
         chunks >= 2 * a.splits * min_chunks)
    a.splits *= 2;
  const std::int64_t units = tile_blocks(a.splits) * grid_y * grid_z;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(units, resident));
  launch_chained(kernel, grid, kSkinnyWarps * 32, 0, stream, a, grid_z, tile_blocks(a.splits));
}

}  // namespace

void launch_skinny_fp4_wide(int group_rows, const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  if (group_rows <= kSkinnyRowsSmall) {
    launch_fp4_wide_config<1, 4>(args, grid_y, grid_z, stream);
  } else {
    launch_fp4_wide_config<2, 2>(args, grid_y, grid_z, stream);
  }
}

}  // namespace deepinfer::ops::cuda
