// FP8 tensor-core paths for quantised weights (the act quant to e4m3 codes lives with the other
// activation staging in gemm_kernels.cu): the weight-scale expansion to f32 for cuBLASLt's
// block-scaled FP8 GEMM, and a "skinny" GEMM for few rows per weight
// (decode, routed experts): weights stay in registers as m16n8k32 e4m3 A fragments (fp4 e2m1 is widened
// to e4m3 exactly with a byte permute), activations are the B operand, one mma per 32-K step whose
// f32 result is scaled by weight-block × activation-block scale, so the scales are applied per partial
// sum, never per element.
#include <cuda_fp8.h>

#include <algorithm>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/skinny_mma.cuh"

namespace deepinfer::ops::cuda {
namespace {

using skinny::e2m1x4_to_e4m3x4;
using skinny::kSkinnyWarps;
using skinny::mma_e4m3;
using skinny::resident_blocks;
using skinny::sum_splits_and_store;
using skinny::weight_scale_raw;
using skinny::weight_scale_value;

// Weight block scales (ue8m0 bytes or f32) -> f32 [rows][ld], ld >= cols (padding zeroed).
__global__ void weight_scale_f32_kernel(DevWeight w, std::int64_t rows, std::int64_t cols, float* out,
                                        std::int64_t ld) {
  enter_dependent_kernel();
  const std::int64_t total = rows * ld;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / ld, c = i % ld;
    float v = 0.0f;
    if (c < cols) {
      const std::int64_t src = r * w.scale_ld + c;
      v = w.scale_f32 ? static_cast<const float*>(w.scale)[src] : ue8m0_to_f32(static_cast<const std::uint8_t*>(w.scale)[src]);
    }
    out[i] = v;
  }
}

// ---- skinny GEMM -------------------------------------------------------------------------------------
// F: 2 = fp8 block weights, 3 = fp4. J: groups of 8 activation rows multiplied with each weight
// fragment (an item holds up to 8·J rows). P: 32-K steps per weight load (2: 16-byte loads of fp8
// rows, for 64-aligned weight and act blocks; 1: 8-byte fp8 / 4-byte fp4 loads). GROUPED: blockIdx.y
// is a work item {expert, row_begin, rows} and blockIdx.z the weight set; else blockIdx.y is a group
// of 8·J rows. A block = kSkinnyWarps warps = (8 / splits) tiles of 16 weight rows × `splits` K
// ranges; the K-range partials are summed in split order.
//
// Per 32-K step: the A fragment (lane (g, tig) holds K positions tig*4..+3 and 16+tig*4..+3 of rows
// g and g+8) is filled from 8 consecutive K elements of each row, the B fragment from the same 8
// activation elements, so both operands see one permutation of the step's 32 K elements; the f32
// result is scaled by the two block scales and added to the accumulator.
template <int F, int J, int P, bool GROUPED>
__global__ void __launch_bounds__(kSkinnyWarps * 32) skinny_gemm_kernel(SkinnyGemmArgs args) {
  enter_dependent_kernel();
  constexpr int U = J == 1 ? 8 : 2;  // steps whose loads are in flight together (registers: 2 blocks / SM)
  __shared__ float red[kSkinnyWarps][J * 4][32];
  DevWeight w;
  void* out;
  std::int64_t row0;
  int mrows;
  if constexpr (GROUPED) {
    if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
    const int4 item = args.items[blockIdx.y];
    w = args.tables[blockIdx.z][item.x];
    out = args.out[blockIdx.z];
    row0 = item.y;
    mrows = item.z;
  } else {
    w = args.w;
    out = args.out[0];
    row0 = static_cast<std::int64_t>(blockIdx.y) * 8 * J;
    mrows = static_cast<int>(min(static_cast<std::int64_t>(8 * J), args.m - row0));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int splits = args.splits;
  const int split = warp % splits;
  const std::int64_t n0 = (static_cast<std::int64_t>(blockIdx.x) * (kSkinnyWarps / splits) + warp / splits) * 16;
  const std::int64_t ra = n0 + g, rb = n0 + g + 8;
  const bool va = ra < args.n, vb = rb < args.n;
  const std::int64_t steps = args.k / 32;
  const std::int64_t per = ((steps + splits - 1) / splits + P - 1) / P * P;
  const std::int64_t s_begin = split * per, s_end = min(steps, s_begin + per);

  // Every load below is unconditional, from a clamped valid address, and nothing loaded is used
  // before all of a pass's loads are issued (a use right after a load would stall the warp on each
  // one): rows >= n, columns >= mrows and steps past the range compute values that are never stored.
  auto act_row = [&](int c) -> std::int64_t {
    if (c >= mrows) c = 0;
    return args.x_rows ? args.x_rows[row0 + c] : row0 + c;
  };
  const std::uint8_t* xp[J];  // this lane's B column (g) of each row group, at its K offset
  const float* xsp[J][2];     // scales of the two output columns (tig*2, tig*2+1)
#pragma unroll
  for (int j = 0; j < J; ++j) {
    xp[j] = args.x + act_row(j * 8 + g) * args.ldx + tig * 8 * P;
#pragma unroll
    for (int e = 0; e < 2; ++e) xsp[j][e] = args.xs + act_row(j * 8 + tig * 2 + e);
  }
  const std::int64_t row_bytes = F == 2 ? args.k : args.k / 2;
  const std::int64_t lane_off = F == 2 ? tig * 8 * P : tig * 4;
  const auto* pa = static_cast<const std::uint8_t*>(w.data) + (va ? ra : 0) * row_bytes + lane_off;
  const auto* pb = static_cast<const std::uint8_t*>(w.data) + (vb ? rb : 0) * row_bytes + lane_off;
  // Weight scale rows: fp8 [n / block][k / block], fp4 [n][k / 32].
  const std::int64_t sra = va ? (F == 2 ? ra / w.block : ra) * w.scale_ld : 0;
  const std::int64_t srb = vb ? (F == 2 ? rb / w.block : rb) * w.scale_ld : 0;
  const int sdiv = F == 2 ? w.block : 32;
  float acc[J][4] = {};

  for (std::int64_t s0 = s_begin; s0 < s_end; s0 += U) {
    constexpr int Q = U / P;  // loads per row and pass; the P steps of one load share their scales
    std::uint32_t wa[U][2], wbv[U][2];  // rows a / b: the two words of each step (fp4: one)
    uint2 xb[U][J];
    std::uint32_t rsa[Q], rsb[Q];  // raw weight scales
    float xsv[Q][J][2];            // activation scales of the two output columns
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const std::int64_t s = s0 + q * P < s_end ? s0 + q * P : s0;
      const std::int64_t k0 = s * 32;
      if constexpr (F == 2 && P == 2) {
        const uint4 a4 = __ldg(reinterpret_cast<const uint4*>(pa + k0));
        const uint4 b4 = __ldg(reinterpret_cast<const uint4*>(pb + k0));
        wa[2 * q][0] = a4.x; wa[2 * q][1] = a4.y; wa[2 * q + 1][0] = a4.z; wa[2 * q + 1][1] = a4.w;
        wbv[2 * q][0] = b4.x; wbv[2 * q][1] = b4.y; wbv[2 * q + 1][0] = b4.z; wbv[2 * q + 1][1] = b4.w;
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const uint4 x4 = *reinterpret_cast<const uint4*>(xp[j] + k0);
          xb[2 * q][j] = make_uint2(x4.x, x4.y);
          xb[2 * q + 1][j] = make_uint2(x4.z, x4.w);
        }
      } else if constexpr (F == 2) {
        const uint2 a2 = __ldg(reinterpret_cast<const uint2*>(pa + k0));
        const uint2 b2 = __ldg(reinterpret_cast<const uint2*>(pb + k0));
        wa[q][0] = a2.x; wa[q][1] = a2.y;
        wbv[q][0] = b2.x; wbv[q][1] = b2.y;
      } else {
        wa[q][0] = __ldg(reinterpret_cast<const std::uint32_t*>(pa + k0 / 2));
        wbv[q][0] = __ldg(reinterpret_cast<const std::uint32_t*>(pb + k0 / 2));
        wa[q][1] = wbv[q][1] = 0u;
      }
      if constexpr (P == 1) {
#pragma unroll
        for (int j = 0; j < J; ++j) xb[q][j] = *reinterpret_cast<const uint2*>(xp[j] + k0);
      }
      rsa[q] = weight_scale_raw(w, sra + k0 / sdiv);
      rsb[q] = weight_scale_raw(w, srb + k0 / sdiv);
      const std::int64_t xs_off = k0 / args.act_block * args.xs_ld;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        xsv[q][j][0] = xsp[j][0][xs_off];
        xsv[q][j][1] = xsp[j][1][xs_off];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (s0 + u >= s_end) break;
      std::uint32_t a[4];
      if constexpr (F == 2) {
        a[0] = wa[u][0];
        a[2] = wa[u][1];
        a[1] = wbv[u][0];
        a[3] = wbv[u][1];
      } else {
        a[0] = e2m1x4_to_e4m3x4(wa[u][0]);
        a[2] = e2m1x4_to_e4m3x4(wa[u][0] >> 16);
        a[1] = e2m1x4_to_e4m3x4(wbv[u][0]);
        a[3] = e2m1x4_to_e4m3x4(wbv[u][0] >> 16);
      }
      const float sa = weight_scale_value(w, rsa[u / P]), sb = weight_scale_value(w, rsb[u / P]);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        if (j * 8 >= mrows) break;
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_e4m3(c, a, xb[u][j].x, xb[u][j].y);
        const float x0 = xsv[u / P][j][0], x1 = xsv[u / P][j][1];
        acc[j][0] = fmaf(c[0], sa * x0, acc[j][0]);
        acc[j][1] = fmaf(c[1], sa * x1, acc[j][1]);
        acc[j][2] = fmaf(c[2], sb * x0, acc[j][2]);
        acc[j][3] = fmaf(c[3], sb * x1, acc[j][3]);
      }
    }
  }
  sum_splits_and_store<J>(red, acc, args, out, row0, mrows, ra, rb, split == 0);
}

