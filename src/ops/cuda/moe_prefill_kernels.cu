// Grouped GEMM for the routed experts in prefill (many rows per expert): a block multiplies one
// 128-row work item of an expert with a 128-column tile of that expert's fp4 weight on bf16 tensor
// cores. The fp4 tile is widened to bf16 (e2m1 value × ue8m0 block scale: exact in bf16) once in
// shared memory and reused by all 128 rows, where the skinny kernels re-read the weights per 8-32 rows.
#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/moe_prefill.cuh"

namespace deepinfer::ops::cuda {
namespace {

using prefill::fp4x8_to_bf16x8;
using prefill::kBK;
using prefill::kBM;
using prefill::kBN;
using prefill::kRawBytes;
using prefill::kScaleSmem;
using prefill::kStages;
constexpr int kThreads = 256;  // 8 warps: 2 (rows) x 4 (columns), warp tiles of 64 x 32
constexpr int kWarpsN = 4;
constexpr int kWtm = 64, kWtn = 32, kMFrag = kWtm / 16, kNFrag = kWtn / 8;
constexpr int kLd = 72;  // bf16 per shared row (64 + 8: conflict-free ldmatrix)
constexpr int kASmem = kStages * kBM * kLd * 2;
constexpr int kRawSmem = kStages * kBN * kRawBytes;
constexpr int kDeqSmem = kBN * kLd * 2;
constexpr int kSmem = kASmem + kRawSmem + kDeqSmem + kScaleSmem + kBM * 4;

// Grid: (n / kBN, max items, weight sets). Items: {expert, first placed row, rows <= kBM, 0}.
// Every output element sums K in one fixed order (64-K stages, 16-K mma steps), whatever the item
// size or the row's place in it.
__global__ void __launch_bounds__(kThreads, 2) moe_prefill_fp4_kernel(MmaGemmArgs args) {
  enter_dependent_kernel();
  extern __shared__ __align__(128) std::uint8_t smem[];
  auto* a_s = reinterpret_cast<std::uint16_t*>(smem);
  std::uint8_t* raw_s = smem + kASmem;
  auto* deq_s = reinterpret_cast<std::uint16_t*>(smem + kASmem + kRawSmem);
  std::uint8_t* sc_s = smem + kASmem + kRawSmem + kDeqSmem;
  auto* rows_s = reinterpret_cast<std::int32_t*>(sc_s + kScaleSmem);

  if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
  const int4 item = args.items[blockIdx.y];
  const DevWeight w = args.tables[blockIdx.z][item.x];
  void* out = args.out[blockIdx.z];
  const std::int64_t row0 = item.y;
  const int mrows = item.z;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kBN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int ktiles = static_cast<int>(args.k / kBK);
  const int scols = static_cast<int>(args.k / 32);  // scale bytes per weight row

  for (int r = tid; r < kBM; r += kThreads)
    rows_s[r] = r < mrows ? static_cast<std::int32_t>(args.a_rows ? args.a_rows[row0 + r] : row0 + r) : -1;
  {
    const auto* scale = static_cast<const std::uint8_t*>(w.scale);
    const int chunks = scols / 16;
    for (int idx = tid; idx < kBN * chunks; idx += kThreads) {
      const int r = idx / chunks, c = idx % chunks;
      cp_async16_zfill(smem_u32(sc_s + r * scols + c * 16), scale + (n0 + r) * w.scale_ld + c * 16, true);
    }
  }
  __syncthreads();

  const auto* w_bytes = static_cast<const std::uint8_t*>(w.data);
  const std::int64_t w_row_bytes = args.k / 2;
  auto load_tile = [&](int stage, int kt) {
    std::uint16_t* a_dst = a_s + stage * kBM * kLd;
#pragma unroll
    for (int i = 0; i < kBM * 8 / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int r = idx / 8, c = idx % 8;
      const std::int32_t src = rows_s[r];
      const std::uint16_t* g = src >= 0 ? args.a + src * args.lda + kt * kBK + c * 8 : args.a;
      cp_async16_zfill(smem_u32(a_dst + r * kLd + c * 8), g, src >= 0);
    }
#pragma unroll
    for (int it = 0; it < kBN * 2 / kThreads; ++it) {
      const int idx = tid + it * kThreads, r = idx / 2, c = idx % 2;
      cp_async16_zfill(smem_u32(raw_s + stage * kBN * kRawBytes + r * kRawBytes + c * 16),
                       w_bytes + (n0 + r) * w_row_bytes + static_cast<std::int64_t>(kt) * kRawBytes + c * 16, true);
    }
  };

  // Half row idx / 2 of the stage's fp4 tile (32 elements: one scale block) per thread and step.
  auto dequant_tile = [&](int stage, int kt) {
#pragma unroll
    for (int it = 0; it < kBN * 2 / kThreads; ++it) {
      const int idx = tid + it * kThreads, r = idx / 2, h = idx % 2;
      const uint4 raw = *reinterpret_cast<const uint4*>(raw_s + stage * kBN * kRawBytes + r * kRawBytes + h * 16);
      const float s = ue8m0_to_f32(sc_s[r * scols + kt * 2 + h]);
      std::uint16_t* dst = deq_s + r * kLd + h * 32;
      const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) *reinterpret_cast<uint4*>(dst + i * 8) = fp4x8_to_bf16x8(words[i], s);
    }
  };

