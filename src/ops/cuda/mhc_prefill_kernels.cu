// mHC mixing dot products for prefill-sized steps: the per-slice partial sums of hc_mix_partial_kernel
// (mhc_compressor_kernels.cu) with one block per (slice, 64 tokens), so the slice of fn is read once
// per 64 tokens instead of once per token (8K tokens: 12.6 GB of L2 reads per call). Every partial
// sums exactly like that kernel — products fmaf(fn, x, 0), a 32-lane xor-tree per 32 columns, the 16
// trees in column order — so both give the same bits and a row never depends on the batch.
#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kSlice = 512;     // columns per partial (hc_mix_partial_kernel's kHcSplit)
constexpr int kHalf = 256;      // columns staged in shared memory at a time
constexpr int kTokens = 64;     // tokens per block: 32 lanes × 2
constexpr int kOuts = 5;        // outputs (mixes or the sum of squares) per thread
constexpr int kMaxMixes = 24;   // fn rows staged (n_mix <= 24: n <= 4, or the head's n)

// The xor-tree sum of warp_sum() over 32 leaves (two trees at once: .x and .y), evaluated depth-first:
// leaf q of the walk is column bitrev5(q), and each completed subtree adds its right (higher-column)
// half to its left, as lane 0 of the shuffle tree does.
template <typename Leaf>
__device__ __forceinline__ float2 tree32x2(Leaf leaf) {
  float2 stack[5];
#pragma unroll
  for (int q = 0; q < 32; ++q) {
    const int col = ((q & 1) << 4) | ((q & 2) << 2) | (q & 4) | ((q & 8) >> 2) | ((q & 16) >> 4);
    float2 v = leaf(col);
#pragma unroll
    for (int lvl = 0; lvl < 5; ++lvl) {
      if (((q >> lvl) & 1) == 0) {
        stack[lvl] = v;
        break;
      }
      v = make_float2(stack[lvl].x + v.x, stack[lvl].y + v.y);
      if (lvl == 4) stack[0] = v;  // the root (q = 31)
    }
  }
  return stack[0];
}

// grid (slices, ceil(T / kTokens)), (ceil((n_mix + 1) / kOuts)) warps. Thread (warp g, lane l): tokens
// 2l and 2l + 1 of the tile, outputs g·kOuts + j (output n_mix = Σ x²).
__global__ void __launch_bounds__(kOuts * 32) hc_mix_partial_prefill_kernel(HcArgs a, int n_mix) {
  enter_dependent_kernel();
  extern __shared__ __align__(16) float smem[];
  float* xs = smem;                    // [kHalf][kTokens]: the x tile, transposed
  float* fs = smem + kHalf * kTokens;  // [n_mix][kHalf]
  const int slice = blockIdx.x, slices = gridDim.x;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.y) * kTokens;
  const std::int64_t width = a.n * a.d;
  const int tid = threadIdx.x, lane = tid % 32, g = tid / 32;
  const auto* xb = static_cast<const std::uint16_t*>(a.x.base);
  float total[kOuts][2];
#pragma unroll
  for (int j = 0; j < kOuts; ++j) total[j][0] = total[j][1] = 0.0f;
  for (int half = 0; half < kSlice / kHalf; ++half) {
    const std::int64_t c0 = static_cast<std::int64_t>(slice) * kSlice + half * kHalf;
    __syncthreads();
    // x: 16-byte loads of 8 columns, stored transposed (lanes = consecutive tokens: no bank conflicts).
    for (int idx = tid; idx < kTokens * (kHalf / 8); idx += blockDim.x) {
      const int tt = idx % kTokens, ch = idx / kTokens;
      const std::int64_t t = t0 + tt, c = c0 + ch * 8;
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (t < a.x.rows && c < width) raw = *reinterpret_cast<const uint4*>(xb + t * a.x.stride + c);
      const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const std::uint32_t bits = e % 2 ? (w[e / 2] & 0xffff0000u) : (w[e / 2] << 16);
        xs[(ch * 8 + e) * kTokens + tt] = __uint_as_float(bits);
      }
    }
    for (int idx = tid; idx < n_mix * kHalf; idx += blockDim.x) {
      const int m = idx / kHalf, i = idx % kHalf;
      fs[m * kHalf + i] = c0 + i < width ? a.fn[m * width + c0 + i] : 0.0f;
    }
    __syncthreads();
#pragma unroll 1
    for (int chunk = 0; chunk < kHalf / 32; ++chunk) {
#pragma unroll
      for (int j = 0; j < kOuts; ++j) {
        const int o = g * kOuts + j;
        if (o > n_mix) break;
        const float2 root = tree32x2([&](int col) {
          const float2 xv = *reinterpret_cast<const float2*>(xs + (chunk * 32 + col) * kTokens + 2 * lane);
          const float fa = o == n_mix ? xv.x : fs[o * kHalf + chunk * 32 + col];
          const float fb = o == n_mix ? xv.y : fa;
          return make_float2(fmaf(fa, xv.x, 0.0f), fmaf(fb, xv.y, 0.0f));
        });
        total[j][0] += root.x;
        total[j][1] += root.y;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const std::int64_t t = t0 + 2 * lane + k;
    if (t >= a.x.rows) continue;
    float* out = a.partial + (t * slices + slice) * (n_mix + 1);
#pragma unroll
    for (int j = 0; j < kOuts; ++j) {
      const int o = g * kOuts + j;
      if (o <= n_mix) out[o] = total[j][k];
    }
  }
}

}  // namespace

bool launch_hc_mix_partial_prefill(const HcArgs& args, std::int64_t split, int threads, cudaStream_t stream) {
  const int n_mix = args.head ? args.n : (2 + args.n) * args.n;
  const std::int64_t width = static_cast<std::int64_t>(args.n) * args.d;
  const bool fits = args.x.rows >= kHcMixPrefillRows && split == kSlice && threads == kSlice && n_mix <= kMaxMixes &&
                    args.x.bf16 && args.x.stride % 8 == 0 && reinterpret_cast<std::uintptr_t>(args.x.base) % 16 == 0 &&
                    width % 8 == 0;
  if (!fits) return false;
  const dim3 grid(static_cast<unsigned>((width + kSlice - 1) / kSlice),
                  static_cast<unsigned>((args.x.rows + kTokens - 1) / kTokens));
  const int warps = (n_mix + 1 + kOuts - 1) / kOuts;
  const std::size_t smem = static_cast<std::size_t>(kHalf) * (kTokens + n_mix) * sizeof(float);
  cudaFuncSetAttribute(hc_mix_partial_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(kHalf * (kTokens + kMaxMixes) * sizeof(float)));
  launch_chained(hc_mix_partial_prefill_kernel, grid, static_cast<unsigned>(warps * 32), smem, stream, args, n_mix);
  return true;
}

}  // namespace deepinfer::ops::cuda
