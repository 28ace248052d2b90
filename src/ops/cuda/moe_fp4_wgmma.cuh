// Shared pieces of the routed experts' decode GEMM on wgmma (moe_fp4_wgmma.cu: the register-A form and
// the launches; moe_fp4_wgmma_smem.cu: the shared-memory form for items of 32 rows): tile constants, the
// CTA's tile and weight-scale table, the K-permuted fp4 widening, the outputs and the launch.
#pragma once

#include <cstdint>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace deepinfer::ops::cuda::moe_fp4 {

namespace wg = wgmma;

constexpr int kThreads = 128;         // one warpgroup
constexpr int kRows = 64;             // weight rows per CTA: wgmma's M
constexpr int kBK = 128;              // K per stage: one act-scale block, four ue8m0 weight blocks, one swizzle row
constexpr int kRawRow = kBK / 2;      // fp4 bytes of one weight row per stage
constexpr int kRawTile = kRows * kRawRow;  // 4 KB
// Shared row stride of the ue8m0 scales (K / 32 bytes + 16: the 8 rows a warp reads at once fall in
// 8 different banks; 16-byte aligned for cp.async).
__host__ __device__ constexpr int ws_stride(std::int64_t k) { return static_cast<int>(k / 32) + 16; }

// Shared memory of one CTA (every wgmma tile 1024-byte aligned: the 128-byte swizzle is a function of
// the address bits 4-9, so a tile must start on a 1024-byte boundary for the descriptor's base offset 0).
// e4m3 activation rows of one stage (both forms).
template <int NT>
constexpr int b_tile_bytes() { return NT * kBK < 1024 ? 1024 : NT * kBK; }

template <typename = void>  // (a template: no unused-function warning where only sm_90a uses it)
__device__ __forceinline__ void cp_async4(std::uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

// The dynamic shared memory's first 1024-byte boundary (its size has 1024 bytes of slack for this).
template <typename = void>
__device__ __forceinline__ std::uint8_t* align1024(std::uint8_t* p) {
  return p + ((1024 - smem_u32(p) % 1024) % 1024);
}

// One CTA's work: 64 weight rows (n0 ..) of one expert for the item's rows row0 .. row0 + mrows - 1,
// over K split blockIdx.x % args.k_splits (K tiles kt0 .. kt0 + ktiles - 1; the CTA's tile counter kt
// runs from 0, its pointers start at kt0).
struct CtaTile {
  const std::uint8_t* w_bytes;  // fp4 row n0 of the expert's weight, at K tile kt0
  const std::uint8_t* scale;    // its ue8m0 scale row n0 at K tile kt0, rows scale_ld bytes apart
  std::int64_t scale_ld;
  std::int64_t row0, n0;
  int mrows, ktiles, wstride, kt0;
  int r_lo;  // this thread's accumulator rows r_lo, r_lo + 8 of the tile
};

// The K each CTA covers (args.k / args.k_splits): the shared-memory size and scale-table stride.
inline std::int64_t cta_k(const SkinnyGemmArgs& args) { return args.k / args.k_splits; }

// The CTA's tile; the item's activation rows (rows past it: -1) into rows_s, and the tile's ue8m0
// weight scales into ws (cp.async, in the caller's first group: 16-byte copies where rows allow, else
// 4-byte ones). The caller's __syncthreads publishes rows_s.
template <int NT>
__device__ __forceinline__ CtaTile begin_tile(const SkinnyGemmArgs& args, std::int32_t* rows_s, std::uint8_t* ws) {
  const int4 item = __ldcg(args.items + blockIdx.y);  // (L2: the early form reads it before its wait)
  const DevWeight w = args.tables[blockIdx.z][item.x];
  const int tid = threadIdx.x;
  CtaTile t;
  t.ktiles = static_cast<int>(args.k / kBK) / args.k_splits;
  t.kt0 = static_cast<int>(blockIdx.x) % args.k_splits * t.ktiles;
  t.row0 = item.y;
  t.mrows = item.z;
  t.n0 = static_cast<std::int64_t>(blockIdx.x / args.k_splits) * kRows;
  t.w_bytes = static_cast<const std::uint8_t*>(w.data) + t.n0 * (args.k / 2) + t.kt0 * kRawRow;
  t.wstride = ws_stride(args.k / args.k_splits);
  t.r_lo = (tid / 32) * 16 + (tid % 32) / 4;
  for (int c = tid; c < NT; c += kThreads) {
    const std::int64_t row = t.row0 + c;
    rows_s[c] = c < t.mrows ? static_cast<std::int32_t>(args.x_rows ? __ldcg(args.x_rows + row) : row) : -1;
  }
  const auto* scale = static_cast<const std::uint8_t*>(w.scale);
  t.scale = scale + t.n0 * w.scale_ld + t.kt0 * 4;
  t.scale_ld = w.scale_ld;
  const int scols = t.ktiles * 4;
  const bool wide = scols % 16 == 0 && w.scale_ld % 16 == 0 && reinterpret_cast<std::uintptr_t>(t.scale) % 16 == 0;
  const int piece = wide ? 16 : 4, pieces = scols / piece;
  for (int idx = tid; idx < kRows * pieces; idx += kThreads) {
    const int r = idx / pieces, c = idx % pieces;
    const std::uint32_t dst = smem_u32(ws + r * t.wstride + c * piece);
    const std::uint8_t* src = t.scale + r * w.scale_ld + c * piece;
    if (wide) {
      cp_async16_zfill(dst, src, true);
    } else {
      cp_async4(dst, src);
    }
  }
  return t;
}

// ---- K-permuted fp4 (CudaBackendOptions::moe_fp4_wgmma_permuted) ----------------------------------
// Inside each 32-K block the wgmma's K position p holds element 2p (p < 16) or 2(p - 16) + 1 of the
// block, for BOTH operands: the act codes arrive written so (act quant and SwiGLU codes: their
// k_permuted flag), the fp4 bytes are read as stored. A thread's 4 fp4 bytes of a row and step are then
// one aligned word (elements 8q .. 8q + 7: its low nibbles are K 4q .., its high nibbles K 16 + 4q ..),
// so ldmatrix hands every thread its words (2 per stage and thread instead of 16 loads and 8 byte
// selects). Each product and 32-K partial is the same set as unpermuted; only the order inside the
// tensor core's 32-K sum differs, as between the wgmma and mma.sync kernels.
// The e4m3 operand is the fp4 code scaled by 2^-6: code c (magnitude bits e1 e0 m) shifted to bits 2-4
// of the byte is exactly 2^-6 x its e2m1 value as e4m3 (e2m1 subnormal 0.5 -> e4m3 subnormal 2^-7,
// normals 2^(e-1)(1 + m/2) -> 2^(e-7)(1 + m/2)), the sign to bit 7: 6 instructions for 8 elements
// and no table. Partials come out 2^-6 x (exact power-of-two scaling); the weight scales carry the 64
// back (their codes + 6 in the CTA's table, see special_scale_codes).

// 8 e2m1 (element 2b in the low nibble of byte b) -> 8 scaled e4m3: .x = the low nibbles (elements 0, 2,
// 4, 6), .y = the high nibbles (1, 3, 5, 7). Bits 2-4 of a byte from the shifted word, bit 7 from the
// nibble's sign; every other bit of `sign` (and its shift) falls inside bits 2-4, which it does not feed.
// (One lop3 each, (a & 0x1c1c1c1c) | (b & ~0x1c1c1c1c): written as C, ptxas splits it into a mask and an
// or with a second constant, 7 instructions instead of 6.)
template <typename = void>
__device__ __forceinline__ uint2 e2m1x8_to_e4m3x8_scaled(std::uint32_t w) {
  const std::uint32_t sign = w & 0x88888888u;
  uint2 e;
  asm("lop3.b32 %0, %1, %2, 0x1c1c1c1c, 0xe4;" : "=r"(e.x) : "r"(w << 2), "r"(sign << 4));
  asm("lop3.b32 %0, %1, %2, 0x1c1c1c1c, 0xe4;" : "=r"(e.y) : "r"(w >> 2), "r"(sign));
  return e;
}

// The tile's outputs: (weight row n0 + r_lo (+ 8), token col) of the item, f32 or bf16.
template <int NT, int R>
__device__ __forceinline__ void store_tile(const SkinnyGemmArgs& args, const float (&acc)[R], const CtaTile& t) {
  const int lane = threadIdx.x % 32;
  void* out = args.out[blockIdx.z];
  // split s's partial sums: s x split_stride elements on (recomputed here: no register kept over the loop)
  const std::int64_t at0 = static_cast<std::int64_t>(blockIdx.x) % args.k_splits * args.split_stride;
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = j * 8 + (lane % 4) * 2 + (e % 2);  // token of the item
      if (col >= t.mrows) continue;
      const std::int64_t n = t.n0 + t.r_lo + 8 * (e / 2);
      const std::int64_t row = t.row0 + col;
      if (args.out_bf16) {
        static_cast<std::uint16_t*>(out)[at0 + row * args.ldo + n] = f32_to_bf16_bits(acc[4 * j + e]);
      } else {
        static_cast<float*>(out)[at0 + row * args.ldo + n] = acc[4 * j + e];
      }
    }
}

