// V4's grouped output projection wo_a (8 groups x [1024, 4096], FP8 e4m3 with 128x128 block scales as
// released) at decode batches 1..256 on Hopper's warpgroup MMA, straight from the FP8 blocks. The
// reference computes wo_a in bf16 (each weight = bf16(code x block scale), bf16 activations, f32 sums):
// here each thread widens its own A fragment's codes to exactly those bf16 weights in registers and runs
// bf16 wgmma m64nNTk16 with A from registers, B = the tokens' bf16 activations.
//
// Shape: a CTA owns 64 weight rows of one group (wgmma M) for NT tokens (8/16/32/64/128 by template, rows
// >= m zero-filled) over all of K; its two warpgroups take the two halves of K (a fixed split: from K
// only) and their partials are added in warpgroup order at the end, so a row's bits never depend on the
// batch. Each warpgroup streams its K half through its own cp.async ring of 128-K stages: the 64 x 128
// e4m3 weight tile (8 KB, 128-byte swizzled rows: conflict-free 16-byte reads) and the NT x 128 bf16
// activation tile (two 64-K halves, each NT x 128 bytes K-major, 128-byte swizzle: the wgmma B operand).
// Per 16-K step a thread reads 16 bytes of its two weight rows, picks its fragment's code pairs with one
// PRMT each and widens them to the host dequantisation's bf16 bits: by shifts and one exact bf16x2
// multiply where the block scale is a power of two (ue8m0: the checkpoints), else through f32 as the
// skinny bf16 kernel does. A stage's 8 fragments are built, then its 8 wgmmas issued; the accumulator
// chains across all of K in f32 (~320 SASS instructions a 128-K stage at 8 tokens).
//
// Layout facts (shared with fp8_wgmma_decode.cu / moe_prefill_wgmma.cu, confirmed on the H200 there and
// for this kernel by its one-hot placement test, 2026-11-30):
// smem descriptor: K-major, 128-byte swizzle, SBO 1024, tile bases 1024-aligned; the bf16 k16 step s of a
// 64-K swizzle row = descriptor start + 32 s bytes; accumulator register 4j + e of warp w, lane l =
// (row 16 w + l / 4 + 8 (e / 2), column 8 j + 2 (l % 4) + e % 2). The register-A fragment of
// m64nNk16.bf16 is mma.sync m16n8k16's A fragment per warp (warp w of the warpgroup: rows 16w..16w+15):
// a[0] = (row l / 4, K 2 (l % 4) + {0, 1}), a[1] = 8 rows below, a[2] / a[3] = the same at K + 8.
#include <algorithm>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/grouped_fp8_wgmma.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace deepinfer::ops::cuda {
namespace {

using wgmma::fence_operands;
using wgmma::fence_proxy_async;
using wgmma::smem_desc;
using wgmma::swizzled;
using wgmma::wgmma_bf16_rs;
using wgmma::wgmma_commit;
using wgmma::wgmma_fence;
using wgmma::wgmma_wait_all;

constexpr int kWarpgroups = 2;  // K halves per CTA
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kRowsW = 64;            // weight rows per CTA (wgmma M)
constexpr int kBK = 128;              // K per stage: one 128x128 scale block, one 128-byte e4m3 row
constexpr int kWTile = kRowsW * kBK;  // 8 KB of e4m3

template <int NT>
struct Cfg {
  // Stages per warpgroup: 5 x 8 KB of weights in flight per warpgroup at 8 tokens (batch 1: one CTA
  // per SM, two rings), fewer for wider token tiles (one 120 KB-164 KB CTA per SM; 128 tokens: 40 KB
  // stages, two per warpgroup).
  static constexpr int kStages = NT <= 8 ? 6 : NT <= 16 ? 5 : NT <= 32 ? 4 : NT <= 64 ? 3 : 2;
  static constexpr int kBTile = NT * kBK * 2;       // bf16: two 64-K halves of NT x 128 bytes
  static constexpr int kStage = kWTile + kBTile;    // multiple of 1024: tile bases stay aligned
  static constexpr int kRing = kStages * kStage;    // one warpgroup's ring
  static constexpr int kSmem = kWarpgroups * kRing + 1024;  // + alignment slack
  static_assert(NT % 8 == 0 && NT * 128 % 1024 == 0, "B halves must stay 1024-aligned");
  static_assert(NT / 2 * 128 * 4 <= kWarpgroups * kRing, "the partial sums fit the idle rings");
  static_assert(kSmem + 1024 <= 228 * 1024, "a CTA fits an SM's shared memory");
};

__device__ __forceinline__ uint4 lds128(std::uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// e4m3x2_to_bf16x2 (device_formats.cuh) for a power-of-two scale 2^p (ue8m0, or f32 with a zero mantissa), where code x
// 2^p is a bf16 value exactly: the codes sit in bytes 1 and 3 of `q` (sign bit 15 / 31 already where bf16 has it);
// exponent and mantissa move right by 4 (bf16 exponent 4 bits wider, bias 127 vs 7: the bits read as
// code x 2^-120, e4m3 subnormals as bf16 subnormals), then one exact bf16x2 multiply by 2^(120 + p).
__device__ __forceinline__ std::uint32_t widen_e4m3x2_pow2(std::uint32_t q, std::uint32_t mul) {
  const std::uint32_t bits = (q & 0x80008000u) | ((q & 0x7f007f00u) >> 4);
  std::uint32_t out;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(bits), "r"(mul));
  return out;
}

// A stage scale's bf16x2 multiplier 2^(120 + p) when the scale is 2^p with 120 + p + 127 a normal bf16
// exponent (p <= 7), else 0 (the f32 widening then).
__device__ __forceinline__ std::uint32_t pow2_multiplier(float scale) {
  const std::uint32_t bits = __float_as_uint(scale), e = bits >> 23;
  if ((bits & 0x807fffffu) != 0 || e == 0 || e > 134) return 0u;
  return ((e + 120u) << 7) * 0x10001u;
}

// Warpgroup barrier over its 128 threads (ids 1, 2: 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

__device__ __forceinline__ float scale_at(const GroupedFp8WgmmaArgs& args, const std::uint8_t* row, std::int64_t col) {
  return args.scale_f32 ? __ldg(reinterpret_cast<const float*>(row) + col) : ue8m0_to_f32(__ldg(row + col));
}

// Grid: token tiles x groups x (n / 64), the token tile fastest (the CTAs that share a weight tile run
// together: one HBM read, the others from L2). SB = scale blocks per 128-K stage: 1 (128x128 blocks) or
// 4 (32x32: a k16 step's scale is its 32-K block's).
template <int NT, int SB>
__global__ void __launch_bounds__(kThreads, 1) grouped_fp8_wgmma_kernel(GroupedFp8WgmmaArgs args) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Cfg<NT>;
  constexpr int kStages = C::kStages, kAhead = kStages - 1;  // stages loading while one is consumed
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  std::uint8_t* smem = smem_in + ((1024 - smem_u32(smem_in) % 1024) % 1024);