// Splits K per 16-row tile as far as the blocks still fit on the GPU in one wave (occupancy from the
// runtime), so every SM streams weights and no second wave waits; then launches.
template <int F, int J, int P, bool GROUPED>
void launch_skinny_config(const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  auto kernel = skinny_gemm_kernel<F, J, P, GROUPED>;
  const std::int64_t resident = resident_blocks<skinny_gemm_kernel<F, J, P, GROUPED>>();
  const std::int64_t tiles = (args.n + 15) / 16;
  const std::int64_t steps = args.k / 32;
  auto blocks = [&](int splits) { return (tiles + kSkinnyWarps / splits - 1) / (kSkinnyWarps / splits) * grid_y * grid_z; };
  SkinnyGemmArgs a = args;
  a.splits = 1;
  while (a.splits < kSkinnyWarps && blocks(a.splits * 2) <= resident && steps >= 2 * a.splits * P) a.splits *= 2;
  const int tiles_per_block = kSkinnyWarps / a.splits;
  const dim3 grid(static_cast<unsigned>((tiles + tiles_per_block - 1) / tiles_per_block), static_cast<unsigned>(grid_y),
                  static_cast<unsigned>(grid_z));
  launch_chained(kernel, grid, kSkinnyWarps * 32, 0, stream, a);
}

