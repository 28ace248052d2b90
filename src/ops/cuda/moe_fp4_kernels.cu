// Grouped fp4 GEMM for the routed experts (launch_skinny_fp4_wide): the expert weights stay fp4 in
// HBM and are widened to e4m3 in registers for the m16n8k32 FP8 mma (Hopper has no fp4 MMA).

#include <cuda_fp8.h>

#include <algorithm>

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
  kernel<<<grid, kSkinnyWarps * 32, 0, stream>>>(a, grid_z, tile_blocks(a.splits));
}

// ---- grouped fp4 GEMM, weights streamed through a cp.async pipeline ----------------------------------
// The wide kernel above holds its loads in registers (4 KB per warp) and idles the memory pipe while a
// warp converts and multiplies. Here a block streams a flattened sequence of (work unit, 128-K chunk)
// iterations through S shared-memory stages filled by cp.async, S - 1 iterations ahead, across unit
// boundaries: a stage holds each warp's 16 weight rows x 128 K (fp4, in the same 80-byte transpose slots
// as above), their ue8m0 scale words, and per K split the chunk of activation codes + scales of the
// item's rows. The math per 32-K step (fragments, scales, accumulation order) is the wide kernel's, so
// with the same K split the results are bit-identical; work units are the same {item, weight set, tile
// block} walked by one wave of blocks.
namespace pipe {

constexpr int kWarpRowBytes = 2 * 8 * kWideRowBytes;            // one warp's 16 rows of a chunk
constexpr int kWeightBytes = kSkinnyWarps * kWarpRowBytes;        // 10240
constexpr int kScaleBytes = kSkinnyWarps * 16 * 4;                // 512
constexpr int kXRowBytes = 160;  // 128 B of codes + 32 B: conflict-free 8-byte fragment reads
constexpr int kMinChunksPerSplit = 4;

__host__ __device__ constexpr int stage_bytes(int j_tiles, int splits) {
  return kWeightBytes + kScaleBytes + splits * j_tiles * 8 * (kXRowBytes + 4);
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst)), "l"(src));
}

// One work unit as a warp sees it: the weight rows (clamped to row 0 past n, as above), its scale rows,
// the item's rows and, for the activation loads, the source rows this lane copies.
template <int J>
struct Unit {
  const std::uint8_t* wa = nullptr;
  const std::uint8_t* wb = nullptr;
  const std::uint8_t* sc = nullptr;  // scale row of weight row n0 + (lane % 16)
  std::int64_t ra = 0, rb = 0, row0 = 0;
  int z = 0, mrows = 0;
  std::int64_t xrow[J * 2] = {};  // activation rows of pieces lane + 32 m (m < 2J)
  std::int64_t srow = 0;          // activation row `lane` (lane < 8J) for the act scales
};

template <int J>
__device__ __forceinline__ Unit<J> decode_unit(const SkinnyGemmArgs& args, std::int64_t v, int grid_z,
                                               std::int64_t tile_blocks, int splits) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  Unit<J> u;
  const std::int64_t tb = v % tile_blocks;
  u.z = static_cast<int>(v / tile_blocks % grid_z);
  const int4 item = __ldg(args.items + v / tile_blocks / grid_z);
  const DevWeight w = args.tables[u.z][item.x];
  u.row0 = item.y;
  u.mrows = item.z;
  const std::int64_t n0 = (tb * (kSkinnyWarps / splits) + warp / splits) * 16;
  u.ra = n0 + g;
  u.rb = n0 + g + 8;
  const std::int64_t row_bytes = args.k / 2;
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  u.wa = data + (u.ra < args.n ? u.ra : 0) * row_bytes + tig * 16;
  u.wb = data + (u.rb < args.n ? u.rb : 0) * row_bytes + tig * 16;
  const std::int64_t rs = n0 + lane % 16;
  u.sc = static_cast<const std::uint8_t*>(w.scale) + (rs < args.n ? rs : 0) * w.scale_ld;
  auto act_row = [&](int c) -> std::int64_t {
    if (c >= u.mrows) c = 0;
    return args.x_rows ? __ldg(args.x_rows + u.row0 + c) : u.row0 + c;
  };
#pragma unroll
  for (int m = 0; m < 2 * J; ++m) u.xrow[m] = act_row((lane + 32 * m) / 8);
  u.srow = act_row(lane < 8 * J ? lane : 0);
  return u;
}

