// The routed experts' prefill GEMM on Hopper's fp8 warpgroup MMA (sm_90a wgmma e4m3, twice the bf16
// rate): act-quant e4m3 activations (block-128 scales) times fp4 weights widened exactly to e4m3 in
// registers, for items of up to 128 placed rows (the prefill sort's) and 128 weight rows per CTA.
// By default (PK) both operands are K-permuted inside each 32-K block as moe_fp4_wgmma.cu's are (act and
// SwiGLU codes written so): ldmatrix fp4 fragments (CudaBackendOptions::moe_prefill_fp8_permuted).
#include <cuda_fp8.h>

#include <type_traits>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace deepinfer::ops::cuda {
namespace {

namespace wg = wgmma;

// Two consumer warpgroups; warpgroup g owns weight rows 64g .. 64g + 63 of the CTA's 128 (wgmma's M,
// the A operand, converted from fp4 by each thread into its own register fragment) and all 128 tokens
// of the item (N, the B operand: act-quant codes in 128-byte-swizzled shared memory, read by both).
constexpr int kThreads = 256;
constexpr int kWRows = 128;          // weight rows (output columns) per CTA
constexpr int kTokens = kMoePrefillRows;  // tokens (placed rows) per item: wgmma's N
constexpr int kBK = 128;             // K per stage: one act-scale block, four ue8m0 weight blocks
constexpr int kStages = 5;           // cp.async ring (three stages ahead of the one multiplied)
constexpr int kRawRow = kBK / 2 + 16;  // fp4 bytes of a weight row per stage, padded: conflict-free reads
constexpr int kBTile = kTokens * kBK;  // 16 KB of e4m3 activations per stage
constexpr int kRawTile = kWRows * kRawRow;
constexpr int kShifts = 15;          // weight-code shift tables: 2^d for d = -8 .. 6
static_assert(kTokens == 128 && kBK == 128, "one 128-byte swizzle row of e4m3 per token and stage");

// Shared row stride of the ue8m0 weight scales (K / 32 + 16 bytes: rows 4-byte aligned, spread banks).
__host__ __device__ constexpr int scale_stride(std::int64_t k) { return static_cast<int>(k / 32) + 16; }

struct Smem {
  static constexpr int kB = 0;  // 1024-aligned swizzled tiles first
  static constexpr int kRaw = kB + kStages * kBTile;
  static constexpr int kXs = kRaw + kStages * kRawTile;     // f32 act scales, one per token and stage
  static constexpr int kTab = kXs + kStages * kTokens * 4;  // kShifts x 8 code bytes
  static constexpr int kRows = kTab + kShifts * 8;          // the item's activation rows (-1: none)
  static constexpr int kXrow = kRows + kTokens * 4;          // and their code rows' addresses (null: none)
  static constexpr int kRowMax = kXrow + kTokens * 8;         // each weight row's largest scale byte
  static constexpr int kWs = (kRowMax + kWRows * 4 + 127) / 128 * 128;  // weight scales, whole K (16-byte copies)
  static int bytes(std::int64_t k) { return kWs + kWRows * scale_stride(k) + 1024; }  // + alignment slack
};
static_assert(Smem::kRaw % 16 == 0 && kRawRow % 16 == 0 && Smem::kXs % 16 == 0 && Smem::kTab % 8 == 0 &&
                  Smem::kRows % 4 == 0 && Smem::kXrow % 8 == 0 && Smem::kWs % 16 == 0,
              "cp.async destinations and table reads aligned");

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the kernel's pieces: sm_90a bodies only
constexpr int kAcc = kTokens / 2;    // accumulator registers per thread (64 x 128 per warpgroup)
// Halves, not one N = 128 wgmma: two 32-register partials let one half's partial be promoted while the
// other half's wgmma (wgmma_e4m3_rs, N = 64) runs (two 64-register partials spilled), and items of <= 64
// rows skip the upper half.
constexpr int kHalf = kAcc / 2;      // those of one half of the tokens (a 64 x 64 wgmma)
constexpr int kHalfTile = kBTile / 2;  // the second half's B rows start 64 x 128 bytes in

// The descriptor of K step s of a stage: its start address (bits 0-13, in 16-byte units) 32 s bytes on,
// with no carry out of the field (shared addresses stay below 2^18).
__device__ __forceinline__ std::uint64_t desc_step(std::uint64_t desc, int s) { return desc + 2 * s; }

// 8 e2m1 (element 2b in the low nibble of byte b) -> 8 e4m3 codes of (e2m1 value x 2^d): the magnitude
// through the 8-byte table of shift d (table byte m = code of magnitude m x 2^d), the sign moved to bit 7
// (moe_fp4_wgmma.cu's e2m1x8_to_e4m3x8 with its fixed d = 0 table as a parameter).
__device__ __forceinline__ uint2 e2m1x8_shifted(std::uint32_t w, uint2 table) {
  const std::uint32_t m = w & 0x77777777u, u = w << 4;
  const std::uint32_t mag0 = __byte_perm(table.x, table.y, m);
  const std::uint32_t mag1 = __byte_perm(table.x, table.y, m >> 16);
  const std::uint32_t sg0 = __byte_perm(u, w, 0x5140u), sg1 = __byte_perm(u, w, 0x7362u);
  return make_uint2((sg0 & 0x80808080u) | mag0, (sg1 & 0x80808080u) | mag1);
}

// The same conversion for a K-permuted word (moe_fp4_wgmma.cu's operand order: byte b holds elements
// 2b and 2b + 1 of the thread's 8, which the wgmma's K positions 4q .. 4q + 3 and 16 + 4q .. take): .x =
// the low nibbles' codes, .y = the high nibbles'. The table lookups in nibble order, then bytes 0, 2 / 1, 3
// of each half gathered; the signs from bits 3 / 7 of each byte (9 instructions, as e2m1x8_shifted).
__device__ __forceinline__ uint2 e2m1x8_shifted_permuted(std::uint32_t w, uint2 table) {
  const std::uint32_t m = w & 0x77777777u;
  const std::uint32_t mag0 = __byte_perm(table.x, table.y, m), mag1 = __byte_perm(table.x, table.y, m >> 16);
  const std::uint32_t lo = __byte_perm(mag0, mag1, 0x6420u), hi = __byte_perm(mag0, mag1, 0x7531u);
  return make_uint2(((w << 4) & 0x80808080u) | lo, (w & 0x80808080u) | hi);
}

// Table d + 8 (d = -8 .. 6): every e2m1 magnitude {0, .5, 1, 1.5, 2, 3, 4, 6} x 2^d is an e4m3 value
// (subnormal down to 2^-9, at most 384 < 448), so the conversion is exact.
__device__ __forceinline__ void build_shift_tables(std::uint8_t* tab) {
  const int i = threadIdx.x;
  if (i >= kShifts * 8) return;
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = ldexpf(mag[i % 8], i / 8 - 8);
  tab[i] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// The CTA's tile: item rows, weight rows and where its operands live.
struct Tile {
  const std::uint8_t* w_bytes;  // fp4 row n0 of the expert's weight
  const std::uint8_t* ws;       // the tile's ue8m0 scales in shared memory (rows of wstride bytes)
  std::int64_t row0, n0;
  int mrows, ktiles, wstride;
  std::uint32_t ldsm_at;  // K-permuted: this thread's ldmatrix row address within a stage's fp4 tile
};

// Where token c's act scale sits among a stage's 128 in the K-permuted kernels: token 64H + 8j + 2q + e
// at 64H + 16 (j / 2) + 4q + 2 (j % 2) + e, so a thread's scales of columns j = 2i, 2i + 1 are one
// 16-byte load (promote; a warp's four distinct ones in distinct banks) instead of two 8-byte ones.
__device__ __forceinline__ std::uint32_t xs_slot(int c) {
  const int j = c % 64 / 8, q = c % 8 / 2;
  return static_cast<std::uint32_t>(c / 64 * 64 + 16 * (j / 2) + 4 * q + 2 * (j % 2) + c % 2);
}

// This thread's copies, fixed for the CTA (a stage adds its K offset): B chunks i = 0..3 (token row
// tid / 8 + 32 i, 16-byte chunk tid % 8; absent rows read as zeros from args.x), fp4 chunks i = 0..1
// (weight row tid / 4 + 64 i, chunk tid % 4) and, for tid < 128 with the row present, its act scale.
struct Copies {
  const std::uint8_t* x[4];
  std::uint32_t x_valid;  // bit i: B chunk i's row is present
  const std::uint8_t* w;  // fp4 chunk 0 at stage 0 (chunk 1: 64 rows further)
  std::int64_t w_rows64;  // bytes of 64 weight rows
  const float* xs;        // null: no act scale to copy
  std::uint32_t xs_at;    // K-permuted kernels: its byte offset in a slot's act scales (xs_slot)
  std::uint32_t b_off, raw_off;  // chunk 0's offsets in a stage's B tile and fp4 tile
};

__device__ __forceinline__ Copies thread_copies(const SkinnyGemmArgs& args, const Tile& t, const std::int32_t* rows_s,
                                                const std::uint8_t* const* xrow) {
  const int tid = threadIdx.x;
  Copies c;
  c.x_valid = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::uint8_t* row = xrow[tid / 8 + 32 * i];
    c.x[i] = row != nullptr ? row + (tid % 8) * 16 : args.x;
    c.x_valid |= row != nullptr ? 1u << i : 0u;
  }
  c.b_off = wg::swizzled(tid / 8, tid % 8);  // rows + 32 i keep row % 8: chunk i at + 32 i x 128 bytes
  c.w = t.w_bytes + (tid / 4) * (args.k / 2) + (tid % 4) * 16;
  c.w_rows64 = 64 * (args.k / 2);
  c.raw_off = static_cast<std::uint32_t>((tid / 4) * kRawRow + (tid % 4) * 16);
  const std::int32_t src = tid < kTokens ? rows_s[tid] : -1;
  c.xs = src >= 0 ? args.xs + src : nullptr;
  c.xs_at = 4 * xs_slot(tid);
  return c;
}

// One stage's copies into ring slot kt % kStages: 128 tokens x 128 e4m3 (swizzled; rows past the item
// zero-filled), 128 fp4 weight rows of 64 bytes and the act scales (block 128: one per token; absent
// rows' scales were zeroed in every slot at the start).
template <bool PK>
__device__ __forceinline__ void load_stage(const SkinnyGemmArgs& args, const Copies& c, std::uint8_t* smem, int kt) {
  const int slot = kt % kStages;
  const std::uint32_t b = smem_u32(smem + Smem::kB + slot * kBTile) + c.b_off;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    cp_async16_zfill(b + i * 32 * 128, c.x[i] + kt * kBK, (c.x_valid >> i) & 1u);
  const std::uint32_t raw = smem_u32(smem + Smem::kRaw + slot * kRawTile) + c.raw_off;
  const std::uint8_t* w = c.w + kt * (kBK / 2);
#pragma unroll
  for (int i = 0; i < 2; ++i) cp_async_weight16(raw + i * 64 * kRawRow, w + i * c.w_rows64);
  if (c.xs != nullptr)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                     smem_u32(smem + Smem::kXs + slot * kTokens * 4 + (PK ? c.xs_at : threadIdx.x * 4))),
                 "l"(c.xs + static_cast<std::int64_t>(kt) * args.xs_ld)
                 : "memory");
}

