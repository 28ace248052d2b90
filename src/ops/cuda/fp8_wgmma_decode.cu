// FP8 dense decode GEMM on Hopper's warpgroup MMA (sm_90a wgmma, e4m3 x e4m3 -> f32): out[row, n] =
// Σ_k W[n, k] x[row, k] for 1..64 activation rows. On sm_90 only wgmma multiplies fp8 natively
// (mma.sync e4m3 is emulated), so this is the decode path that can stream weights at HBM speed.
//
// Shape: one warpgroup (128 threads) per CTA owns 64 weight rows (the wgmma A operand, M = 64); the
// tokens are B (wgmma N = NT = 8/16/32/64, rows >= m zero-filled). Both operands sit K-major in
// 128-byte-swizzled shared memory: one stage = one 128-K block = one 128-byte swizzle row per weight
// row / token, filled by cp.async (6 stages deep at 8 tokens, fewer for wider token tiles so that 4
// CTAs fit an SM: wq_b's 512 CTAs then run in one wave). Per stage: 4 wgmma m64nNTk32 (the first with
// scale-d = 0, so d holds that block's partial alone), then acc += d · (weight block scale x the
// token's act block scale) in f32 — the 128-K promotion of DeepSeek's block-scaled FP8 GEMM. V4.1's
// 32x32 weight blocks with 32-wide act blocks: each of the 4 K steps is its own partial, promoted
// with its own scales (up to 32 tokens: 4 partial sets of registers).
// K is split across CTAs (grid.y) by a count from (N, K) and the SM count only, never from M; the
// split partials are summed in split order by launch_splitk_reduce, or (tile_flags) by the last CTA
// of each tile in the same order (finish_splits: no reduce launch). The act codes come from
// launch_act_quant_codes, or (fused_quant, <= 8 rows) from the same quant run by each CTA over its own
// K range after its wait, while its weight prologue streams (no act-quant launch). An older fused
// prologue (983c547) was 2-3x slower: it reserved shared memory for 4096 K of codes in every CTA and
// rounded to e4m3 in software (~15 instructions an element, before the first wgmma); this one sizes the
// codes by the CTA's K range and rounds with cvt.rn.satfinite.e4m3x2 (H200, wq_b at 8 rows: 12.2 us,
// 18.2 with the software rounding, 12.4 with the act-quant launch).
//
// Layout assumptions, all confirmed by the first device run (2026-11-30: the one-tile probe under
// compute-sanitizer, the decode shapes within 1e-3, the same bits alone and in a batch):
//  A1. smem_desc (wgmma_sm90.cuh) is right for fp8: K-major, 128-byte swizzle, SBO 1024 (8 rows of
//      128 bytes), LBO unused; the same bits as the verified bf16 kernel since a row is 128 bytes in both.
//  A2. Advancing the descriptor start by 32 bytes selects K sub-block s (32 e4m3) inside the swizzled
//      row (the bf16 kernel does the same with k16 = 32 bytes).
//  A3. swizzled(r, c) (16-byte chunk c of row r at r * 128 + ((c ^ (r & 7)) << 4)) is the pattern the
//      128-byte-swizzle mode reads, for the 64-row A tile and for B tiles of 8..64 rows (tile bases
//      1024-aligned).
//  A4. Accumulator fragment of m64nNk32 .f32: warp w of the warpgroup, lane l: register 4j + e holds
//      D[16 w + l / 4 + 8 (e / 2)][8 j + 2 (l % 4) + (e % 2)], j < N / 8 (M = weight row, N = token).
//  A5. A column's result does not depend on N (m64n8 vs m64n64 give the same bits per column): the
//      "same bits alone and in a batch" test checks it.
//  A6. Hopper's FP8 wgmma keeps enough precision over one 128-K block (4 chained k32 steps) for the
//      1e-3 parity bound (DeepSeek-V3 report 3.3.2: ~14-bit alignment; promoted every 128 K here).
#include <algorithm>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/skinny_mma.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace deepinfer::ops::cuda {
namespace fp8_wgmma {

// 4 bytes global -> shared, zero-filled when !valid (the act scales of padded token rows).
__device__ __forceinline__ void cp_async4_zfill(std::uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

// Two f32 already clamped to ±448 -> e4m3 codes (lo in the low byte), round to nearest even in one
// hardware conversion: for such inputs the same codes as f32_to_e4m3 (device_formats.cuh), whose
// software rounding costs ~15 instructions an element (the fused quant's bits test compares them).
__device__ __forceinline__ std::uint32_t e4m3x2(float lo, float hi) {
  std::uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace fp8_wgmma

namespace {

using fp8_wgmma::cp_async4_zfill;
using fp8_wgmma::e4m3x2;
using skinny::weight_scale_raw;
using skinny::weight_scale_value;
using wgmma::fence_operands;
using wgmma::fence_proxy_async;
using wgmma::smem_desc;
using wgmma::swizzled;
using wgmma::wgmma_commit;
using wgmma::wgmma_e4m3;
using wgmma::wgmma_fence;
using wgmma::wgmma_wait_all;

constexpr int kThreads = 128;  // one warpgroup
constexpr int kRowsW = 64;     // weight rows per CTA (wgmma M)
constexpr int kBK = 128;       // K per stage: one 128-byte swizzle row of e4m3, one scale block
// Split-K target: this many CTAs per SM streaming (4 measured the same as 2 on the whole model, 2026-11-30).
constexpr int kCtasPerSm = 2;
constexpr int kWTile = kRowsW * kBK;  // 8 KB

// Fused act quant: the 8-token tile only, at most this many 128-K blocks per CTA (codes in shared memory).
constexpr int kFusedRows = 8;
constexpr int kFusedMaxKBlocks = 32;

template <int NT, int SB, bool FUSED>
struct Cfg {
  // Stages of (64 weight rows + NT token rows) x 128 K: 6 at 8 tokens (5 x 8 KB of weights in flight),
  // fewer for wider token tiles so that 4 CTAs still fit an SM (228 KB). Fused: a stage carries weights
  // alone and the CTA's codes sit beside the ring, one swizzled NT x 128 tile per 128-K block of its
  // range; 5 stages keep 4 CTAs an SM up to 1024 K per CTA (wq_b's 512 CTAs in one wave).
  static constexpr int kStages = FUSED ? 5 : NT <= 8 ? 6 : NT <= 16 ? 5 : NT <= 32 ? 4 : 3;
  static constexpr int kStage = kWTile + (FUSED ? 0 : NT * kBK);  // multiple of 1024: tile bases stay aligned
  static constexpr int kXBlock = NT * kBK + SB * NT * 4;          // fused: codes + scales of one 128-K block
  // Bytes for a CTA range of `kblocks` 128-K blocks (+ alignment slack).
  static constexpr int smem(int kblocks) {
    return FUSED ? kStages * kStage + kblocks * kXBlock + 1024 : kStages * kStage + kStages * SB * NT * 4 + 1024;
  }
};

// Fused act quant (m <= NT = 8): bf16 rows [0, m) x 128-K blocks [kb0, kb0 + nk) -> e4m3 codes in the
// swizzled NT x 128 tiles codes + b * NT * 128 and scales xs[(b * SB + sb) * NT + row]; rows m..NT-1
// get zero codes and scales. Bit-identical to act_quant_warp_kernel's: a block's amax is order-free,
// its scale the same power of two s in [2^-22, 2^127], v * (1 / s) == v / s exactly for such s
// (no flush to zero in this build), and the hardware e4m3 rounding that of f32_to_e4m3. 16 threads per (row, 128-K block) with 8 elements each (an act
// block of 32 = 4 threads), R 16-byte loads in flight per thread: 8 rows x 2048 K = two L2 round trips.
template <int NT, int SB>
__device__ __forceinline__ void quantise_range(const Fp8WgmmaDecodeArgs& args, int kb0, int nk, std::uint8_t* codes,
                                               float* xs) {
  constexpr int R = 8, kGroup = 16 / SB;  // threads per act block
  const int tid = threadIdx.x, m = static_cast<int>(args.m), total = m * nk * 16;
  const auto* x = static_cast<const std::uint16_t*>(args.xr.base);
  for (int base = 0; base < total; base += kThreads * R) {
    uint4 raw[R];
    int row_block[R];  // row | block << 8, divided out once
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int idx = base + i * kThreads + tid;
      const int row = idx / (nk * 16), b = (idx / 16) - row * nk, c = idx % 16;
      row_block[i] = row | (b << 8);
      raw[i] = make_uint4(0u, 0u, 0u, 0u);
      if (idx < total)
        raw[i] = *reinterpret_cast<const uint4*>(x + row * args.xr.stride + (kb0 + b) * kBK + c * 8);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (base + i * kThreads >= total) break;  // uniform: whole rounds past the end
      const int idx = base + i * kThreads + tid;
      const int row = row_block[i] & 0xff, b = row_block[i] >> 8, c = idx % 16;
      const std::uint32_t words[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
      float v[8], amax = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[e] = __uint_as_float((e % 2) ? (words[e / 2] & 0xffff0000u) : (words[e / 2] << 16));
        amax = fmaxf(amax, fabsf(v[e]));
      }
      // idx runs in aligned groups of kGroup lanes per act block (total is a multiple of 16).
#pragma unroll
      for (int o = kGroup / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      if (idx >= total) continue;
      // s = 2^(E - 127) with E <= 254: 1 / s by its exponent (2^-127 is subnormal: E = 254 apart).
      const float s = fp8_block_scale(amax);
      const std::uint32_t biased = __float_as_uint(s) >> 23;
      const float inv = biased < 254u ? __uint_as_float((254u - biased) << 23) : __uint_as_float(0x00200000u);
      float q[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) q[e] = fminf(fmaxf(v[e] * inv, -kE4M3MaxF), kE4M3MaxF);
      std::uint32_t packed[2];
#pragma unroll
      for (int h = 0; h < 2; ++h)
        packed[h] = e4m3x2(q[4 * h], q[4 * h + 1]) | (e4m3x2(q[4 * h + 2], q[4 * h + 3]) << 16);
      *reinterpret_cast<uint2*>(codes + b * NT * kBK + swizzled(row, c / 2) + (c % 2) * 8) =
          make_uint2(packed[0], packed[1]);
      if (c % kGroup == 0) xs[(b * SB + c / kGroup) * NT + row] = s;
    }
  }
  // Padded token rows: zero codes and scales (their columns are never stored; zeros keep them finite).
  for (int i = tid; i < (NT - m) * nk * 8; i += kThreads) {
    const int row = m + i / (nk * 8), b = (i / 8) % nk, c = i % 8;
    *reinterpret_cast<uint4*>(codes + b * NT * kBK + swizzled(row, c)) = make_uint4(0u, 0u, 0u, 0u);
  }
  for (int i = tid; i < (NT - m) * nk * SB; i += kThreads) xs[(i % (nk * SB)) * NT + m + i / (nk * SB)] = 0.0f;
}

// A4: register 4j + e = (weight row 16 warp + lane / 4 + 8 (e / 2), token 8j + 2 (lane % 4) + e % 2).
template <int NT>
__device__ __forceinline__ void store_tile(const Fp8WgmmaDecodeArgs& args, const float (&acc)[NT / 2],
                                           std::int64_t n0) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, m = static_cast<int>(args.m);
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int token = 8 * j + 2 * (lane % 4) + (e % 2);
      if (token >= m) continue;
      const std::int64_t n = n0 + 16 * warp + lane / 4 + 8 * (e / 2);
      const float v = acc[4 * j + e];
      if (args.partial != nullptr) {
        args.partial[(static_cast<std::int64_t>(blockIdx.y) * args.m + token) * args.n + n] = v;
      } else if (args.out_bf16) {
        static_cast<std::uint16_t*>(args.out)[token * args.ldo + n] = f32_to_bf16_bits(v);
      } else {
        static_cast<float*>(args.out)[token * args.ldo + n] = v;
      }
    }
}

// Split-K fix-up (m <= kFp8WgmmaFixupMaxRows): the tile's CTAs count in after storing their partials
// (release: fence, then the atomic); the last one (acquire: fence after seeing the count) sums the
// tile's partials of every split in split order from 0.0f, as launch_splitk_reduce does, and resets the
// tile's counter for the next launch (which reads it only after its wait). The partials (other SMs
// wrote them: __ldcg, from L2) come into shared memory in chunks of up to kFixupStage bytes, every load
// of a chunk in flight at once (32 splits of one row: one L2 round trip), then thread i < 16 m adds
// float4 i of each split. `smem` is the kernel's shared memory: nothing reads it after the first
// barrier here (a static __shared__ word would pad the static area to the dynamic one's 1024-byte
// alignment, and 4 CTAs an SM would no longer fit).
constexpr int kFixupStage = 16 * 1024;

__device__ __forceinline__ void finish_splits(const Fp8WgmmaDecodeArgs& args, std::int64_t n0, std::uint8_t* smem) {
  int* last = reinterpret_cast<int*>(smem);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *last = atomicAdd(args.tile_flags + blockIdx.x, 1) == static_cast<int>(gridDim.y) - 1;
  __syncthreads();
  if (!*last) return;
  __threadfence();
  constexpr int U = kFixupStage / 16 / kThreads;  // float4 loads in flight per thread
  auto* stage = reinterpret_cast<float4*>(smem + 16);
  const int tid = threadIdx.x, m = static_cast<int>(args.m), splits = static_cast<int>(gridDim.y);
  const int row_f4 = m * (kRowsW / 4);                              // float4 of one split's tile rows (<= 128)
  const int chunk = min(splits, (kFixupStage / 16) / row_f4);       // splits per chunk
  const int token = tid / (kRowsW / 4), c4 = tid % (kRowsW / 4);
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s0 = 0; s0 < splits; s0 += chunk) {
    const int count = min(chunk, splits - s0) * row_f4;
    float4 q[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = tid + u * kThreads, s = s0 + j / row_f4, r = j % row_f4;
      q[u] = j < count ? __ldcg(reinterpret_cast<const float4*>(args.partial + (static_cast<std::int64_t>(s) * m +
                                                                              r / (kRowsW / 4)) * args.n +
                                                                n0 + (r % (kRowsW / 4)) * 4))
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (tid + u * kThreads < count) stage[tid + u * kThreads] = q[u];
    __syncthreads();
    if (tid < row_f4)
      for (int j = tid; j < count; j += row_f4) {
        const float4 p = stage[j];
        v[0] += p.x;
        v[1] += p.y;
        v[2] += p.z;
        v[3] += p.w;
      }
    __syncthreads();  // the next chunk overwrites the stage
  }
  if (tid < row_f4) {
    const std::int64_t n = n0 + c4 * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (args.out_bf16) {
        static_cast<std::uint16_t*>(args.out)[token * args.ldo + n + e] = f32_to_bf16_bits(v[e]);
      } else {
        static_cast<float*>(args.out)[token * args.ldo + n + e] = v[e];
      }
    }
  }
  if (tid == 0) args.tile_flags[blockIdx.x] = 0;
}

// Grid: (N / 64, splits). CTA (x, y) computes weight rows 64x..64x+63 over 128-K blocks
// [y * per_split, min(kb, (y + 1) * per_split)) for all m <= NT tokens. SB = scale blocks per 128-K
// stage: 1 for V4's 128x128 weight blocks and 128-wide act blocks (the 4 wgmma K steps chain into one
// partial), 4 for V4.1's 32x32 blocks and 32-wide act blocks (one partial per 32-K step, each scaled
// on its own, added in ascending K). FUSED: the codes and scales of the CTA's whole K range are
// quantised into shared memory after the wait (quantise_range) instead of streamed per stage.
template <int NT, int SB, bool FUSED>
__global__ void __launch_bounds__(kThreads) fp8_wgmma_decode_kernel(Fp8WgmmaDecodeArgs args) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Cfg<NT, SB, FUSED>;
  constexpr int kStages = C::kStages;
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  std::uint8_t* smem = smem_in + ((1024 - smem_u32(smem_in) % 1024) % 1024);
  // Unfused: scales [stage][SB][NT]; fused: codes [block][NT x 128] (1024-aligned), then scales [block][SB][NT].
  std::uint8_t* codes_s = smem + kStages * C::kStage;
  auto* xs_s = reinterpret_cast<float*>(codes_s + (FUSED ? args.kblocks_per_split * NT * kBK : 0));

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kRowsW;
  const int kb_total = static_cast<int>(args.k / kBK);
  const int kb0 = static_cast<int>(blockIdx.y) * args.kblocks_per_split;
  const int nk = min(args.kblocks_per_split, kb_total - kb0);
  const int m = static_cast<int>(args.m);
  const auto* w_bytes = static_cast<const std::uint8_t*>(args.w.data);
  // The weight-scale row: 128x128 blocks: the CTA's 64 rows share row n0 / 128; 32x32 blocks: this
  // thread's two rows (16 warp + lane / 4, + 8) share row (n0 + 16 warp) / 32.
  const std::int64_t ws_row = (SB == 1 ? n0 / kBK : (n0 + 16 * warp) / 32) * args.w.scale_ld;