template <int F, int P>
void launch_skinny_rows(int group_rows, bool grouped, const SkinnyGemmArgs& args, int grid_y, int grid_z,
                        cudaStream_t stream) {
  if (group_rows <= kSkinnyRowsSmall) {
    grouped ? launch_skinny_config<F, 1, P, true>(args, grid_y, grid_z, stream)
            : launch_skinny_config<F, 1, P, false>(args, grid_y, grid_z, stream);
  } else {
    grouped ? launch_skinny_config<F, 4, P, true>(args, grid_y, grid_z, stream)
            : launch_skinny_config<F, 4, P, false>(args, grid_y, grid_z, stream);
  }
}

}  // namespace

void launch_weight_scale_f32(const DevWeight& w, std::int64_t rows, std::int64_t cols, float* out, std::int64_t ld,
                             cudaStream_t stream) {
  const std::int64_t total = rows * ld;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((total + 255) / 256, 4096));
  launch_chained(weight_scale_f32_kernel, blocks < 1 ? 1 : blocks, 256, 0, stream, w, rows, cols, out, ld);
}

void launch_skinny_gemm(DevWeightFormat format, int group_rows, bool grouped, const SkinnyGemmArgs& args, int grid_y,
                        int grid_z, cudaStream_t stream) {
  if (format == DevWeightFormat::kFp4) {
    launch_skinny_rows<3, 1>(group_rows, grouped, args, grid_y, grid_z, stream);
    return;
  }
  // 16-byte fp8 loads span two 32-K steps: both must share the weight and activation block scales.
  const bool pair = args.k % 64 == 0 && args.act_block % 64 == 0 && args.w.block % 64 == 0 &&
                    reinterpret_cast<std::uintptr_t>(args.w.data) % 16 == 0;
  if (pair) {
    launch_skinny_rows<2, 2>(group_rows, grouped, args, grid_y, grid_z, stream);
  } else {
    launch_skinny_rows<2, 1>(group_rows, grouped, args, grid_y, grid_z, stream);
  }
}

}  // namespace deepinfer::ops::cuda
