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

// ---- grouped fp4 GEMM, weights streamed by bulk copies (TMA) ---------------------------------------
// The kernel above keeps 4 KB per warp in flight as 64-byte row pieces through the load units (~1.45
// TB/s); a first cp.async ring of 64-byte pieces (2026-11-30) was slower still. Here a block streams a
// flattened sequence of (work unit, 512-K stage) iterations through S shared-memory stages filled
// S - 1 iterations ahead, across unit boundaries, by the bulk-copy engine: per stage one 256-byte copy
// per weight row (its 4 chunks contiguous), one 16-byte copy of the row's four ue8m0 scale words, one
// 512-byte copy per activation row and K split; all complete on the stage's mbarrier (activation
// scales: 4-byte cp.async). The math per 32-K step (fragments, scales, accumulation order, K split
// summed in split order) is the wide kernel's, so with the same K split the results are bit-identical.
// Requirements beyond the wide kernel's: K % 512 == 0, scale rows 16-byte aligned. Measured (H200,
// 2026-11-30) 5-15% slower than the wide kernel with 2 stages and two blocks per SM, 30-65% slower with
// 3-4 stages and one: what bounds both is the per-step math (fp4 -> e4m3, scales, mma) of 16 warps per
// SM, not the bytes in flight; kept as an option (CudaBackendOptions::moe_fp4_pipe_stages) for that work.
namespace pipe {

constexpr int kChunks = 4;                                    // 128-K chunks per stage
constexpr int kRowSlot = kChunks * 64 + 16;                   // one weight row of a stage + conflict pad
constexpr int kWeightBytes = kSkinnyWarps * 16 * kRowSlot;    // 34816
constexpr int kScaleBytes = kSkinnyWarps * 16 * 16;           // 2048
constexpr int kXRowSlot = kChunks * 128 + 32;                 // one activation row + conflict pad

__host__ __device__ constexpr int stage_bytes(int j_tiles, int splits) {
  return kWeightBytes + kScaleBytes + splits * j_tiles * 8 * (kXRowSlot + kChunks * 4);
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, std::uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void mbar_init(std::uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(std::uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, int parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// What a lane copies for one work unit: weight row (lanes 0-15) or scale row (lanes 16-31) n0 + lane % 16
// (clamped to row 0 past n), and activation row lane % 8J of the item (rows past the item's: its first).
struct Unit {
  const std::uint8_t* src = nullptr;  // weight or scale row
  std::int64_t act_row = 0;
};

template <int J>
__device__ __forceinline__ Unit decode_unit(const SkinnyGemmArgs& args, std::int64_t v, int grid_z,
                                            std::int64_t tile_blocks, int splits) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t tb = v % tile_blocks;
  const int z = static_cast<int>(v / tile_blocks % grid_z);
  const int4 item = __ldg(args.items + v / tile_blocks / grid_z);
  const DevWeight w = args.tables[z][item.x];
  std::int64_t row = (tb * (kSkinnyWarps / splits) + warp / splits) * 16 + lane % 16;
  if (row >= args.n) row = 0;
  Unit u;
  u.src = lane < 16 ? static_cast<const std::uint8_t*>(w.data) + row * (args.k / 2)
                    : static_cast<const std::uint8_t*>(w.scale) + row * w.scale_ld;
  int c = lane % (8 * J);
  if (c >= item.z) c = 0;
  u.act_row = args.x_rows ? __ldg(args.x_rows + item.y + c) : item.y + c;
  return u;
}

template <int J, int S>
__global__ void __launch_bounds__(kSkinnyWarps * 32, 1) skinny_fp4_tma_kernel(SkinnyGemmArgs args, int grid_z,
                                                                             std::int64_t tile_blocks) {
  extern __shared__ __align__(128) std::uint8_t smem[];
  __shared__ float red[kSkinnyWarps][J * 4][32];
  __shared__ __align__(8) std::uint64_t bars[S];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int splits = args.splits, split = warp % splits;
  const int xrows = 8 * J;
  const int st_bytes = stage_bytes(J, splits);
  const int x_off = kWeightBytes + kScaleBytes, xs_off = x_off + splits * xrows * kXRowSlot;
  const int chunks = static_cast<int>(args.k / 128);
  const int per = chunks / splits;       // chunks per split (a multiple of kChunks)
  const int per_it = per / kChunks;      // iterations per unit
  const std::int64_t active = static_cast<std::int64_t>(*args.item_count) * grid_z * tile_blocks;
  const int mine = active > blockIdx.x ? static_cast<int>((active - blockIdx.x + gridDim.x - 1) / gridDim.x) : 0;
  const int total = mine * per_it;
  const int stage_tx = kSkinnyWarps * 16 * (kChunks * 64 + 16) + splits * xrows * kChunks * 128;
  // Thread 0 arms a stage's mbarrier (the expected bytes, its one arrival) before the barrier that
  // precedes the stage's copies, so no copy can complete on a phase that is not armed yet.
  if (threadIdx.x == 0) {
    for (int b = 0; b < S; ++b) mbar_init(smem_u32(&bars[b]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int it = 0; it < S - 1 && it < total; ++it) mbar_expect_tx(smem_u32(&bars[it]), stage_tx);
  }
  __syncthreads();

  Unit lu;
  int lu_u = -1;
  // Producer: iteration `it` into stage it % S (one cp.async group per iteration, empty past the end).
  auto produce = [&](int it) {
    if (it < total) {
      const int u = it / per_it;
      if (u != lu_u) {
        lu = decode_unit<J>(args, blockIdx.x + static_cast<std::int64_t>(u) * gridDim.x, grid_z, tile_blocks, splits);
        lu_u = u;
      }
      const std::int64_t c0 = static_cast<std::int64_t>(split) * per + (it - u * per_it) * kChunks;
      std::uint8_t* st = smem + (it % S) * st_bytes;
      const std::uint32_t bar = smem_u32(&bars[it % S]);
      if (lane < 16) {
        bulk_copy(st + (warp * 16 + lane) * kRowSlot, lu.src + c0 * 64, kChunks * 64, bar);
      } else {
        bulk_copy(st + kWeightBytes + (warp * 16 + lane - 16) * 16, lu.src + c0 * 4, 16, bar);
      }
      if (warp < splits) {  // the first tile's warps copy their split's activations for all tiles
        if (lane < xrows)
          bulk_copy(st + x_off + (split * xrows + lane) * kXRowSlot, args.x + lu.act_row * args.ldx + c0 * 128,
                    kChunks * 128, bar);
        for (int idx = lane; idx < kChunks * xrows; idx += 32) {
          const int q = idx / xrows;
          cp_async4(st + xs_off + ((split * kChunks + q) * xrows + idx % xrows) * 4,
                    args.xs + (c0 + q) * 128 / args.act_block * args.xs_ld + lu.act_row);
        }
      }
    }
    cp_async_commit_group();
  };

#pragma unroll
  for (int s = 0; s < S - 1; ++s) produce(s);
  float acc[J][4] = {};
  std::int64_t ra = 0, rb = 0, row0 = 0;
  int z = 0, mrows = 0;
  for (int it = 0; it < total; ++it) {
    cp_async_wait_group<S - 2>();
    // Stage it - 1's phase completed (thread 0 waited on it), so its buffer's next phase can be armed.
    if (threadIdx.x == 0 && it + S - 1 < total) mbar_expect_tx(smem_u32(&bars[(it + S - 1) % S]), stage_tx);
    __syncthreads();  // stage it's act scales landed; stage it - 1 is free for the refill below
    produce(it + S - 1);
    const int u = it / per_it, ci = it - u * per_it;
    if (ci == 0) {
      const std::int64_t v = blockIdx.x + static_cast<std::int64_t>(u) * gridDim.x;
      const int4 item = __ldg(args.items + v / tile_blocks / grid_z);
      z = static_cast<int>(v / tile_blocks % grid_z);
      row0 = item.y;
      mrows = item.z;
      ra = (v % tile_blocks * (kSkinnyWarps / splits) + warp / splits) * 16 + g;
      rb = ra + 8;
    }
    const std::uint8_t* st = smem + (it % S) * st_bytes;
    const std::uint8_t* wa = st + (warp * 16 + g) * kRowSlot + tig * 4;
    const std::uint8_t* sx = st + x_off + (split * xrows + g) * kXRowSlot + tig * 8;
    const float* sxs = reinterpret_cast<const float*>(st + xs_off) + split * kChunks * xrows + tig * 2;
    mbar_wait(smem_u32(&bars[it % S]), (it / S) & 1);  // stage it's bulk copies landed
    const uint4 sca = *reinterpret_cast<const uint4*>(st + kWeightBytes + (warp * 16 + g) * 16);
    const uint4 scb = *reinterpret_cast<const uint4*>(st + kWeightBytes + (warp * 16 + g + 8) * 16);
    const std::uint32_t rsa[kChunks] = {sca.x, sca.y, sca.z, sca.w}, rsb[kChunks] = {scb.x, scb.y, scb.z, scb.w};
#pragma unroll
    for (int q = 0; q < kChunks; ++q) {
      float xsv[J][2];
#pragma unroll
      for (int j = 0; j < J; ++j) {
        xsv[j][0] = sxs[q * xrows + j * 8];
        xsv[j][1] = sxs[q * xrows + j * 8 + 1];
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const std::uint32_t ua = *reinterpret_cast<const std::uint32_t*>(wa + q * 64 + s * 16);
        const std::uint32_t ub = *reinterpret_cast<const std::uint32_t*>(wa + 8 * kRowSlot + q * 64 + s * 16);
        const std::uint32_t a[4] = {e2m1x4_to_e4m3x4(ua), e2m1x4_to_e4m3x4(ub), e2m1x4_to_e4m3x4(ua >> 16),
                                    e2m1x4_to_e4m3x4(ub >> 16)};
        const float sa = ue8m0_to_f32(static_cast<std::uint8_t>(rsa[q] >> (8 * s)));
        const float sb = ue8m0_to_f32(static_cast<std::uint8_t>(rsb[q] >> (8 * s)));
#pragma unroll
        for (int j = 0; j < J; ++j) {
          if (j * 8 >= mrows) break;
          const uint2 xb = *reinterpret_cast<const uint2*>(sx + j * 8 * kXRowSlot + q * 128 + s * 32);
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
    if (ci == per_it - 1) {
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

// Blocks of the kernel resident per SM with the stages of `splits` (cached per split; -1: they do not
// fit in shared memory). Only valid attribute values are set, so no error is left for the launch check.
template <int J, int S>
std::int64_t tma_resident(int splits) {
  static int per_sm[4] = {0, 0, 0, 0};
  const int slot = splits >= 8 ? 3 : (splits >= 4 ? 2 : splits - 1);
  int device = 0, sms = 1, optin = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (per_sm[slot] == 0) {
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    const int smem = S * stage_bytes(J, splits);
    const int static_smem = static_cast<int>(sizeof(float)) * kSkinnyWarps * J * 4 * 32 + 8 * S + 128;
    int n = 0;
    if (smem + static_smem <= optin &&
        cudaFuncSetAttribute(skinny_fp4_tma_kernel<J, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) ==
            cudaSuccess)
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, skinny_fp4_tma_kernel<J, S>, kSkinnyWarps * 32, smem);
    per_sm[slot] = n < 1 ? -1 : n;
  }
  return per_sm[slot] < 0 ? -1 : static_cast<std::int64_t>(per_sm[slot]) * sms;
}

// K is split (per 16-row tile, across the block's warps) while the units number fewer than two per
// resident block, each split keeps >= 2 stages and the stages still fit in shared memory.
template <int J, int S>
void launch_tma_config(const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  const std::int64_t tiles = (args.n + 15) / 16, stages = args.k / (128 * kChunks);
  auto tile_blocks = [&](int splits) {
    return (tiles + kSkinnyWarps / splits - 1) / (kSkinnyWarps / splits);
  };
  SkinnyGemmArgs a = args;
  a.splits = 1;
  while (a.splits < kSkinnyWarps && tile_blocks(a.splits) * grid_y * grid_z < 2 * tma_resident<J, S>(a.splits) &&
         stages % (2 * a.splits) == 0 && stages / (2 * a.splits) >= 2 && tma_resident<J, S>(2 * a.splits) > 0)
    a.splits *= 2;
  const std::int64_t units = tile_blocks(a.splits) * grid_y * grid_z;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(units, tma_resident<J, S>(a.splits)));
  cudaFuncSetAttribute(skinny_fp4_tma_kernel<J, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       S * stage_bytes(J, a.splits));
  skinny_fp4_tma_kernel<J, S><<<grid, kSkinnyWarps * 32, S * stage_bytes(J, a.splits), stream>>>(
      a, grid_z, tile_blocks(a.splits));
}

}  // namespace pipe
}  // namespace

bool skinny_fp4_tma_fits(std::int64_t k, const DevWeight& w) {
  return k % (128 * pipe::kChunks) == 0 && w.scale_ld % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w.scale) % 16 == 0 && reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0;
}

void launch_skinny_fp4_tma(int group_rows, int stages, const SkinnyGemmArgs& args, int grid_y, int grid_z,
                           cudaStream_t stream) {
  const bool small = group_rows <= kSkinnyRowsSmall;
  if (stages <= 2) {  // two blocks per SM
    small ? pipe::launch_tma_config<1, 2>(args, grid_y, grid_z, stream)
          : pipe::launch_tma_config<2, 2>(args, grid_y, grid_z, stream);
  } else if (stages == 3) {
    small ? pipe::launch_tma_config<1, 3>(args, grid_y, grid_z, stream)
          : pipe::launch_tma_config<2, 3>(args, grid_y, grid_z, stream);
  } else {
    small ? pipe::launch_tma_config<1, 4>(args, grid_y, grid_z, stream)
          : pipe::launch_tma_config<2, 4>(args, grid_y, grid_z, stream);
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