// How a weight tile's fp4 codes meet their ue8m0 scales (chosen per CTA from the tile's scales alone,
// so never from a token): kRowRef, one reference exponent per weight row for the whole K (its largest
// scale - 6): codes x 2^(scale - reference) are exact e4m3 (subnormal down to 2^-9, at most 384) when the
// row's scales span <= 14 octaves, a stage's four 32-K wgmmas accumulate in the tensor core, each stage's
// partial is promoted with the act scale alone and 2^reference is applied once at the end; kStageRef,
// the same with a reference per (row, 128-K stage), promoted with both scales; kPerBlock, shift 0 and a
// fresh partial per 32-K weight block promoted with its own scale (any scales).
constexpr int kPerBlock = 0;
constexpr int kStageRef = 1;
constexpr int kRowRef = 2;

// Largest and smallest of four ue8m0 bytes.
__device__ __forceinline__ void byte_range(std::uint32_t w, std::uint32_t& mx, std::uint32_t& mn) {
  const std::uint32_t hi = __vmaxu4(w, w >> 16), lo = __vminu4(w, w >> 16);
  mx = max(hi & 0xffu, (hi >> 8) & 0xffu);
  mn = min(lo & 0xffu, (lo >> 8) & 0xffu);
}
__device__ __forceinline__ bool refable(std::uint32_t mx, std::uint32_t mn) {
  return mx - mn <= 14 && mx >= 7 && mx != 0xffu;
}