  auto load_weights = [&](int stage, int kb) {
    std::uint8_t* w_dst = smem + stage * C::kStage;
#pragma unroll
    for (int i = 0; i < kRowsW * 8 / kThreads; ++i) {  // 4 16-byte chunks per thread
      const int idx = tid + i * kThreads, r = idx / 8, c = idx % 8;
      cp_async16_zfill(smem_u32(w_dst + swizzled(r, c)), w_bytes + (n0 + r) * args.k + kb * kBK + c * 16, true);
    }
  };
  auto load_acts = [&](int stage, int kb) {
    std::uint8_t* x_dst = smem + stage * C::kStage + kWTile;
#pragma unroll
    for (int i = 0; i < (NT * 8 + kThreads - 1) / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / 8, c = idx % 8;
      if (idx < NT * 8) {
        const bool valid = r < m;
        const std::uint8_t* src = valid ? args.x + r * args.ldx + kb * kBK + c * 16 : args.x;
        cp_async16_zfill(smem_u32(x_dst + swizzled(r, c)), src, valid);
      }
    }
    for (int i = tid; i < SB * NT; i += kThreads) {  // act scales [(k / block) * xs_ld + row]
      const int sb = i / NT, r = i % NT;
      const bool valid = r < m;
      const float* src = valid ? args.xs + static_cast<std::int64_t>(kb * SB + sb) * args.xs_ld + r : args.xs;
      cp_async4_zfill(smem_u32(xs_s + (stage * SB + sb) * NT + r), src, valid);
    }
  };