// A kernel's end: the ring's last copies drained, then its outputs.
template <int NT, int R>
__device__ __forceinline__ void finish_cta(const SkinnyGemmArgs& args, const float (&acc)[R], const CtaTile& t) {
  cp_async_wait_group<0>();
  store_tile<NT>(args, acc, t);
}

// K order in two ranges walked by one CTA (the kernels' WALK: args.k_ranges = 2, k_splits = 1): at the
// second range's first stage the first range's sum moves to `lo` and acc restarts from 0; at the end
// acc = lo + acc, the sum split_sum forms from two CTAs' partials (k_splits = 2): the same bits.
template <int R>
__device__ __forceinline__ void start_second_range(float (&lo)[R], float (&acc)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    lo[i] = acc[i];
    acc[i] = 0.0f;
  }
}
template <int R>
__device__ __forceinline__ void join_ranges(const float (&lo)[R], float (&acc)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = lo[i] + acc[i];
}

// Every launch asks for the largest shared-memory carveout: the driver's default may keep more L1 and
// fit fewer CTAs per SM than the kernel's shared memory allows.
template <typename Kernel>
void launch_kernel(Kernel kernel, int smem, const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.n / kRows * args.k_splits), static_cast<unsigned>(grid_y),
                  static_cast<unsigned>(grid_z));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  launch_chained(kernel, grid, kThreads, static_cast<std::size_t>(smem), stream, args);
}

// The shared-memory form (moe_fp4_wgmma_smem.cu) on items of up to 32 rows: K-permuted operands where
// k_permuted; its K ranges walked by one CTA where args.k_ranges > args.k_splits.
void launch_smem_form(const SkinnyGemmArgs& args, int grid_y, int grid_z, bool k_permuted, cudaStream_t stream);

}  // namespace deepinfer::ops::cuda::moe_fp4