  float acc[kMFrag][kNFrag][4] = {};
  // 16-row fragments of this warp that hold rows of the item (a partial item skips the rest's mma).
  const int live = min(kMFrag, max(0, (mrows - wm * kWtm + 15) / 16));
  auto compute_tile = [&](int stage) {
    const std::uint16_t* a_tile = a_s + stage * kBM * kLd;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      std::uint32_t af[kMFrag][4];
#pragma unroll
      for (int mf = 0; mf < kMFrag; ++mf)
        if (mf < live)
          ldsm_x4(smem_u32(a_tile + (wm * kWtm + mf * 16 + lane % 16) * kLd + kk * 16 + (lane / 16) * 8), af[mf]);
#pragma unroll
      for (int nf2 = 0; nf2 < kNFrag / 2; ++nf2) {
        std::uint32_t bf[4];
        ldsm_x4(smem_u32(deq_s + (wn * kWtn + nf2 * 16 + (lane / 16) * 8 + lane % 8) * kLd + kk * 16 +
                         ((lane / 8) % 2) * 8),
                bf);
#pragma unroll
        for (int mf = 0; mf < kMFrag; ++mf) {
          if (mf >= live) continue;
          mma_m16n8k16_bf16(acc[mf][2 * nf2], af[mf], bf[0], bf[1]);
          mma_m16n8k16_bf16(acc[mf][2 * nf2 + 1], af[mf], bf[2], bf[3]);
        }
      }
    }
  };

  // The scale copies above ride in the first stage's group.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_tile(s, s);
    cp_async_commit_group();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait_group<kStages - 2>();
    __syncthreads();  // stage kt landed; every warp is done with the previous tile's deq_s
    const int next = kt + kStages - 1;
    if (next < ktiles) load_tile(next % kStages, next);
    cp_async_commit_group();
    dequant_tile(kt % kStages, kt);
    __syncthreads();
    compute_tile(kt % kStages);
  }
  cp_async_wait_group<0>();

#pragma unroll
  for (int mf = 0; mf < kMFrag; ++mf)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int lr = wm * kWtm + mf * 16 + lane / 4 + half * 8;
      if (lr >= mrows) continue;
      const std::int64_t row = row0 + lr;
#pragma unroll
      for (int nf = 0; nf < kNFrag; ++nf) {
        const std::int64_t col = n0 + wn * kWtn + nf * 8 + (lane % 4) * 2;
        const float v0 = acc[mf][nf][half * 2], v1 = acc[mf][nf][half * 2 + 1];
        if (args.out_bf16) {
          const __nv_bfloat162 b = __floats2bfloat162_rn(v0, v1);
          *reinterpret_cast<__nv_bfloat162*>(static_cast<std::uint16_t*>(out) + row * args.ldo + col) = b;
        } else {
          *reinterpret_cast<float2*>(static_cast<float*>(out) + row * args.ldo + col) = make_float2(v0, v1);
        }
      }
    }
}

}  // namespace

bool moe_prefill_fits(const DevWeight& w, DevWeightFormat format, std::int64_t n, std::int64_t k, std::int64_t ldo) {
  const auto data = reinterpret_cast<std::uintptr_t>(w.data), scale = reinterpret_cast<std::uintptr_t>(w.scale);
  return format == DevWeightFormat::kFp4 && w.block == 32 && !w.scale_f32 && n % kBN == 0 && k % 512 == 0 &&
         k <= kMoePrefillMaxK && w.scale_ld % 16 == 0 && data % 16 == 0 && scale % 16 == 0 && ldo % 2 == 0;
}

void launch_moe_prefill_gemm(const MmaGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.n / kBN), static_cast<unsigned>(grid_y), static_cast<unsigned>(grid_z));
  cudaFuncSetAttribute(moe_prefill_fp4_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  launch_chained(moe_prefill_fp4_kernel, grid, kThreads, kSmem, stream, args);
}

}  // namespace deepinfer::ops::cuda