  const int tid = threadIdx.x, wg = tid / 128, t128 = tid % 128;
  const int lane = tid % 32, wq = t128 / 32, g = lane / 4, tq = lane % 4;
  const int m = static_cast<int>(args.x.rows);
  const int token_tiles = (m + NT - 1) / NT;
  const std::int64_t row_tiles = args.n / kRowsW;
  const int tok_tile = static_cast<int>(blockIdx.x % token_tiles);
  const std::int64_t wt = blockIdx.x / token_tiles;
  const int grp = static_cast<int>(wt / row_tiles);
  const std::int64_t n0 = (wt % row_tiles) * kRowsW;
  const int row0 = tok_tile * NT;
  const int mrows = min(NT, m - row0);
  const int kb_total = static_cast<int>(args.k / kBK);
  const int per_wg = (kb_total + kWarpgroups - 1) / kWarpgroups;
  const int kb0 = wg * per_wg;
  const int nk = max(0, min(per_wg, kb_total - kb0));

  std::uint8_t* ring = smem + wg * C::kRing;
  const auto* w_bytes = static_cast<const std::uint8_t*>(args.w[grp]);
  const auto* x_base = static_cast<const std::uint16_t*>(args.x.base) + static_cast<std::int64_t>(grp) * args.k;
  // This warp's 16 weight rows lie in one scale row (block 128: the CTA's 64; block 32: 16w..16w+15).
  const std::int64_t bytes_per_scale = args.scale_f32 ? 4 : 1;
  const auto* scale_row = static_cast<const std::uint8_t*>(args.w_scale[grp]) +
                          ((n0 + 16 * wq) / args.block) * args.scale_ld * bytes_per_scale;