// The tile's form — kRowRef if every row's scales fit it, else kStageRef if every (row, stage) does —
// from every thread (two per weight row, alternate stages; the pair's ranges met by a shuffle), each row's
// largest scale byte left in row_max_s for its reference (a scan by half the threads, one row each, and
// separate per-row maxima were ~11% of the kernel's samples: session 7's form 0, deleted).
__device__ __forceinline__ int tile_mode_rows(const std::uint8_t* ws, const Tile& t, std::uint32_t* row_max_s) {
  static_assert(kThreads == 2 * kWRows, "two threads per weight row");
  const int r = threadIdx.x / 2;
  bool stage_ok = true;
  std::uint32_t hi = 0, lo = 0xffffffffu;
  const std::uint8_t* row = ws + r * t.wstride;
#pragma unroll 4
  for (int kt = threadIdx.x % 2; kt < t.ktiles; kt += 2) {
    const std::uint32_t w = *reinterpret_cast<const std::uint32_t*>(row + kt * 4);
    std::uint32_t mx, mn;
    byte_range(w, mx, mn);
    stage_ok = stage_ok && refable(mx, mn);
    hi = __vmaxu4(hi, w);
    lo = __vminu4(lo, w);
  }
  hi = __vmaxu4(hi, __shfl_xor_sync(0xffffffffu, hi, 1));
  lo = __vminu4(lo, __shfl_xor_sync(0xffffffffu, lo, 1));
  std::uint32_t mx, mn, unused;
  byte_range(hi, mx, unused);
  byte_range(lo, unused, mn);
  if (threadIdx.x % 2 == 0) row_max_s[r] = mx;
  if (__syncthreads_and(refable(mx, mn))) return kRowRef;
  return __syncthreads_and(stage_ok) ? kStageRef : kPerBlock;
}