  float acc[NT / 2], d[SB][NT / 2];
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) {
    acc[i] = 0.0f;
#pragma unroll
    for (int sb = 0; sb < SB; ++sb) d[sb][i] = 0.0f;
  }

  // The prologue's weight stages and scales are immutable: they stream in before the wait for the
  // previous kernel (the act quant, when launched as its dependent); the act codes only after it.
  // The prologue is one cp.async group, waited for whole at t = 0; then one group per stage, so at
  // t >= kStages - 1 stage t's group has kStages - 2 newer ones.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < nk) load_weights(s, kb0 + s);
  std::uint32_t ws_raw[SB];
#pragma unroll
  for (int sb = 0; sb < SB; ++sb) ws_raw[sb] = nk > 0 ? weight_scale_raw(args.w, ws_row + kb0 * SB + sb) : 0u;
  grid_dependency_wait();
  allow_dependents_early();
  if constexpr (FUSED) {
    cp_async_commit_group();  // the weight prologue streams while this CTA quantises its K range
    quantise_range<NT, SB>(args, kb0, nk, codes_s, xs_s);  // visible to wgmma after the fence at t = 0
  } else {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s)
      if (s < nk) load_acts(s, kb0 + s);
    cp_async_commit_group();
  }
  for (int t = 0; t < nk; ++t) {
    if (t == 0) {
      cp_async_wait_group<0>();
    } else {
      cp_async_wait_group<kStages - 2>();  // this thread's copies of stage t have landed
    }
    fence_proxy_async();                 // ... and are visible to the async proxy (wgmma)
    __syncthreads();                     // everyone's copies; everyone is done with stage t - 1
    if (t + kStages - 1 < nk) {
      load_weights((t + kStages - 1) % kStages, kb0 + t + kStages - 1);
      if constexpr (!FUSED) load_acts((t + kStages - 1) % kStages, kb0 + t + kStages - 1);
    }
    cp_async_commit_group();
    std::uint32_t ws_next[SB];
#pragma unroll
    for (int sb = 0; sb < SB; ++sb)
      ws_next[sb] = t + 1 < nk ? weight_scale_raw(args.w, ws_row + (kb0 + t + 1) * SB + sb) : 0u;

    const int stage = t % kStages;
    const std::uint32_t a_addr = smem_u32(smem + stage * C::kStage);
    const std::uint32_t b_addr = FUSED ? smem_u32(codes_s + t * NT * kBK) : a_addr + kWTile;
#pragma unroll
    for (int sb = 0; sb < SB; ++sb) fence_operands(d[sb]);
    wgmma_fence();
    // K step s: 32 e4m3 = 32 bytes into each 128-byte swizzled row. SB = 1: the steps chain (scale-d
    // = s); SB = 4: each step starts its own partial (scale-d = 0).
#pragma unroll
    for (int s = 0; s < kBK / 32; ++s)
      wgmma_e4m3(d[SB == 1 ? 0 : s], smem_desc(a_addr + s * 32), smem_desc(b_addr + s * 32), SB == 1 ? s : 0);
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int sb = 0; sb < SB; ++sb) fence_operands(d[sb]);

    // Each partial, promoted to f32 with (weight block scale x the token's act block scale).