  // Per-thread copy addresses, fixed but for the stage: weight chunk c = t128 % 8 of rows t128 / 8 + 16 i
  // (their swizzle phase r % 8 is the same for every i: 2048 bytes apart in shared memory), activation
  // chunk t128 % 16 of token rows t128 / 16 + 8 i (1024 bytes apart).
  const std::uint32_t ring_s = smem_u32(ring);
  const std::uint8_t* w_src = w_bytes + (n0 + t128 / 8) * args.k + static_cast<std::int64_t>(kb0) * kBK + (t128 % 8) * 16;
  const std::uint32_t w_dst = swizzled(t128 / 8, t128 % 8);
  const int xr = t128 / 16, xc = t128 % 16;
  const std::uint16_t* x_src = x_base + static_cast<std::int64_t>(row0 + xr) * args.x.stride +
                               static_cast<std::int64_t>(kb0) * kBK + xc * 8;
  const std::uint32_t x_dst = kWTile + (xc / 8) * NT * 128 + swizzled(xr, xc % 8);
  auto load_weights = [&](std::uint32_t stage_s, int s) {  // stage base, K block kb0 + s
#pragma unroll
    for (int i = 0; i < kRowsW * 8 / 128; ++i)  // 4 16-byte chunks per thread
      cp_async_weight16(stage_s + w_dst + i * 2048, w_src + static_cast<std::int64_t>(16 * i) * args.k + s * kBK);
  };
  auto load_acts = [&](std::uint32_t stage_s, int s) {
    static_assert(NT * 16 % 128 == 0, "whole chunk rounds");
#pragma unroll
    for (int i = 0; i < NT * 16 / 128; ++i) {  // NT rows x 16 chunks of 8 bf16
      const bool valid = xr + 8 * i < mrows;
      const std::uint16_t* src = valid ? x_src + static_cast<std::int64_t>(8 * i) * args.x.stride + s * kBK : x_base;
      cp_async16_zfill(stage_s + x_dst + i * 1024, src, valid);
    }
  };

  float acc[NT / 2];
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;