// This thread's weight rows of a stage: the A fragments of its 4 K steps (rows r_lo and r_lo + 8 of its
// warp's 16, as moe_fp4_wgmma.cu's rega_fragments) widened with the per-(row, 32-K) shift tables, and
// srow[s][h] = the scale its partial of step s is promoted with (kStageRef: 2^reference for every step;
// kPerBlock: the step's own; kRowRef: none, rref holds the rows' references). PK (K-permuted operands,
// moe_fp4_wgmma.cu's order): the thread's 4 bytes of a row and step are one aligned word, so two
// ldmatrix.x4 load all 8 (matrix j of load p: row half j % 2, step 2p + j / 2) instead of 16 loads and 8
// byte selects; the 80-byte rows keep each 8 x 16-byte matrix in distinct banks.
template <int P, bool PK>
__device__ __forceinline__ void stage_fragments(std::uint32_t (&a)[4][4], float (&srow)[4][2], const std::uint8_t* smem,
                                                const Tile& t, int wrow, int kt, const int (&rref)[2]) {
  const auto* tab = reinterpret_cast<const uint2*>(smem + Smem::kTab);
  // Row half h's scale word of stage kt and its reference; step s's table (and srow[s][h]).
  auto row_scales = [&](int h, std::uint32_t& sw, int& ref) {
    sw = *reinterpret_cast<const std::uint32_t*>(t.ws + (wrow + 8 * h) * t.wstride + kt * 4);
    ref = rref[h];
    if constexpr (P == kStageRef) {
      const std::uint32_t m = __vmaxu4(sw, sw >> 16);
      ref = static_cast<int>(max(m & 0xffu, (m >> 8) & 0xffu)) - 6;
    }
  };
  auto step_table = [&](std::uint32_t sw, int ref, int s, int h) {
    if constexpr (PK && P == kRowRef)  // sw holds the tables' byte offsets (scales_to_table_offsets)
      return *reinterpret_cast<const uint2*>(smem + Smem::kTab + __byte_perm(sw, 0u, 0x4440u + s));
    const int code = static_cast<int>((sw >> (8 * s)) & 0xffu);
    if constexpr (P == kStageRef) {
      srow[s][h] = __uint_as_float(static_cast<std::uint32_t>(ref) << 23);
    } else if constexpr (P == kPerBlock) {
      srow[s][h] = ue8m0_to_f32(static_cast<std::uint8_t>(code));
    }
    return tab[P == kPerBlock ? 8 : code - ref + 8];
  };
  if constexpr (PK) {
    uint2 table[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      std::uint32_t sw;
      int ref;
      row_scales(h, sw, ref);
#pragma unroll
      for (int s = 0; s < 4; ++s) table[h][s] = step_table(sw, ref, s, h);
    }
    const std::uint32_t raw = smem_u32(smem + Smem::kRaw + (kt % kStages) * kRawTile) + t.ldsm_at;
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      std::uint32_t w[4];
      ldsm_x4(raw + 32 * p, w);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint2 e = e2m1x8_shifted_permuted(w[j], table[j % 2][2 * p + j / 2]);
        a[2 * p + j / 2][j % 2] = e.x;
        a[2 * p + j / 2][2 + j % 2] = e.y;
      }
    }
  } else {
    const int lane = threadIdx.x % 32;
    const std::uint32_t sel = (lane & 1) != 0 ? 0x7632u : 0x5410u;
    const int woff = 4 * ((lane % 4) >> 1);
    const std::uint8_t* raw = smem + Smem::kRaw + (kt % kStages) * kRawTile;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      std::uint32_t sw;
      int ref;
      row_scales(h, sw, ref);
      const std::uint8_t* row = raw + (wrow + 8 * h) * kRawRow + woff;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint2 table = step_table(sw, ref, s, h);
        const std::uint32_t lo = *reinterpret_cast<const std::uint32_t*>(row + 16 * s);
        const std::uint32_t hi = *reinterpret_cast<const std::uint32_t*>(row + 16 * s + 8);
        const uint2 e = e2m1x8_shifted(__byte_perm(lo, hi, sel), table);
        a[s][h] = e.x;
        a[s][2 + h] = e.y;
      }
    }
  }
}