template <int J, int S>
__global__ void __launch_bounds__(kSkinnyWarps * 32) skinny_fp4_pipe_kernel(SkinnyGemmArgs args, int grid_z,
                                                                             std::int64_t tile_blocks) {
  extern __shared__ __align__(16) std::uint8_t smem[];
  __shared__ float red[kSkinnyWarps][J * 4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int splits = args.splits, split = warp % splits;
  const int xrows = 8 * J;
  const int st_bytes = stage_bytes(J, splits);
  const int x_off = kWeightBytes + kScaleBytes, xs_off = x_off + splits * xrows * kXRowBytes;
  const std::int64_t chunks = args.k / 128;
  const int per = static_cast<int>((chunks + splits - 1) / splits);
  const std::int64_t active = static_cast<std::int64_t>(*args.item_count) * grid_z * tile_blocks;
  const std::int64_t mine = active > blockIdx.x ? (active - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const std::int64_t total = mine * per;

  // Producer: copies iteration `it` into stage it % S (one commit group per iteration, empty past the end).
  Unit<J> lu;
  std::int64_t lu_v = -1;
  auto issue = [&](std::int64_t it) {
    if (it < total) {
      const std::int64_t v = blockIdx.x + it / per * gridDim.x;
      if (v != lu_v) {
        lu = decode_unit<J>(args, v, grid_z, tile_blocks, splits);
        lu_v = v;
      }
      const std::int64_t c = static_cast<std::int64_t>(split) * per + it % per;
      if (c < chunks) {
        std::uint8_t* st = smem + (it % S) * st_bytes;
        std::uint8_t* sw = st + warp * kWarpRowBytes + g * kWideRowBytes + tig * 16;
        cp_async16(sw, lu.wa + c * 64);
        cp_async16(sw + 8 * kWideRowBytes, lu.wb + c * 64);
        if (lane < 16) cp_async4(st + kWeightBytes + (warp * 16 + lane) * 4, lu.sc + c * 4);
        if (warp < splits) {  // the first tile's warps load their split's activation chunk for all tiles
          std::uint8_t* sx = st + x_off + split * xrows * kXRowBytes;
#pragma unroll
          for (int m = 0; m < 2 * J; ++m) {
            const int idx = lane + 32 * m, r = idx / 8, piece = idx % 8;
            cp_async16(sx + r * kXRowBytes + piece * 16, args.x + lu.xrow[m] * args.ldx + c * 128 + piece * 16);
          }
          if (lane < xrows)
            cp_async4(st + xs_off + (split * xrows + lane) * 4,
                      args.xs + c * 128 / args.act_block * args.xs_ld + lu.srow);
        }
      }
    }
    cp_async_commit_group();
  };

#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(s);
  float acc[J][4] = {};
  std::int64_t ra = 0, rb = 0, row0 = 0;
  int z = 0, mrows = 0;
  for (std::int64_t it = 0; it < total; ++it) {
    cp_async_wait_group<S - 2>();
    __syncthreads();  // stage it landed for every thread; stage it - 1 is free for the refill below
    issue(it + S - 1);
    const int ci = static_cast<int>(it % per);
    if (ci == 0) {
      const std::int64_t v = blockIdx.x + it / per * gridDim.x;
      const int4 item = __ldg(args.items + v / tile_blocks / grid_z);
      z = static_cast<int>(v / tile_blocks % grid_z);
      row0 = item.y;
      mrows = item.z;
      ra = (v % tile_blocks * (kSkinnyWarps / splits) + warp / splits) * 16 + g;
      rb = ra + 8;
    }
    if (static_cast<std::int64_t>(split) * per + ci < chunks) {
      const std::uint8_t* st = smem + (it % S) * st_bytes;
      const std::uint8_t* sw = st + warp * kWarpRowBytes + g * kWideRowBytes + tig * 4;
      const auto* scw = reinterpret_cast<const std::uint32_t*>(st + kWeightBytes) + warp * 16;
      const std::uint32_t rsa = scw[g], rsb = scw[g + 8];
      const std::uint8_t* sx = st + x_off + split * xrows * kXRowBytes + g * kXRowBytes + tig * 8;
      const float* sxs = reinterpret_cast<const float*>(st + xs_off) + split * xrows + tig * 2;
      float xsv[J][2];
#pragma unroll
      for (int j = 0; j < J; ++j) {
        xsv[j][0] = sxs[j * 8];
        xsv[j][1] = sxs[j * 8 + 1];
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const std::uint32_t ua = *reinterpret_cast<const std::uint32_t*>(sw + s * 16);
        const std::uint32_t ub = *reinterpret_cast<const std::uint32_t*>(sw + 8 * kWideRowBytes + s * 16);
        const std::uint32_t a[4] = {e2m1x4_to_e4m3x4(ua), e2m1x4_to_e4m3x4(ub), e2m1x4_to_e4m3x4(ua >> 16),
                                    e2m1x4_to_e4m3x4(ub >> 16)};
        const float sa = ue8m0_to_f32(static_cast<std::uint8_t>(rsa >> (8 * s)));
        const float sb = ue8m0_to_f32(static_cast<std::uint8_t>(rsb >> (8 * s)));
#pragma unroll
        for (int j = 0; j < J; ++j) {
          if (j * 8 >= mrows) break;
          const uint2 xb = *reinterpret_cast<const uint2*>(sx + j * 8 * kXRowBytes + s * 32);
          float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma_e4m3(cc, a, xb.x, xb.y);
          const float x0 = xsv[j][0], x1 = xsv[j][1];
          acc[j][0] = fmaf(cc[0], sa * x0, acc[j][0]);
          acc[j][1] = fmaf(cc[1], sa * x1, acc[j][1]);
          acc[j][2] = fmaf(cc[2], sb * x0, acc[j][2]);
          acc[j][3] = fmaf(cc[3], sb * x1, acc[j][3]);
        }
      }
    }
    if (ci == per - 1) {
      // red is rewritten at the next unit's end, after at least one more barrier above.
      sum_splits_and_store<J>(red, acc, args, args.out[z], row0, mrows, ra, rb, split == 0);
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
    }
  }
  cp_async_wait_group<0>();
}

// Blocks of the kernel resident per SM with `smem` bytes of dynamic shared memory (cached per split).
template <int J, int S>
std::int64_t pipe_resident(int splits, int smem) {
  static int per_sm[4] = {0, 0, 0, 0};
  const int slot = splits >= 8 ? 3 : (splits >= 4 ? 2 : splits - 1);
  if (per_sm[slot] == 0) {
    int n = 1;
    cudaFuncSetAttribute(skinny_fp4_pipe_kernel<J, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         S * stage_bytes(J, 8));
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, skinny_fp4_pipe_kernel<J, S>, kSkinnyWarps * 32, smem);
    per_sm[slot] = n < 1 ? 1 : n;
  }
  int device = 0, sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return static_cast<std::int64_t>(per_sm[slot]) * sms;
}

// K is split (per 16-row tile, across the block's warps) until the units number at least two per
// resident block or a split would hold fewer than kMinChunksPerSplit chunks; the grid is one wave.
template <int J, int S>
void launch_pipe_config(const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  const std::int64_t tiles = (args.n + 15) / 16, chunks = args.k / 128;
  auto tile_blocks = [&](int splits) {
    return (tiles + kSkinnyWarps / splits - 1) / (kSkinnyWarps / splits);
  };
  SkinnyGemmArgs a = args;
  a.splits = 1;
  while (a.splits < kSkinnyWarps &&
         tile_blocks(a.splits) * grid_y * grid_z < 2 * pipe_resident<J, S>(a.splits, S * stage_bytes(J, a.splits)) &&
         chunks >= 2 * a.splits * kMinChunksPerSplit)
    a.splits *= 2;
  const int smem = S * stage_bytes(J, a.splits);
  const std::int64_t units = tile_blocks(a.splits) * grid_y * grid_z;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(units, pipe_resident<J, S>(a.splits, smem)));
  skinny_fp4_pipe_kernel<J, S><<<grid, kSkinnyWarps * 32, smem, stream>>>(a, grid_z, tile_blocks(a.splits));
}

}  // namespace pipe
}  // namespace

void launch_skinny_fp4_pipe(int group_rows, int stages, const SkinnyGemmArgs& args, int grid_y, int grid_z,
                            cudaStream_t stream) {
  const bool small = group_rows <= kSkinnyRowsSmall;
  if (stages <= 4) {
    small ? pipe::launch_pipe_config<1, 4>(args, grid_y, grid_z, stream)
          : pipe::launch_pipe_config<2, 4>(args, grid_y, grid_z, stream);
  } else {
    small ? pipe::launch_pipe_config<1, 6>(args, grid_y, grid_z, stream)
          : pipe::launch_pipe_config<2, 6>(args, grid_y, grid_z, stream);
  }
}

void launch_skinny_fp4_wide(int group_rows, const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  if (group_rows <= kSkinnyRowsSmall) {
    launch_fp4_wide_config<1, 4>(args, grid_y, grid_z, stream);
  } else {
    launch_fp4_wide_config<2, 2>(args, grid_y, grid_z, stream);
  }
}

}  // namespace deepinfer::ops::cuda