  // The prologue's weight stages are immutable: they stream in before the wait for the previous kernel;
  // the activations only after it. Stage s is cp.async group s (the weights all ride in group 0), so
  // stage t's group always has kAhead - 1 newer ones when it is waited for.
#pragma unroll
  for (int s = 0; s < kAhead; ++s)
    if (s < nk) load_weights(ring_s + s * C::kStage, s);
  float sc[SB];
#pragma unroll
  for (int sb = 0; sb < SB; ++sb) sc[sb] = nk > 0 ? scale_at(args, scale_row, kb0 * SB + sb) : 0.0f;
  grid_dependency_wait();
  allow_dependents_early();
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < nk) load_acts(ring_s + s * C::kStage, s);
    cp_async_commit_group();
  }

  // Thread (g, tq)'s fragment pairs: bytes 2 tq, 2 tq + 1 of each 8-byte half of a 16-K chunk, as the low
  // half (f32 widening) or as bytes 1 and 3 (power-of-two widening).
  const std::uint32_t sel = static_cast<std::uint32_t>(2 * tq) | static_cast<std::uint32_t>(2 * tq + 1) << 4;
  const std::uint32_t sel13 = static_cast<std::uint32_t>(2 * tq) << 4 | static_cast<std::uint32_t>(2 * tq + 1) << 12;
  // Row r_lo's chunk j of a stage lies at base + r_lo * 128 + ((j ^ r_lo % 8) << 4) = (base + row_off) ^ (j << 4)
  // (the base is 1024-aligned); row r_lo + 8's is 1024 bytes further.
  const int r_lo = 16 * wq + g;
  const auto row_off = static_cast<std::uint32_t>(r_lo * 128 + ((r_lo % 8) << 4));
  // Stage t reads ring buffer t % kStages and refills buffer (t + kAhead) % kStages: the one read at t - 1.
  const std::uint32_t ring_end = ring_s + (kStages - 1) * C::kStage;
  std::uint32_t read_s = ring_s, write_s = ring_s + kAhead * C::kStage;
  // The B descriptor's high word (SBO 1024, 128-byte swizzle) and low word (start >> 4, LBO 16 bytes).
  constexpr std::uint32_t kDescHi = static_cast<std::uint32_t>(1024 >> 4) | (1u << 30);
  for (int t = 0; t < nk; ++t) {
    cp_async_wait_group<kAhead - 1>();  // this thread's copies of stage t have landed
    fence_proxy_async();                // ... and are visible to the async proxy (wgmma)
    warpgroup_sync(wg);                 // everyone's copies; everyone's wgmmas of stage t - 1 are done
    if (t + kAhead < nk) {
      load_weights(write_s, t + kAhead);
      load_acts(write_s, t + kAhead);
    }
    cp_async_commit_group();
    float sc_next[SB];
#pragma unroll
    for (int sb = 0; sb < SB; ++sb) sc_next[sb] = t + 1 < nk ? scale_at(args, scale_row, (kb0 + t + 1) * SB + sb) : 0.0f;

    const std::uint32_t a_addr = read_s;
    read_s = read_s == ring_end ? ring_s : read_s + C::kStage;
    write_s = write_s == ring_end ? ring_s : write_s + C::kStage;
    const std::uint32_t a_row = a_addr + row_off;
    std::uint32_t mul[SB];
    bool pow2 = true;
#pragma unroll
    for (int sb = 0; sb < SB; ++sb) {
      mul[sb] = pow2_multiplier(sc[sb]);
      pow2 = pow2 && mul[sb] != 0u;
    }
    std::uint32_t frag[kBK / 16][4];
    if (pow2) {  // warp-uniform: the warp's rows share their scales
#pragma unroll
      for (int j = 0; j < kBK / 16; ++j) {
        const std::uint32_t at = a_row ^ static_cast<std::uint32_t>(j << 4);
        const uint4 lo = lds128(at), hi = lds128(at + 1024);
        const std::uint32_t f = mul[j * SB / (kBK / 16)];
        frag[j][0] = widen_e4m3x2_pow2(__byte_perm(lo.x, lo.y, sel13), f);
        frag[j][1] = widen_e4m3x2_pow2(__byte_perm(hi.x, hi.y, sel13), f);
        frag[j][2] = widen_e4m3x2_pow2(__byte_perm(lo.z, lo.w, sel13), f);
        frag[j][3] = widen_e4m3x2_pow2(__byte_perm(hi.z, hi.w, sel13), f);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kBK / 16; ++j) {
        const std::uint32_t at = a_row ^ static_cast<std::uint32_t>(j << 4);
        const uint4 lo = lds128(at), hi = lds128(at + 1024);
        const float s = sc[j * SB / (kBK / 16)];
        frag[j][0] = e4m3x2_to_bf16x2(__byte_perm(lo.x, lo.y, sel), s);
        frag[j][1] = e4m3x2_to_bf16x2(__byte_perm(hi.x, hi.y, sel), s);
        frag[j][2] = e4m3x2_to_bf16x2(__byte_perm(lo.z, lo.w, sel), s);
        frag[j][3] = e4m3x2_to_bf16x2(__byte_perm(hi.z, hi.w, sel), s);
      }
    }
#pragma unroll
    for (int j = 0; j < kBK / 16; ++j) fence_operands(frag[j]);
    fence_operands(acc);
    wgmma_fence();  // the fragment registers were just written
    // k16 step j: 64-K half j / 4 of the B tile, 32 bytes per step inside its swizzled rows.
    const std::uint32_t desc_lo = (((a_addr + kWTile) & 0x3ffffu) >> 4) | (1u << 16);
#pragma unroll
    for (int j = 0; j < kBK / 16; ++j) {
      const std::uint32_t lo = desc_lo + static_cast<std::uint32_t>(((j / 4) * NT * 128 + (j % 4) * 32) >> 4);
      wgmma_bf16_rs(acc, frag[j], static_cast<std::uint64_t>(kDescHi) << 32 | lo);
    }
    wgmma_commit();
    wgmma_wait_all();
    fence_operands(acc);
#pragma unroll
    for (int j = 0; j < kBK / 16; ++j) fence_operands(frag[j]);  // live until the wgmmas read them
#pragma unroll
    for (int sb = 0; sb < SB; ++sb) sc[sb] = sc_next[sb];
  }
  cp_async_wait_group<0>();

  // Warpgroup 1's partial joins warpgroup 0's through shared memory (the rings are idle now).
  __syncthreads();
  auto* red = reinterpret_cast<float*>(smem);
  if (wg == 1) {
#pragma unroll
    for (int i = 0; i < NT / 2; ++i) red[i * 128 + t128] = acc[i];
  }
  __syncthreads();
  if (wg != 0) return;
  const std::int64_t col0 = static_cast<std::int64_t>(grp) * args.n + n0 + 16 * wq + g;
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int token = 8 * j + 2 * tq + (e % 2);
      if (token >= mrows) continue;
      const float v = acc[4 * j + e] + red[(4 * j + e) * 128 + t128];
      const std::int64_t at = static_cast<std::int64_t>(row0 + token) * args.ldo + col0 + 8 * (e / 2);
      if (args.out_bf16) {
        static_cast<std::uint16_t*>(args.out)[at] = f32_to_bf16_bits(v);
      } else {
        static_cast<float*>(args.out)[at] = v;
      }
    }