// acc (half H of the tokens) += part x (row scale x act scale) for rows r_lo, r_lo + 8 (srow; kRowRef:
// the act scale alone) and the thread's tokens: register 4j + e of a half holds its token 8j + 2 (lane %
// 4) + (e % 2) of row + 8 (e / 2), full-tile register 32H + 4j + e. Both scales are powers of two.
template <int H, int P, bool PK>
__device__ __forceinline__ void promote(float (&acc)[kAcc], const float (&part)[kHalf], const float (&srow)[2],
                                        const float* xs) {
  const int q = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < kHalf / 4; ++j) {
    float2 sx;
    if constexpr (PK) {  // (xs_slot's order: one 16-byte load for columns j, j + 1)
      const float4 v = *reinterpret_cast<const float4*>(xs + 64 * H + 16 * (j / 2) + 4 * q);
      sx = j % 2 == 0 ? make_float2(v.x, v.y) : make_float2(v.z, v.w);
    } else {
      sx = *reinterpret_cast<const float2*>(xs + 64 * H + 8 * j + 2 * q);
    }
    float* o = acc + kHalf * H + 4 * j;
    if constexpr (P == kRowRef) {
      o[0] = fmaf(part[4 * j + 0], sx.x, o[0]);
      o[1] = fmaf(part[4 * j + 1], sx.y, o[1]);
      o[2] = fmaf(part[4 * j + 2], sx.x, o[2]);
      o[3] = fmaf(part[4 * j + 3], sx.y, o[3]);
    } else {
      o[0] = fmaf(part[4 * j + 0], srow[0] * sx.x, o[0]);
      o[1] = fmaf(part[4 * j + 1], srow[0] * sx.y, o[1]);
      o[2] = fmaf(part[4 * j + 2], srow[1] * sx.x, o[2]);
      o[3] = fmaf(part[4 * j + 3], srow[1] * sx.y, o[3]);
    }
  }
}

// The tile's outputs: (token row0 + col, weight row n0 + wrow (+ 8)), f32 or bf16.
__device__ __forceinline__ void store_tile(const SkinnyGemmArgs& args, const float (&acc)[kAcc], const Tile& t, int wrow,
                                           const float (&rscale)[2]) {
  const int q = threadIdx.x % 4;
  void* out = args.out[blockIdx.z];
#pragma unroll
  for (int j = 0; j < kTokens / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = 8 * j + 2 * q + (e % 2);
      if (col >= t.mrows) continue;
      const std::int64_t idx = (t.row0 + col) * args.ldo + t.n0 + wrow + 8 * (e / 2);
      const float v = acc[4 * j + e] * rscale[e / 2];
      if (args.out_bf16) {
        static_cast<std::uint16_t*>(out)[idx] = f32_to_bf16_bits(v);
      } else {
        static_cast<float*>(out)[idx] = v;
      }
    }
}

// Waits for stage kt's copies (everyone's), then refills the ring slot of stage kt - 2: every thread
// has waited for stage kt - 2's wgmmas and promoted its partials before reaching this barrier.
template <bool PK>
__device__ __forceinline__ void begin_stage(const SkinnyGemmArgs& args, const Tile& t, const Copies& c,
                                            std::uint8_t* smem, int kt) {
  cp_async_wait_group<kStages - 3>();
  wg::fence_proxy_async();  // this thread's copies of stage kt, for the wgmma's B reads
  __syncthreads();
  if (kt + kStages - 2 < t.ktiles) load_stage<PK>(args, c, smem, kt + kStages - 2);
  cp_async_commit_group();
}

// Stage kt's act scales (one per token) in its ring slot.
__device__ __forceinline__ const float* stage_xs(const std::uint8_t* smem, int kt) {
  return reinterpret_cast<const float*>(smem + Smem::kXs + (kt % kStages) * kTokens * 4);
}

// d (one token half's partial) = a stage's four 32-K wgmmas of A fragments a on the B rows at b_addr,
// committed as one group.
__device__ __forceinline__ void issue_stage(float (&d)[kHalf], const std::uint32_t (&a)[4][4], std::uint32_t b_addr) {
  wg::fence_operands(d);
  wg::wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) wg::wgmma_e4m3_rs(d, a[s], desc_step(wg::smem_desc(b_addr), s), s);
  wg::wgmma_commit();
}

// Stages 0 .. ktiles - 1 through stage(kt, set, first), unrolled by two so that the set (which scale /
// fragment registers a stage writes) alternates at compile time (ptxas otherwise serialises the wgmmas,
// C7514), then finish(last stage, its set).
template <class Stage, class Finish>
__device__ __forceinline__ void run_stages(int ktiles, Stage& stage, Finish& finish) {
  using Set0 = std::integral_constant<int, 0>;
  using Set1 = std::integral_constant<int, 1>;
  stage(0, Set0{}, std::true_type{});
  int kt = 1;
  for (; kt + 1 < ktiles; kt += 2) {
    stage(kt, Set1{}, std::false_type{});
    stage(kt + 1, Set0{}, std::false_type{});
  }
  if (kt < ktiles) {
    stage(kt, Set1{}, std::false_type{});
    finish(kt, Set1{});
  } else {
    finish(kt - 1, Set0{});
  }
}