#pragma unroll
    for (int sb = 0; sb < SB; ++sb) {
      const float ws = weight_scale_value(args.w, ws_raw[sb]);
      const float* xs = xs_s + ((FUSED ? t : stage) * SB + sb) * NT;
#pragma unroll
      for (int j = 0; j < NT / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[4 * j + e] += d[sb][4 * j + e] * (ws * xs[8 * j + 2 * (lane % 4) + (e % 2)]);
      ws_raw[sb] = ws_next[sb];
    }
  }
  cp_async_wait_group<0>();

  store_tile<NT>(args, acc, n0);
  if constexpr (NT == 8)  // (the host takes the fix-up up to 8 rows: wider tiles keep their registers)
    if (args.partial != nullptr && args.tile_flags != nullptr && m <= kFp8WgmmaFixupMaxRows) finish_splits(args, n0, smem);
#else
  __trap();
#endif
}

template <int NT, int SB, bool FUSED = false>
void launch_nt(const Fp8WgmmaDecodeArgs& args, int splits, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.n / kRowsW), static_cast<unsigned>(splits));
  const int smem = Cfg<NT, SB, FUSED>::smem(args.kblocks_per_split);
  // Per call, not cached: the attribute belongs to the current device, and setting it is cheap.
  cudaFuncSetAttribute(fp8_wgmma_decode_kernel<NT, SB, FUSED>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  launch_chained(fp8_wgmma_decode_kernel<NT, SB, FUSED>, grid, dim3(kThreads), smem, stream, args);
}

}  // namespace