#else
  __trap();
#endif
}

template <int NT, int SB>
void launch_nt(const GroupedFp8WgmmaArgs& args, cudaStream_t stream) {
  const std::int64_t token_tiles = (args.x.rows + NT - 1) / NT;
  const dim3 grid(static_cast<unsigned>(token_tiles * args.groups * (args.n / kRowsW)));
  constexpr int smem = Cfg<NT>::kSmem;
  // Per call, not cached: the attribute belongs to the current device, and setting it is cheap.
  cudaFuncSetAttribute(grouped_fp8_wgmma_kernel<NT, SB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  launch_chained(grouped_fp8_wgmma_kernel<NT, SB>, grid, dim3(kThreads), smem, stream, args);
}

// 8 / 16 / 32 / 64 tokens a tile by row count, above 64 rows 128 (wide tiles: each weight widened once
// per 128 tokens, half the weight reads from L2; H200: 31.6 vs 39.3 us at 128 rows, 60.8 vs 76.4 at 256).
template <int SB>
void launch_sb(const GroupedFp8WgmmaArgs& args, cudaStream_t stream) {
  if (args.x.rows <= 8) {
    launch_nt<8, SB>(args, stream);
  } else if (args.x.rows <= 16) {
    launch_nt<16, SB>(args, stream);
  } else if (args.x.rows <= 32) {
    launch_nt<32, SB>(args, stream);
  } else if (args.x.rows <= 64 || !args.wide_tiles) {
    launch_nt<64, SB>(args, stream);
  } else {
    launch_nt<128, SB>(args, stream);
  }
}

}  // namespace

void launch_grouped_fp8_wgmma(const GroupedFp8WgmmaArgs& args, cudaStream_t stream) {
  if (args.x.rows <= 0 || args.n <= 0 || args.groups <= 0) return;
  if (args.block == 32) {
    launch_sb<4>(args, stream);
  } else {
    launch_sb<1>(args, stream);
  }
}

}  // namespace deepinfer::ops::cuda