// The prescaled forms (P = kRowRef, kStageRef): one partial per (128-K stage, token half), each promoted
// in f32 while the other half's wgmmas run (stage kt - 1's upper half while stage kt's lower half
// multiplies); the promotion scales alternate by stage (set F, compile-time). UPPER false (items of <= 64
// rows): the lower half only. Two A fragment sets (set F = stage parity): stage kt's fragments are built
// while stage kt - 1's last wgmmas still run (its upper half; UPPER false: its only one), not after they
// drained — the conversion's shared loads were the kernel's largest stall (Nsight Compute, 8K layer: short
// scoreboard 23% of the main loop's samples, the wgmma wait 10%; session 7's drained schedule, form 0, is
// deleted). UPPER false promotes stage kt - 1's partial before issuing stage kt's (alternating lo / hi
// there made ptxas serialise the wgmmas, C7514).
template <int P, bool UPPER, bool PK>
__device__ __forceinline__ void run_prescaled_overlap(const SkinnyGemmArgs& args, const Tile& t, const Copies& cps,
                                                      std::uint8_t* smem, float (&acc)[kAcc], int wrow,
                                                      const int (&rref)[2]) {
  float lo[kHalf], hi[kHalf];
  float srow[2][4][2];
  std::uint32_t a0[16], a1[16];
  auto xs_of = [&](int kt) { return stage_xs(smem, kt); };
  auto issue = [&](float (&d)[kHalf], std::uint32_t (&af)[16], std::uint32_t b_addr) {
    wg::fence_operands(af);
    issue_stage(d, *reinterpret_cast<std::uint32_t(*)[4][4]>(af), b_addr);
  };
  // Stage kt with sets F; in flight on entry (unless first): stage kt - 1's last wgmmas (fragments 1 - F).
  auto stage = [&](int kt, auto set, auto first) {
    constexpr int F = decltype(set)::value;
    constexpr bool kFirst = decltype(first)::value;
    auto& af = F == 0 ? a0 : a1;
    auto& ap = F == 0 ? a1 : a0;
    begin_stage<PK>(args, t, cps, smem, kt);
    // Fragments F were last read by stage kt - 2's wgmmas, waited for in stage kt - 1.
    stage_fragments<P, PK>(*reinterpret_cast<std::uint32_t(*)[4][4]>(af), srow[F], smem, t, wrow, kt, rref);
    const std::uint32_t b_addr = smem_u32(smem + Smem::kB + (kt % kStages) * kBTile);
    if constexpr (UPPER) {
      issue(lo, af, b_addr);
      if constexpr (!kFirst) {
        wg::wgmma_wait<1>();  // stage kt - 1's upper half (this stage's lower half may run)
        wg::fence_operands(hi);
        wg::fence_operands(ap);
        promote<1, P, PK>(acc, hi, srow[1 - F][0], xs_of(kt - 1));
      }
      issue(hi, af, b_addr + kHalfTile);
      wg::wgmma_wait<1>();  // this stage's lower half
      wg::fence_operands(lo);
      promote<0, P, PK>(acc, lo, srow[F][0], xs_of(kt));
    } else {
      if constexpr (!kFirst) {
        wg::wgmma_wait<0>();  // stage kt - 1's
        wg::fence_operands(lo);
        wg::fence_operands(ap);
        promote<0, P, PK>(acc, lo, srow[1 - F][0], xs_of(kt - 1));
      }
      issue(lo, af, b_addr);
    }
  };
  // The last stage's outstanding wgmmas (upper half, or its only one).
  auto finish = [&](int last, auto set) {
    constexpr int F = decltype(set)::value;
    wg::wgmma_wait<0>();
    wg::fence_operands(lo);
    wg::fence_operands(hi);
    wg::fence_operands(a0);
    wg::fence_operands(a1);
    if constexpr (UPPER) {
      promote<1, P, PK>(acc, hi, srow[F][0], xs_of(last));
    } else {
      promote<0, P, PK>(acc, lo, srow[F][0], xs_of(last));
    }
  };
  run_stages(t.ktiles, stage, finish);
}