int fp8_wgmma_decode_splits(std::int64_t n, std::int64_t k, int sm_count) {
  const std::int64_t tiles = n / kRowsW, kb = k / kBK;
  const std::int64_t target = static_cast<std::int64_t>(kCtasPerSm) * std::max(sm_count, 1);
  if (tiles <= 0 || kb <= 1 || tiles >= target) return 1;
  // Rounded down: one wave of at most `target` CTAs (wo_b: 64 tiles x 4, not 5 with a 56-CTA tail).
  std::int64_t splits = std::clamp<std::int64_t>(target / tiles, 1, kb);
  const std::int64_t per_split = (kb + splits - 1) / splits;
  splits = (kb + per_split - 1) / per_split;  // no empty split
  return static_cast<int>(splits);
}

bool fp8_wgmma_fused_quant_fits(const DevRows& x, std::int64_t k, int splits) {
  const std::int64_t kb = k / kBK, per_split = (kb + splits - 1) / std::max(splits, 1);
  return x.rows >= 1 && x.rows <= kFusedRows && x.bf16 && x.width == k && k % kBK == 0 &&
         reinterpret_cast<std::uintptr_t>(x.base) % 16 == 0 && x.stride % 8 == 0 && per_split <= kFusedMaxKBlocks;
}

void launch_fp8_wgmma_decode(const Fp8WgmmaDecodeArgs& args, int splits, cudaStream_t stream) {
  if (args.m <= 0 || args.n <= 0) return;
  Fp8WgmmaDecodeArgs a = args;
  const int kb = static_cast<int>(args.k / kBK);
  a.kblocks_per_split = (kb + splits - 1) / splits;
  if (args.fused_quant) {  // fp8_wgmma_fused_quant_fits: m <= 8
    if (args.scale_block == 32) {
      launch_nt<8, 4, true>(a, splits, stream);
    } else {
      launch_nt<8, 1, true>(a, splits, stream);
    }
  } else if (args.scale_block == 32) {  // V4.1: up to kFp8WgmmaMaxRowsBlock32 rows (4 partials per thread)
    if (args.m <= 8) {
      launch_nt<8, 4>(a, splits, stream);
    } else if (args.m <= 16) {
      launch_nt<16, 4>(a, splits, stream);
    } else {
      launch_nt<32, 4>(a, splits, stream);
    }
  } else if (args.m <= 8) {
    launch_nt<8, 1>(a, splits, stream);
  } else if (args.m <= 16) {
    launch_nt<16, 1>(a, splits, stream);
  } else if (args.m <= 32) {
    launch_nt<32, 1>(a, splits, stream);
  } else {
    launch_nt<64, 1>(a, splits, stream);
  }
}

}  // namespace deepinfer::ops::cuda
