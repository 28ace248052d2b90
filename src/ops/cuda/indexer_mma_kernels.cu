// Lightning-indexer scores on bf16 tensor cores for prefill-sized steps: out[t, s] = Σ_h w[t, h] ·
// ReLU(q[t, h] · k[row_base[t] + s]). A block stages one token's H query rows and 64 of its keys in
// shared memory (cp.async); warp i multiplies heads 16i..16i+15 with the 64 keys (mma.sync m16n8k16,
// f32 accumulators); the weighted ReLU sums run over a warp's heads by a fixed shuffle tree and over
// warps in warp order, so a score depends on its token's q, keys and weights only.
#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kKeys = 64;  // keys per block

__host__ __device__ constexpr int row_ld(int d) { return d + 8; }  // bf16 per shared row: conflict-free ldmatrix
std::size_t smem_bytes(int heads, int d) {
  return static_cast<std::size_t>(heads + kKeys) * row_ld(d) * 2 + static_cast<std::size_t>(heads / 16) * kKeys * 4;
}

// grid (ceil(width / kKeys), T), heads / 16 warps.
__global__ void __launch_bounds__(256) indexer_mma_kernel(IndexerArgs a) {
  enter_dependent_kernel();
  extern __shared__ __align__(16) std::uint8_t smem[];
  __shared__ std::int64_t rows_s[kKeys];
  const int ld = row_ld(a.d);
  auto* q_s = reinterpret_cast<std::uint16_t*>(smem);  // [H][ld]
  std::uint16_t* k_s = q_s + a.heads * ld;              // [kKeys][ld]
  auto* red_s = reinterpret_cast<float*>(k_s + kKeys * ld);  // [warps][kKeys]
  const std::int64_t t = blockIdx.y;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x) * kKeys;
  const std::int64_t count = a.num_keys[t], base = a.row_base[t];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, warps = blockDim.x / 32;
  if (s0 >= count) {  // a tile past this token's keys
    for (int j = tid; j < kKeys; j += blockDim.x)
      if (s0 + j < a.width) a.out[t * a.out_stride + s0 + j] = -INFINITY;
    return;
  }
  for (int j = tid; j < kKeys; j += blockDim.x) {
    std::int64_t phys = -1;
    if (s0 + j < count) {
      phys = physical_row(a.keys, base + s0 + j);
      if (phys < 0) report_fault(a.err, DeviceFault::kPageTable, base + s0 + j, a.keys.rows.rows);
    }
    rows_s[j] = phys;
  }
  __syncthreads();
  const int chunks = a.d / 8;
  const auto* qb = static_cast<const std::uint16_t*>(a.q.base);
  for (int idx = tid; idx < a.heads * chunks; idx += blockDim.x) {
    const int h = idx / chunks, c = idx % chunks;
    cp_async16_zfill(smem_u32(q_s + h * ld + c * 8), qb + (t * a.heads + h) * a.q.stride + c * 8, true);
  }
  const auto* kb = static_cast<const std::uint16_t*>(a.keys.rows.base);
  for (int idx = tid; idx < kKeys * chunks; idx += blockDim.x) {
    const int j = idx / chunks, c = idx % chunks;
    const std::int64_t r = rows_s[j];
    cp_async16_zfill(smem_u32(k_s + j * ld + c * 8), r >= 0 ? kb + r * a.keys.rows.stride + c * 8 : kb, r >= 0);
  }
  cp_async_commit_group();
  cp_async_wait_group<0>();
  __syncthreads();

  float acc[kKeys / 8][4] = {};
  for (int kk = 0; kk < a.d / 16; ++kk) {
    std::uint32_t af[4];
    ldsm_x4(smem_u32(q_s + (warp * 16 + lane % 16) * ld + kk * 16 + (lane / 16) * 8), af);
#pragma unroll
    for (int nf2 = 0; nf2 < kKeys / 16; ++nf2) {
      std::uint32_t bf[4];
      ldsm_x4(smem_u32(k_s + (nf2 * 16 + (lane / 16) * 8 + lane % 8) * ld + kk * 16 + ((lane / 8) % 2) * 8), bf);
      mma_m16n8k16_bf16(acc[2 * nf2], af, bf[0], bf[1]);
      mma_m16n8k16_bf16(acc[2 * nf2 + 1], af, bf[2], bf[3]);
    }
  }
  // Thread (g, tig) holds heads g and g + 8 of its warp for keys nf·8 + 2·tig + e.
  const int g = lane / 4, tig = lane % 4;
  const float w0 = a.weights[t * a.heads + warp * 16 + g], w1 = a.weights[t * a.heads + warp * 16 + g + 8];
#pragma unroll
  for (int nf = 0; nf < kKeys / 8; ++nf)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float part = w0 * fmaxf(acc[nf][e], 0.0f) + w1 * fmaxf(acc[nf][2 + e], 0.0f);
      part += __shfl_xor_sync(0xffffffffu, part, 4);
      part += __shfl_xor_sync(0xffffffffu, part, 8);
      part += __shfl_xor_sync(0xffffffffu, part, 16);
      if (g == 0) red_s[warp * kKeys + nf * 8 + tig * 2 + e] = part;
    }
  __syncthreads();
  for (int j = tid; j < kKeys; j += blockDim.x) {
    const std::int64_t s = s0 + j;
    if (s >= a.width) continue;
    float total = 0.0f;
    for (int i = 0; i < warps; ++i) total += red_s[i * kKeys + j];
    a.out[t * a.out_stride + s] = s < count ? total : -INFINITY;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool indexer_mma_eligible(const IndexerArgs& a) {
  return a.q.bf16 && a.keys.rows.bf16 && a.d % 16 == 0 && a.d <= 256 && a.heads % 16 == 0 && a.heads <= 128 &&
         aligned16(a.q.base) && a.q.stride % 8 == 0 && aligned16(a.keys.rows.base) && a.keys.rows.stride % 8 == 0;
}

void launch_indexer_scores_mma(const IndexerArgs& args, std::int64_t tokens, cudaStream_t stream) {
  if (tokens == 0 || args.width == 0) return;
  const std::size_t smem = smem_bytes(args.heads, args.d);
  cudaFuncSetAttribute(indexer_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((args.width + kKeys - 1) / kKeys), static_cast<unsigned>(tokens));
  launch_chained(indexer_mma_kernel, grid, static_cast<unsigned>(args.heads / 16 * 32), smem, stream, args);
}

}  // namespace deepinfer::ops::cuda