// Exact-scale form (a weight tile whose scales span more than the prescaled codes hold): a fresh
// partial per (32-K weight-scale block, token half), promoted with its own scale while the other half's
// wgmma runs; each stage drains before the next.
template <bool PK>
__device__ __forceinline__ void run_per_block(const SkinnyGemmArgs& args, const Tile& t, const Copies& cps,
                                              std::uint8_t* smem, float (&acc)[kAcc], int wrow) {
  float lo[kHalf], hi[kHalf];
  float srow[4][2];
  std::uint32_t a_flat[16];
  auto& a = *reinterpret_cast<std::uint32_t(*)[4][4]>(a_flat);
  const int kNoRef[2] = {0, 0};
  auto issue = [&](float (&d)[kHalf], const std::uint32_t (&as)[4], std::uint32_t b_addr) {
    wg::fence_operands(d);
    wg::wgmma_fence();
    wg::wgmma_e4m3_rs(d, as, wg::smem_desc(b_addr), 0);
    wg::wgmma_commit();
  };
  for (int kt = 0; kt < t.ktiles; ++kt) {
    begin_stage<PK>(args, t, cps, smem, kt);
    stage_fragments<kPerBlock, PK>(a, srow, smem, t, wrow, kt, kNoRef);
    const std::uint32_t b_addr = smem_u32(smem + Smem::kB + (kt % kStages) * kBTile);
    const float* xs = reinterpret_cast<const float*>(smem + Smem::kXs + (kt % kStages) * kTokens * 4);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      issue(lo, a[s], b_addr + s * 32);
      if (s > 0) {
        wg::wgmma_wait<1>();
        wg::fence_operands(hi);
        promote<1, kPerBlock, PK>(acc, hi, srow[s - 1], xs);
      }
      issue(hi, a[s], b_addr + kHalfTile + s * 32);
      wg::wgmma_wait<1>();
      wg::fence_operands(lo);
      promote<0, kPerBlock, PK>(acc, lo, srow[s], xs);
    }
    wg::wgmma_wait<0>();
    wg::fence_operands(hi);
    wg::fence_operands(a_flat);
    promote<1, kPerBlock, PK>(acc, hi, srow[3], xs);
  }
}

// The CTA's ue8m0 weight scales of the whole K into ws (cp.async: 16-byte pieces where the rows allow,
// else 4-byte ones).
__device__ __forceinline__ void copy_weight_scales(const SkinnyGemmArgs& args, const DevWeight& w, const Tile& t,
                                                   std::uint8_t* ws) {
  const auto* scale = static_cast<const std::uint8_t*>(w.scale) + t.n0 * w.scale_ld;
  const int scols = static_cast<int>(args.k / 32);
  const bool wide = scols % 16 == 0 && w.scale_ld % 16 == 0 && reinterpret_cast<std::uintptr_t>(scale) % 16 == 0;
  const int piece = wide ? 16 : 4, pieces = scols / piece;
  for (int idx = threadIdx.x; idx < kWRows * pieces; idx += kThreads) {
    const int r = idx / pieces, c = idx % pieces;
    const std::uint32_t dst = smem_u32(ws + r * t.wstride + c * piece);
    const std::uint8_t* src = scale + r * w.scale_ld + c * piece;
    if (wide) {
      cp_async16_zfill(dst, src, true);
    } else {
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
    }
  }
}
#endif

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A prescaled form's main loop: both token halves unless the item has <= 64 rows.
template <int P, bool PK>
__device__ __forceinline__ void run_prescaled_form(const SkinnyGemmArgs& args, const Tile& t, const Copies& cps,
                                                   std::uint8_t* smem, float (&acc)[kAcc], int wrow,
                                                   const int (&rref)[2]) {
  if (t.mrows > kTokens / 2) {
    run_prescaled_overlap<P, true, PK>(args, t, cps, smem, acc, wrow, rref);
  } else {
    run_prescaled_overlap<P, false, PK>(args, t, cps, smem, acc, wrow, rref);
  }
}

// K-permuted kernels, kRowRef tiles: each ue8m0 code of the tile's table in shared memory replaced by
// the byte offset of its shift table, (code - reference + 8) x 8 = (code - row max + 14) x 8 (0 .. 112:
// every byte of a kRowRef row is within 14 of its max), so a step's table is one byte select and one
// load instead of a select, a subtraction, an address and a load. Two threads a row, as tile_mode_rows.
template <typename = void>
__device__ __forceinline__ void scales_to_table_offsets(std::uint8_t* smem, const Tile& t,
                                                        const std::uint32_t* row_max_s) {
  const int r = threadIdx.x / 2;
  const std::uint32_t mx = row_max_s[r];
  __syncthreads();  // everyone's reads of the codes (the references) are done
  const std::uint32_t add = ((14u - mx) & 0xffu) * 0x01010101u;
  auto* row = reinterpret_cast<std::uint32_t*>(smem + Smem::kWs + r * t.wstride);
  for (int kt = threadIdx.x % 2; kt < t.ktiles; kt += 2) row[kt] = __vadd4(row[kt], add) << 3;
  __syncthreads();
}

// One weight tile's GEMM from its scale form on (mode; its rows' largest scale bytes in row_max_s) to its
// stores.
template <bool PK>
__device__ __forceinline__ void run_tile(const SkinnyGemmArgs& args, const Tile& t, const Copies& cps,
                                         std::uint8_t* smem, int mode, const std::uint32_t* row_max_s) {
  const int tid = threadIdx.x;
  const int wrow = (tid / 128) * 64 + ((tid % 128) / 32) * 16 + (tid % 32) / 4;  // this thread's first weight row
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  float rscale[2] = {1.0f, 1.0f};
  if (mode == kRowRef) {
    int rref[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wrow + 8 * h;
      rref[h] = static_cast<int>(row_max_s[r]) - 6;
      rscale[h] = __uint_as_float(static_cast<std::uint32_t>(rref[h]) << 23);
    }
    if constexpr (PK) scales_to_table_offsets(smem, t, row_max_s);
    run_prescaled_form<kRowRef, PK>(args, t, cps, smem, acc, wrow, rref);
  } else if (mode == kStageRef) {
    const int rref[2] = {0, 0};
    run_prescaled_form<kStageRef, PK>(args, t, cps, smem, acc, wrow, rref);
  } else {
    run_per_block<PK>(args, t, cps, smem, acc, wrow);
  }
  cp_async_wait_group<0>();
  store_tile(args, acc, t, wrow, rscale);
}
#endif

