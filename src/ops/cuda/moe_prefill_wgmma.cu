// The prefill expert GEMM of moe_prefill_kernels.cu on Hopper's warpgroup MMA (sm_90a wgmma): the same
// 128-row items, 128-column fp4 weight tiles widened to bf16 once per item and 64-K cp.async stages,
// with both operands read by the tensor cores straight from shared memory (128-byte swizzled,
// K-major) and the widening of the next weight tile running while the current tile's wgmma does.
// Warpgroup g of the two owns rows 64g..64g+63 of the item and all 128 columns.
#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/moe_prefill.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace deepinfer::ops::cuda {
namespace {

using prefill::fp4x8_to_bf16x8;
using prefill::kBK;
using prefill::kBM;
using prefill::kBN;
using prefill::kRawBytes;
using prefill::kScaleSmem;
using prefill::kStages;
using wgmma::fence_operands;
using wgmma::fence_proxy_async;
using wgmma::smem_desc;
using wgmma::swizzled;
using wgmma::wgmma_commit;
using wgmma::wgmma_fence;
using wgmma::wgmma_m64n128k16;
using wgmma::wgmma_wait_all;

constexpr int kThreads = 256;                  // two warpgroups
constexpr int kRowBytes = kBK * 2;             // 128: one swizzle row
constexpr int kATile = kBM * kRowBytes;        // 16 KB per stage
constexpr int kBTile = kBN * kRowBytes;        // 16 KB per widened weight tile (two, alternating)
constexpr int kASmem = kStages * kATile;
constexpr int kDeqSmem = 2 * kBTile;
constexpr int kRawSmem = kStages * kBN * kRawBytes;
constexpr int kSmem = kASmem + kDeqSmem + kRawSmem + kScaleSmem + kBM * 4 + 1024;  // + alignment slack
static_assert(kRowBytes == 128 && kBM == 2 * 64, "tiles of 64-element rows, two 64-row warpgroups");

// Grid: (n / kBN, max items, weight sets), as moe_prefill_fp4_kernel. Per element the K order is fixed
// (64-K stages, 16-K wgmma steps), so a row's result never depends on its item or the batch.
__global__ void __launch_bounds__(kThreads, 2) moe_prefill_wgmma_kernel(MmaGemmArgs args) {
  enter_dependent_kernel();
// wgmma exists on sm_90a only: a build for other architectures too (DEEPINFER_CUDA_ARCHS="90a;100a")
// compiles the body for Hopper alone; the dispatch launches this kernel only where ArchFeatures::wgmma.
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  std::uint8_t* smem = smem_in + ((1024 - smem_u32(smem_in) % 1024) % 1024);
  std::uint8_t* a_s = smem;
  std::uint8_t* deq_s = a_s + kASmem;
  std::uint8_t* raw_s = deq_s + kDeqSmem;
  std::uint8_t* sc_s = raw_s + kRawSmem;
  auto* rows_s = reinterpret_cast<std::int32_t*>(sc_s + kScaleSmem);

  if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
  const int4 item = args.items[blockIdx.y];
  const DevWeight w = args.tables[blockIdx.z][item.x];
  void* out = args.out[blockIdx.z];
  const std::int64_t row0 = item.y;
  const int mrows = item.z;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kBN;
  const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, wq = (tid % 128) / 32;
  const int ktiles = static_cast<int>(args.k / kBK);
  const int scols = static_cast<int>(args.k / 32);

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
    std::uint8_t* a_dst = a_s + stage * kATile;
#pragma unroll
    for (int i = 0; i < kBM * 8 / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / 8, c = idx % 8;
      const std::int32_t src = rows_s[r];
      const std::uint16_t* g = src >= 0 ? args.a + src * args.lda + kt * kBK + c * 8 : args.a;
      cp_async16_zfill(smem_u32(a_dst + swizzled(r, c)), g, src >= 0);
    }
    const int r = tid / 2, c = tid % 2;
    cp_async16_zfill(smem_u32(raw_s + stage * kBN * kRawBytes + r * kRawBytes + c * 16),
                     w_bytes + (n0 + r) * w_row_bytes + static_cast<std::int64_t>(kt) * kRawBytes + c * 16, true);
  };
  // Thread t widens half row t / 2 of a stage's fp4 tile (32 elements, one scale) into tile `buf`.
  auto dequant_tile = [&](int stage, int kt, int buf) {
    const int r = tid / 2, h = tid % 2;
    const uint4 raw = *reinterpret_cast<const uint4*>(raw_s + stage * kBN * kRawBytes + r * kRawBytes + h * 16);
    const float s = ue8m0_to_f32(sc_s[r * scols + kt * 2 + h]);
    std::uint8_t* dst = deq_s + buf * kBTile;
    const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) *reinterpret_cast<uint4*>(dst + swizzled(r, h * 4 + i)) = fp4x8_to_bf16x8(words[i], s);
  };

  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;
  // Groups: one per stage (the scale copies ride in the first).
  load_tile(0, 0);
  cp_async_commit_group();
  if (ktiles > 1) load_tile(1, 1);
  cp_async_commit_group();
  cp_async_wait_group<1>();
  __syncthreads();
  dequant_tile(0, 0, 0);
  fence_proxy_async();
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    if (kt + 2 < ktiles) load_tile((kt + 2) % kStages, kt + 2);  // the stage of kt - 1: its wgmma is done
    cp_async_commit_group();
    // Every warpgroup issues its wgmma, rows or not: a branch around them would serialise them.
    const std::uint32_t a_addr = smem_u32(a_s + (kt % kStages) * kATile + wg * 64 * kRowBytes);
    const std::uint32_t b_addr = smem_u32(deq_s + (kt % 2) * kBTile);
    fence_operands(d);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kBK / 16; ++s) wgmma_m64n128k16(d, smem_desc(a_addr + s * 32), smem_desc(b_addr + s * 32));
    wgmma_commit();
    if (kt + 1 < ktiles) {  // widen the next tile while the tensor cores work on this one
      cp_async_wait_group<1>();
      __syncthreads();
      dequant_tile((kt + 1) % kStages, kt + 1, (kt + 1) % 2);
    }
    wgmma_wait_all();
    fence_operands(d);
    fence_proxy_async();  // this thread's cp.async and widened rows, for the next wgmma
    __syncthreads();
  }
  cp_async_wait_group<0>();

  // Fragment layout: warp wq of the warpgroup holds rows 16 wq + lane / 4 (+ 8); register 4j + e
  // holds column 8j + 2 (lane % 4) + (e % 2) of row + 8 (e / 2).
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int lr = wg * 64 + wq * 16 + lane / 4 + half * 8;
    if (lr >= mrows) continue;
    const std::int64_t row = row0 + lr;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const std::int64_t col = n0 + j * 8 + (lane % 4) * 2;
      const float v0 = d[4 * j + 2 * half], v1 = d[4 * j + 2 * half + 1];
      if (args.out_bf16) {
        *reinterpret_cast<__nv_bfloat162*>(static_cast<std::uint16_t*>(out) + row * args.ldo + col) =
            __floats2bfloat162_rn(v0, v1);
      } else {
        *reinterpret_cast<float2*>(static_cast<float*>(out) + row * args.ldo + col) = make_float2(v0, v1);
      }
    }
  }
#else
  __trap();
#endif
}
}  // namespace

void launch_moe_prefill_wgmma(const MmaGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.n / kBN), static_cast<unsigned>(grid_y), static_cast<unsigned>(grid_z));
  cudaFuncSetAttribute(moe_prefill_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  launch_chained(moe_prefill_wgmma_kernel, grid, kThreads, kSmem, stream, args);
}

}  // namespace deepinfer::ops::cuda