// Grid: (n / 128, max items, weight sets). Per output element the K order is fixed by K and the weight
// tile alone (128-K stages in ascending order; the form is chosen from the tile's scales), so a token's
// result never depends on its item or the batch. PK: K-permuted operands (stage_fragments, xs_slot,
// scales_to_table_offsets).
template <bool PK>
__global__ void __launch_bounds__(kThreads, 1) moe_prefill_fp8_kernel(SkinnyGemmArgs args) {
  enter_dependent_kernel();
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
  std::uint8_t* smem = smem_in + ((1024 - smem_u32(smem_in) % 1024) % 1024);
  auto* rows_s = reinterpret_cast<std::int32_t*>(smem + Smem::kRows);
  const int4 item = args.items[blockIdx.y];
  const DevWeight w = args.tables[blockIdx.z][item.x];
  const int tid = threadIdx.x;
  Tile t;
  t.row0 = item.y;
  t.mrows = item.z;
  t.n0 = static_cast<std::int64_t>(blockIdx.x) * kWRows;
  t.ktiles = static_cast<int>(args.k / kBK);
  t.wstride = scale_stride(args.k);
  t.w_bytes = static_cast<const std::uint8_t*>(w.data) + t.n0 * (args.k / 2);
  t.ws = smem + Smem::kWs;
  // (row 8 (lane / 8 % 2) + lane % 8 of the warp's 16, step lane / 16 of the load's two)
  t.ldsm_at = static_cast<std::uint32_t>((16 * (tid / 32) + 8 * (tid / 8 % 2) + tid % 8) * kRawRow + 16 * (tid % 32 / 16));

  auto* xrow = reinterpret_cast<const std::uint8_t**>(smem + Smem::kXrow);
  for (int c = tid; c < kTokens; c += kThreads) {
    const std::int32_t src =
        c < t.mrows ? static_cast<std::int32_t>(args.x_rows ? args.x_rows[t.row0 + c] : t.row0 + c) : -1;
    rows_s[c] = src;
    xrow[c] = src >= 0 ? args.x + src * args.ldx : nullptr;
  }
  build_shift_tables(smem + Smem::kTab);
  copy_weight_scales(args, w, t, smem + Smem::kWs);  // (in the first copy group)
  __syncthreads();  // rows_s, xrow
  const Copies cps = thread_copies(args, t, rows_s, xrow);
  if (tid < kTokens && cps.xs == nullptr)  // absent rows' act scales: zero in every slot, once
    for (int slot = 0; slot < kStages; ++slot)
      reinterpret_cast<float*>(smem + Smem::kXs + slot * kTokens * 4)[PK ? cps.xs_at / 4 : tid] = 0.0f;
  // One copy group per prologue stage (the scales ride in the first), as begin_stage counts them.
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < t.ktiles) load_stage<PK>(args, cps, smem, s);
    cp_async_commit_group();
  }
  cp_async_wait_group<kStages - 3>();
  __syncthreads();  // the scales (and the shift tables)
  auto* row_max_s = reinterpret_cast<std::uint32_t*>(smem + Smem::kRowMax);
  const int mode = tile_mode_rows(t.ws, t, row_max_s);
  run_tile<PK>(args, t, cps, smem, mode, row_max_s);
#else
  __trap();
#endif
}

}  // namespace

bool moe_prefill_fp8_fits(std::int64_t n, std::int64_t k, const DevWeight& w) {
  return n % kWRows == 0 && k % kBK == 0 && k <= kMoePrefillFp8MaxK && !w.scale_f32 && w.block == 32 &&
         w.scale_ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(w.scale) % 4 == 0 &&
         reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0;
}

void launch_moe_prefill_fp8(const SkinnyGemmArgs& args, int grid_y, int grid_z, bool k_permuted, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.n / kWRows), static_cast<unsigned>(grid_y), static_cast<unsigned>(grid_z));
  const int smem = Smem::bytes(args.k);
  auto* kernel = k_permuted ? moe_prefill_fp8_kernel<true> : moe_prefill_fp8_kernel<false>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  launch_chained(kernel, grid, kThreads, static_cast<std::size_t>(smem), stream, args);
}

}  // namespace deepinfer::ops::cuda
