// The routed experts' decode GEMM (the skinny fp4 work items of backend_moe.cpp) on Hopper's
// warpgroup MMA: on sm_90 mma.sync e4m3 is emulated (F2FP + f16 HMMA per m16n8k32), only wgmma
// multiplies fp8 natively. Each CTA (one warpgroup) owns 64 weight rows of one expert for one item.
// fp4 tiles stream in through a cp.async ring, are widened once into 128-byte-swizzled K-major e4m3
// (the A operand), and the item's act-quant e4m3 rows are B (N = 8 / 16 / 32 tokens). The default
// form since 2026-11-30 (CudaBackendOptions::moe_fp4_wgmma_variant 3, below "register-A form") skips
// the widened tile: each thread converts its own A fragment into registers (17-20% faster at 8..128
// tokens, same bits; docs/PERFORMANCE_CUDA_OPS.md).
//
// The first form, written without a device (2026-11-30): what the first run must confirm, in the order to check it
// (tools/gpu/run_wgmma_experts.sh; the probe test names the CPU column each wrong output holds):
// A1 descriptor (wgmma_sm90.cuh smem_desc): start >> 4, LBO 16 B (unused for swizzled K-major), SBO
//    1024 B (8 rows x 128 B), layout 1 = 128-byte swizzle, base offset 0 (every tile 1024-aligned);
//    the bf16 prefill kernel's descriptor, with 128 bytes = 128 e4m3 here instead of 64 bf16.
// A2 swizzle: 16-byte chunk c of row r at r * 128 + ((c ^ r % 8) << 4); K element k of a row is byte
//    k % 16 of chunk k / 16 (wg::swizzled, as written for both operands).
// A3 K step s of a 128-K stage = descriptor start + 32 s bytes (the bf16 kernel's +32 B per k16).
// A4 B = the item's rows, N x 128 bytes K-major, the same descriptor (N = 8: a single 8-row group).
// A5 accumulator fragment of m64nNk32 f32 (below); the epilogue writes (weight row, token) from it.
// A6 wgmma scale-d = 0 (wgmma_e4m3's acc_in = 0) ignores the registers' old values: D = A·B.
// A7 fp4 packing: element 2b in the low nibble of byte b (quantize_fp4, fp4x8_to_bf16x8); the widening
//    (skinny::e2m1x4_to_e4m3x4) is exact, so only the 32-term sum inside a wgmma differs from the CPU.
// A8 occupancy: items of 32: 68 KB shared, 127 registers -> 3 CTAs per SM; items of 8: 52 KB -> 4.
// (All confirmed on the H200: the probe and parity tests pass; compute-sanitizer memcheck finds no
// error in any form, a full-size V4-Flash expert case included, 2026-11-30.)
#include <algorithm>
#include <type_traits>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"
#include "ops/cuda/skinny_mma.cuh"
#include "ops/cuda/wgmma_sm90.cuh"

namespace deepinfer::ops::cuda {
namespace {

using skinny::e2m1x4_to_e4m3x4;
namespace wg = wgmma;

constexpr int kThreads = 128;         // one warpgroup
constexpr int kRows = 64;             // weight rows per CTA: wgmma's M
constexpr int kBK = 128;              // K per stage: one act-scale block, four ue8m0 weight blocks, one swizzle row
constexpr int kRawRow = kBK / 2;      // fp4 bytes of one weight row per stage
constexpr int kRawTile = kRows * kRawRow;  // 4 KB
constexpr int kATile = kRows * kBK;        // 8 KB of widened e4m3 (two, alternating)
constexpr int kStages = 5;                 // cp.async ring depth (tuning knob: bytes in flight per CTA)

// Shared row stride of the ue8m0 scales (K / 32 bytes + 16: the 8 rows a warp reads at once fall in
// 8 different banks; 16-byte aligned for cp.async).
__host__ __device__ constexpr int ws_stride(std::int64_t k) { return static_cast<int>(k / 32) + 16; }

// Shared memory of one CTA (every wgmma tile 1024-byte aligned: the 128-byte swizzle is a function of
// the address bits 4-9, so a tile must start on a 1024-byte boundary for the descriptor's base offset 0).
template <int NT>
struct Layout {
  static constexpr int kBTile = NT * kBK < 1024 ? 1024 : NT * kBK;  // e4m3 activation rows of one stage
  static constexpr int kA = 0;
  static constexpr int kRaw = kA + 2 * kATile;
  static constexpr int kB = kRaw + kStages * kRawTile;
  static constexpr int kXs = kB + kStages * kBTile;               // f32 act scales, NT per stage
  static constexpr int kWs = kXs + kStages * NT * 4;              // ue8m0 weight scales: 64 rows x ws_stride(K)
  static int bytes(std::int64_t k) { return kWs + kRows * ws_stride(k) + 1024; }  // + alignment slack
};

// 16-byte weight copy; PF = 256 asks L2 to fetch the surrounding 256 bytes (the next stages' pieces of
// the same weight row), so DRAM sees 256-byte reads where each stage takes 64 bytes of a row.
template <int PF>
__device__ __forceinline__ void cp_async_weight16(std::uint32_t dst, const void* src) {
  if constexpr (PF == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
  }
}
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
// over K tiles kt0 .. kt0 + ktiles - 1 (its split's chunk, or all of K). Weight bytes, scale rows and the
// shared scale table start at tile kt0: the kernels count K tiles from 0 and add kt0 for activations.
struct CtaTile {
  const std::uint8_t* w_bytes;  // fp4 row n0 of the expert's weight, at K tile kt0
  const std::uint8_t* scale;    // its ue8m0 scale row n0 at K tile kt0, rows scale_ld bytes apart
  std::int64_t scale_ld;
  std::int64_t row0, n0;
  int mrows, ktiles, wstride;
  int r_lo;  // this thread's accumulator rows r_lo, r_lo + 8 of the tile
  int tile, split, kt0;
};

// The CTA's tile; the item's activation rows (rows past it: -1) into rows_s, and the tile's ue8m0
// weight scales of its K range into ws unless it is null (cp.async, in the caller's first group: 16-byte
// copies where rows allow, else 4-byte ones). The caller's __syncthreads publishes rows_s. Reads only
// what the sort wrote (items, rows) and weights: safe before griddepcontrol.wait (launch order in
// backend_moe.cpp: the act quant or SwiGLU runs between the sort and the GEMM).
template <int NT, bool CH>
__device__ __forceinline__ CtaTile begin_tile(const SkinnyGemmArgs& args, const MoeFp4WgmmaSplit& sp,
                                              std::int32_t* rows_s, std::uint8_t* ws) {
  const int4 item = args.items[blockIdx.y];
  const DevWeight w = args.tables[blockIdx.z][item.x];
  const int tid = threadIdx.x, tiles = static_cast<int>(args.n / kRows), ktiles_all = static_cast<int>(args.k / kBK);
  CtaTile t;
  const bool split = CH && sp.splits > 1;  // (CH false: the kernel ignores sp, a compile-time 0)
  t.tile = split ? static_cast<int>(blockIdx.x) % tiles : static_cast<int>(blockIdx.x);
  t.split = split ? static_cast<int>(blockIdx.x) / tiles : 0;
  t.kt0 = split ? t.split * sp.chunk_tiles : 0;
  t.ktiles = split ? min(sp.chunk_tiles, ktiles_all - t.kt0) : ktiles_all;
  t.row0 = item.y;
  t.mrows = item.z;
  t.n0 = static_cast<std::int64_t>(t.tile) * kRows;
  t.w_bytes = static_cast<const std::uint8_t*>(w.data) + t.n0 * (args.k / 2) + static_cast<std::int64_t>(t.kt0) * kRawRow;
  t.wstride = ws_stride(args.k);
  t.r_lo = (tid / 32) * 16 + (tid % 32) / 4;
  for (int c = tid; c < NT; c += kThreads)
    rows_s[c] = c < t.mrows ? static_cast<std::int32_t>(args.x_rows ? args.x_rows[t.row0 + c] : t.row0 + c) : -1;
  const auto* scale = static_cast<const std::uint8_t*>(w.scale) + t.kt0 * 4;
  t.scale = scale + t.n0 * w.scale_ld;
  t.scale_ld = w.scale_ld;
  if (ws == nullptr) return t;
  const int scols = t.ktiles * 4;
  const bool wide = scols % 16 == 0 && w.scale_ld % 16 == 0 && reinterpret_cast<std::uintptr_t>(scale) % 16 == 0;
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

// One stage's B operand: NT swizzled e4m3 activation rows of K tile kt (rows past the item zero-
// filled) and their act scales, KB per row (act block 128: 1; act block 32: 4, block b at xs[b * NT]).
template <int NT, int KB = 1>
__device__ __forceinline__ void load_acts(const SkinnyGemmArgs& args, const std::int32_t* rows_s, std::uint8_t* b,
                                          float* xs, int kt) {
  const int tid = threadIdx.x;
  for (int idx = tid; idx < NT * 8; idx += kThreads) {
    const int r = idx / 8, c = idx % 8;
    const std::int32_t src = rows_s[r];
    const std::uint8_t* g = src >= 0 ? args.x + src * args.ldx + kt * kBK + c * 16 : args.x;
    cp_async16_zfill(smem_u32(b + wg::swizzled(r, c)), g, src >= 0);
  }
  if constexpr (KB == 1) {  // (the measured act-block-128 code, kept as it ran)
    if (tid < NT) {
      const std::int32_t src = rows_s[tid];
      if (src >= 0) {
        cp_async4(smem_u32(xs + tid), args.xs + static_cast<std::int64_t>(kt) * args.xs_ld + src);
      } else {
        xs[tid] = 0.0f;
      }
    }
  } else {
    for (int idx = tid; idx < NT * KB; idx += kThreads) {
      const int r = idx % NT, blk = idx / NT;
      const std::int32_t src = rows_s[r];
      if (src >= 0) {
        cp_async4(smem_u32(xs + idx), args.xs + (static_cast<std::int64_t>(kt) * KB + blk) * args.xs_ld + src);
      } else {
        xs[idx] = 0.0f;
      }
    }
  }
}

// acc += each 32-K partial of stage kt x (ue8m0 weight scale x act block scale), in ascending K (fmaf,
// as skinny_fp4_wide_kernel does per 32-K step). Rows r_lo and r_lo + 8: one scale word each (byte s =
// K step s).
template <int NT, int R, int KB = 1>
__device__ __forceinline__ void scale_partials(float (&acc)[R], const float (&part)[4][R], const std::uint8_t* ws,
                                               int wstride, int r_lo, int kt, const float* xs) {
  const int lane = threadIdx.x % 32;
  const std::uint32_t sw_lo = *reinterpret_cast<const std::uint32_t*>(ws + r_lo * wstride + kt * 4);
  const std::uint32_t sw_hi = *reinterpret_cast<const std::uint32_t*>(ws + (r_lo + 8) * wstride + kt * 4);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const float sw[2] = {ue8m0_to_f32(static_cast<std::uint8_t>(sw_lo >> (8 * s))),
                         ue8m0_to_f32(static_cast<std::uint8_t>(sw_hi >> (8 * s)))};
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float sx = xs[(KB == 1 ? 0 : s) * NT + j * 8 + (lane % 4) * 2 + (e % 2)];
        acc[4 * j + e] = fmaf(part[s][4 * j + e], sw[e / 2] * sx, acc[4 * j + e]);
      }
  }
}

// The tile's outputs: (weight row n0 + r_lo (+ 8), token col) of the item, f32 or bf16.
template <int NT, int R>
__device__ __forceinline__ void store_tile(const SkinnyGemmArgs& args, const float (&acc)[R], const CtaTile& t) {
  const int lane = threadIdx.x % 32;
  void* out = args.out[blockIdx.z];
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = j * 8 + (lane % 4) * 2 + (e % 2);  // token of the item
      if (col >= t.mrows) continue;
      const std::int64_t n = t.n0 + t.r_lo + 8 * (e / 2);
      const std::int64_t row = t.row0 + col;
      if (args.out_bf16) {
        static_cast<std::uint16_t*>(out)[row * args.ldo + n] = f32_to_bf16_bits(acc[4 * j + e]);
      } else {
        static_cast<float*>(out)[row * args.ldo + n] = acc[4 * j + e];
      }
    }
}

// The K chunks' sums (MoeFp4WgmmaSplit): acc holds the running chunk's sum; after the chunk's last
// tile it goes into total (the first chunk as it is, later ones added in chunk order: the split
// fix-up's sum, so one CTA walking every chunk and one CTA per chunk give the same bits) and restarts
// from 0 (as a split CTA's accumulator starts). One chunk: total = acc, the plain ascending-K sum.
template <int R>
struct ChunkSum {
  float total[R] = {};
  bool first = true;
  __device__ __forceinline__ void end_tile(float (&acc)[R], const CtaTile& t, int chunk_tiles, int kt) {
    if ((t.kt0 + kt + 1) % chunk_tiles != 0 && kt + 1 != t.ktiles) return;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      total[i] = first ? acc[i] : total[i] + acc[i];
      acc[i] = 0.0f;
    }
    first = false;
  }
};

// A split CTA's chunk sum into the partials ([set][chunk][placed row][n]); the last CTA of the
// (tile, item, set) to count in (release: fence, then the atomic; acquire: fence after seeing the
// count, as fp8_wgmma_decode.cu's finish_splits) adds the chunks in order from L2 (__ldcg: other SMs
// wrote them), writes the outputs and leaves the counter zero for the next launch.
template <int NT, int R>
__device__ __forceinline__ void store_split(const SkinnyGemmArgs& args, const MoeFp4WgmmaSplit& sp,
                                            const float (&acc)[R], const CtaTile& t) {
  const int tid = threadIdx.x, lane = tid % 32, tiles = static_cast<int>(args.n / kRows);
  const std::int64_t stride = sp.rows * args.n;  // one chunk's partials
  float* set_part = sp.partial + static_cast<std::int64_t>(blockIdx.z) * sp.splits * stride;
  float* part = set_part + t.split * stride;
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = j * 8 + (lane % 4) * 2 + (e % 2);
      if (col < t.mrows) part[(t.row0 + col) * args.n + t.n0 + t.r_lo + 8 * (e / 2)] = acc[4 * j + e];
    }
  __shared__ int last;
  int* flag = sp.flags + (static_cast<std::int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * tiles + t.tile;
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(flag, 1) == sp.splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  void* out = args.out[blockIdx.z];
  for (int i = tid; i < t.mrows * kRows; i += kThreads) {
    const std::int64_t row = t.row0 + i / kRows, n = t.n0 + i % kRows;
    const float* p = set_part + row * args.n + n;
    float v = __ldcg(p);
    for (int c = 1; c < sp.splits; ++c) v += __ldcg(p + c * stride);
    if (args.out_bf16) {
      static_cast<std::uint16_t*>(out)[row * args.ldo + n] = f32_to_bf16_bits(v);
    } else {
      static_cast<float*>(out)[row * args.ldo + n] = v;
    }
  }
  if (tid == 0) *flag = 0;
}

// The CTA's result: its outputs, or its chunk's partials and the fix-up.
template <int NT, int R>
__device__ __forceinline__ void store_result(const SkinnyGemmArgs& args, const MoeFp4WgmmaSplit& sp,
                                             const float (&acc)[R], const CtaTile& t) {
  if (sp.splits > 1) {
    store_split<NT>(args, sp, acc, t);
  } else {
    store_tile<NT>(args, acc, t);
  }
}

// A kernel's end: the ring's last copies drained, then its outputs (chunked: the chunk sums, split or not).
template <int NT, bool CH, int R>
__device__ __forceinline__ void finish_cta(const SkinnyGemmArgs& args, const MoeFp4WgmmaSplit& sp,
                                           const ChunkSum<R>& chunk, const float (&acc)[R], const CtaTile& t) {
  cp_async_wait_group<0>();
  if constexpr (CH) {
    store_result<NT>(args, sp, chunk.total, t);
  } else {
    store_tile<NT>(args, acc, t);
  }
}

// wgmma m64nNk32 e4m3 x e4m3 -> f32 (wgmma_sm90.cuh's wgmma_e4m3 with acc_in = 0: scale-d false, D =
// A·B, a fresh partial per 32-K weight-scale block). Accumulator fragment (the PTX ISA's m64nN f32 D
// layout, as moe_prefill_wgmma.cu's verified bf16 one): warp w of the warpgroup holds rows 16w +
// lane/4 and 16w + lane/4 + 8; register 4j + e holds column 8j + 2 (lane % 4) + (e % 2) of row + 8 (e / 2).

// Grid: (n / 64 x splits, max items, weight sets). Per output element the K order is fixed by K and the
// chunk size alone: 32-K partials from the tensor core, each scaled by (ue8m0 weight scale x act block
// scale) in f32 and added in ascending K within a chunk, the chunk sums in chunk order (ChunkSum).
// PF: the weight copies' L2 prefetch size (0 or 256). CH false: one chunk, no split (sp ignored; the
// default's code, free of the chunk registers).
template <int NT, int PF, bool CH = false>
__global__ void __launch_bounds__(kThreads) moe_fp4_wgmma_kernel(SkinnyGemmArgs args, MoeFp4WgmmaSplit sp) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<NT>;
  constexpr int R = NT / 2;  // accumulator registers per thread
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  std::uint8_t* smem = align1024(smem_in);
  __shared__ std::int32_t rows_s[NT];

  if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
  const CtaTile t = begin_tile<NT, CH>(args, sp, rows_s, smem + L::kWs);
  __syncthreads();
  const int tid = threadIdx.x, ktiles = t.ktiles;

  // Stage `st` <- K tile kt (of the CTA's range): 64 fp4 row pieces of 64 bytes and the activations.
  auto load_weights = [&](int st, int kt) {
    std::uint8_t* raw = smem + L::kRaw + st * kRawTile;
#pragma unroll
    for (int i = 0; i < kRawTile / 16 / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / 4, c = idx % 4;
      cp_async_weight16<PF>(smem_u32(raw + r * kRawRow + c * 16),
                            t.w_bytes + r * (args.k / 2) + static_cast<std::int64_t>(kt) * kRawRow + c * 16);
    }
  };
  auto load_x = [&](int st, int kt) {
    load_acts<NT>(args, rows_s, smem + L::kB + st * L::kBTile, reinterpret_cast<float*>(smem + L::kXs + st * NT * 4),
                  t.kt0 + kt);
  };
  auto load_tile = [&](int st, int kt) {
    load_weights(st, kt);
    load_x(st, kt);
  };
  // Thread t widens half h = t % 2 of weight row t / 2 of a stage (64 K = 32 bytes) into the swizzled
  // e4m3 tile `buf`: 16-byte chunk 4h + i holds K 16 (4h + i) .. + 15 in order (nibble j of a byte
  // pair = element j: the layout fp4x8_to_bf16x8 decodes on the same weights).
  auto widen_tile = [&](int st, int buf) {
    const int r = tid / 2, h = tid % 2;
    const std::uint8_t* raw = smem + L::kRaw + st * kRawTile + r * kRawRow + h * 32;
    const uint4 lo = *reinterpret_cast<const uint4*>(raw), hi = *reinterpret_cast<const uint4*>(raw + 16);
    const std::uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    std::uint8_t* dst = smem + L::kA + buf * kATile;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::uint32_t w0 = words[2 * i], w1 = words[2 * i + 1];
      *reinterpret_cast<uint4*>(dst + wg::swizzled(r, h * 4 + i)) =
          make_uint4(e2m1x4_to_e4m3x4(w0 & 0xffffu), e2m1x4_to_e4m3x4(w0 >> 16), e2m1x4_to_e4m3x4(w1 & 0xffffu),
                     e2m1x4_to_e4m3x4(w1 >> 16));
    }
  };

  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  ChunkSum<R> chunk;
  float part[4][R];  // one fresh 32-K partial per weight-scale block of a stage (wgmma scale-d = 0)
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int i = 0; i < R; ++i) part[s][i] = 0.0f;
  // Groups: one per stage; the prologue's stages (and the scale copies) form the first, its weights
  // issued before the wait for the kernel before this one (a no-op unless launched as its dependent),
  // its activations after; S - 2 empty groups keep the loop's count.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < ktiles) load_weights(s, s);
  grid_dependency_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < ktiles) load_x(s, s);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) cp_async_commit_group();
  cp_async_wait_group<kStages - 2>();
  __syncthreads();
  widen_tile(0, 0);
  wg::fence_proxy_async();
  __syncthreads();

  for (int kt = 0; kt < ktiles; ++kt) {
    // The stage of kt - 1 is free: its raw tile was widened before kt - 1's wgmma, which is done.
    if (kt + kStages - 1 < ktiles) load_tile((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit_group();
    const std::uint32_t a_addr = smem_u32(smem + L::kA + (kt % 2) * kATile);
    const std::uint32_t b_addr = smem_u32(smem + L::kB + (kt % kStages) * L::kBTile);
    for (auto& p : part) wg::fence_operands(p);
    wg::wgmma_fence();
    // K step s: 32 e4m3 = 32 bytes into each 128-byte swizzled row (the start address advances by 32).
#pragma unroll
    for (int s = 0; s < 4; ++s)
      wg::wgmma_e4m3(part[s], wg::smem_desc(a_addr + s * 32), wg::smem_desc(b_addr + s * 32), 0);
    wg::wgmma_commit();
    if (kt + 1 < ktiles) {  // widen the next tile while the tensor cores work on this one
      cp_async_wait_group<kStages - 2>();
      __syncthreads();
      widen_tile((kt + 1) % kStages, (kt + 1) % 2);
    }
    wg::wgmma_wait_all();
    for (auto& p : part) wg::fence_operands(p);
    scale_partials<NT>(acc, part, smem + L::kWs, t.wstride, t.r_lo, kt,
                       reinterpret_cast<const float*>(smem + L::kXs + (kt % kStages) * NT * 4));
    if constexpr (CH) chunk.end_tile(acc, t, sp.chunk_tiles, kt);
    wg::fence_proxy_async();  // this thread's cp.async and widened rows, for the next wgmma
    __syncthreads();
  }
  finish_cta<NT, CH>(args, sp, chunk, acc, t);
#else
  __trap();
#endif
}

// ---- register-A form (moe_fp4_wgmma_variant >= 2) ----------------------------------------------------
// The fp4 tile is not widened into shared memory: each thread converts the bytes of its own wgmma A
// fragment (rows lane/4 and + 8 of its warp's 16, K 4q..4q+3 and 16+4q.. of each 32-K step, q =
// lane % 4) straight from the cp.async ring into registers, so a stage costs one barrier, no e4m3
// stores and no A reads by the tensor core from shared memory; the wgmma of stage t runs while the
// partials of stage t - 1 are scaled (two partial sets, one fragment set). Same e4m3
// codes, same K order inside each 32-K step (the A fragment is the one the swizzled tile describes),
// same f32 scaling and ascending-K sum as the kernel above: bit-identical outputs.

// Weight rows of a stage padded to 80 bytes: the 8 rows x 2 words a warp's 32-bit reads touch fall in
// 16 distinct banks (64-byte rows would put rows r and r + 2 in the same ones). SW (forms 6, 7): rows
// of 64 bytes with 16-byte chunk c of row r at chunk c ^ (r / 2 % 4) instead (the same 16 banks, no
// padding), and the weight scales streamed per stage (4 bytes a row) instead of held for the whole K:
// ~5.3 KB a stage instead of 6.2 and no 9 KB scale table, so more stages in flight per SM.
constexpr int kRegaRow = kRawRow + 16;
template <bool SW>
constexpr int rega_row() { return SW ? kRawRow : kRegaRow; }
template <typename = void>
__device__ __forceinline__ int rega_chunk(int r, int c, bool sw) { return sw ? c ^ ((r >> 1) & 3) : c; }

template <int NT, int S, int KB, bool SW = false>
struct RegaLayout {
  static constexpr int kBTile = Layout<NT>::kBTile;
  static constexpr int kB = 0;                              // 1024-aligned B tiles first
  static constexpr int kRaw = kB + S * kBTile;
  static constexpr int kRawTile = kRows * rega_row<SW>();  // 5 KB (4 KB with SW)
  static constexpr int kXs = kRaw + S * kRawTile;
  static constexpr int kWs = kXs + S * NT * 4 * KB;  // KB act scales per row and stage
  static constexpr int kWsStage = kRows * 4;          // SW: one scale word per row and stage
  static int bytes(std::int64_t k) { return kWs + (SW ? S * kWsStage : kRows * ws_stride(k)) + 1024; }
};

// 8 e2m1 (a 32-bit word, element 2b in the low nibble of byte b) -> 8 e4m3: .x = elements 0..3,
// .y = 4..7. The codes skinny::e2m1x4_to_e4m3x4 gives (magnitude by table, sign bit moved to bit 7),
// in 8 instructions for 8 elements: even elements' signs (bit 3 of a byte) reach bit 7 by the shift.
template <typename = void>
__device__ __forceinline__ uint2 e2m1x8_to_e4m3x8(std::uint32_t w) {
  const std::uint32_t m = w & 0x77777777u, u = w << 4;
  const std::uint32_t mag0 = __byte_perm(0x3c383000u, 0x4c484440u, m);
  const std::uint32_t mag1 = __byte_perm(0x3c383000u, 0x4c484440u, m >> 16);
  const std::uint32_t sg0 = __byte_perm(u, w, 0x5140u), sg1 = __byte_perm(u, w, 0x7362u);
  return make_uint2((sg0 & 0x80808080u) | mag0, (sg1 & 0x80808080u) | mag1);
}

// The A fragments of one stage: a[s] for K step s (32 K), from the stage's raw fp4 rows.
template <bool SW>
__device__ __forceinline__ void rega_fragments(std::uint32_t (&a)[4][4], const std::uint8_t* raw, int r_lo,
                                               std::uint32_t sel, int woff) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::uint8_t* row = raw + (r_lo + 8 * h) * rega_row<SW>() + woff;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      // bytes 2q, 2q+1 (K 4q..4q+3) and 8+2q, 9+2q (K 16+4q..) of the step's 16 bytes
      const int c = rega_chunk(r_lo, s, SW);  // (r_lo + 8 swizzles as r_lo)
      const std::uint32_t lo = *reinterpret_cast<const std::uint32_t*>(row + 16 * c);
      const std::uint32_t hi = *reinterpret_cast<const std::uint32_t*>(row + 16 * c + 8);
      const uint2 e = e2m1x8_to_e4m3x8(__byte_perm(lo, hi, sel));
      a[s][h] = e.x;
      a[s][2 + h] = e.y;
    }
  }
}

// Stage kt's act scales (NT x KB floats) in the register-A layout.
template <int NT, int S, int KB, bool SW>
__device__ __forceinline__ float* rega_xs(std::uint8_t* smem, int kt) {
  return reinterpret_cast<float*>(smem + RegaLayout<NT, S, KB, SW>::kXs + (kt % S) * NT * 4 * KB);
}

// Stage kt (of the CTA's K range) into its ring slot: 64 fp4 row pieces of 64 bytes (padded or swizzled
// rows), with SW the stage's 4 scale bytes of each row (`weights`), and the activations (`acts`).
template <int NT, int S, int PF, int KB, bool SW>
__device__ __forceinline__ void rega_load_stage(const SkinnyGemmArgs& args, const CtaTile& t,
                                                const std::int32_t* rows_s, std::uint8_t* smem, int kt,
                                                bool weights = true, bool acts = true) {
  using L = RegaLayout<NT, S, KB, SW>;
  const int tid = threadIdx.x;
  std::uint8_t* raw = smem + L::kRaw + (kt % S) * L::kRawTile;
  if (weights) {
#pragma unroll
    for (int i = 0; i < kRawTile / 16 / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / 4, c = idx % 4;
      cp_async_weight16<PF>(smem_u32(raw + r * rega_row<SW>() + rega_chunk(r, c, SW) * 16),
                            t.w_bytes + r * (args.k / 2) + static_cast<std::int64_t>(kt) * kRawRow + c * 16);
    }
    if constexpr (SW) {
      if (tid < kRows)
        cp_async4(smem_u32(smem + L::kWs + (kt % S) * L::kWsStage + tid * 4), t.scale + tid * t.scale_ld + kt * 4);
    }
  }
  if (acts)
    load_acts<NT, KB>(args, rows_s, smem + L::kB + (kt % S) * L::kBTile, rega_xs<NT, S, KB, SW>(smem, kt), t.kt0 + kt);
}

template <int NT, int S, int PF, int MINB, int KB = 1, bool SW = false, bool CH = false>
__global__ void __launch_bounds__(kThreads, MINB) moe_fp4_wgmma_rega_kernel(SkinnyGemmArgs args, MoeFp4WgmmaSplit sp) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(S >= 3, "two stages ahead of the one being multiplied");
  using L = RegaLayout<NT, S, KB, SW>;
  __shared__ std::int32_t rows_s[NT];
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
  std::uint8_t* smem = align1024(smem_in);
  const CtaTile t = begin_tile<NT, CH>(args, sp, rows_s, SW ? nullptr : smem + L::kWs);
  __syncthreads();
  const int tid = threadIdx.x, lane = tid % 32, ktiles = t.ktiles;
  auto xs_of = [&](int kt) { return rega_xs<NT, S, KB, SW>(smem, kt); };
  auto load_stage = [&](int kt) { rega_load_stage<NT, S, PF, KB, SW>(args, t, rows_s, smem, kt); };
  // S - 2 stages ahead: a stage's slot is refilled two iterations after its wgmma was issued, when
  // wait_group 1 has retired it. The prologue's stages (and the scale copies) form the first group, its
  // weights issued before the wait for the kernel before this one (a no-op unless launched as its
  // dependent), its activations after; S - 3 empty groups keep the loop's count of one per stage.
#pragma unroll
  for (int s = 0; s < S - 2; ++s)
    if (s < ktiles) rega_load_stage<NT, S, PF, KB, SW>(args, t, rows_s, smem, s, true, false);
  grid_dependency_wait();
#pragma unroll
  for (int s = 0; s < S - 2; ++s)
    if (s < ktiles) rega_load_stage<NT, S, PF, KB, SW>(args, t, rows_s, smem, s, false, true);
#pragma unroll
  for (int s = 0; s < S - 2; ++s) cp_async_commit_group();

  constexpr int R = NT / 2;
  const std::uint32_t sel = (lane & 1) != 0 ? 0x7632u : 0x5410u;  // q odd: the upper byte pair of each word
  const int woff = 4 * ((lane % 4) >> 1);
  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  ChunkSum<R> chunk;
  float part[2][4][R] = {};
  std::uint32_t a_flat[16] = {};  // the A fragments of the stage in flight: a[s] for K step s
  auto& a = *reinterpret_cast<std::uint32_t(*)[4][4]>(a_flat);
  // Stage kt's scale words of row r at ws_of(kt) + r * ws_ld + ws_k(kt) (scale_partials' addressing).
  auto ws_of = [&](int kt) { return smem + L::kWs + (SW ? (kt % S) * L::kWsStage : 0); };
  const int ws_ld = SW ? 4 : t.wstride;
  auto ws_k = [](int kt) { return SW ? 0 : kt; };
  // One stage; B = its fragment / partial set (a compile-time index keeps the sets in registers),
  // `first`: no earlier stage to scale. The call sequence below keeps every path through the loop
  // touching only retired partials (else ptxas serialises the wgmmas, C7514).
  auto stage = [&](int kt, auto set, auto first) {
    constexpr int B = decltype(set)::value;
    cp_async_wait_group<S - 3>();
    wg::fence_proxy_async();  // this thread's copies of stage kt, for the wgmma's B reads
    __syncthreads();          // everyone's; everyone is past stage kt - 1's reads and kt - 2's wgmma
    if (kt + S - 2 < ktiles) load_stage(kt + S - 2);
    cp_async_commit_group();
    if constexpr (!decltype(first)::value) {  // stage kt - 1's wgmma: its fragments are rewritten next
      wg::wgmma_wait<0>();
      for (auto& p : part[1 - B]) wg::fence_operands(p);
      wg::fence_operands(a_flat);
    }
    rega_fragments<SW>(a, smem + L::kRaw + (kt % S) * L::kRawTile, t.r_lo, sel, woff);
    for (auto& p : part[B]) wg::fence_operands(p);
    wg::wgmma_fence();
    const std::uint32_t b_addr = smem_u32(smem + L::kB + (kt % S) * L::kBTile);
#pragma unroll
    for (int s = 0; s < 4; ++s) wg::wgmma_e4m3_rs(part[B][s], a[s], wg::smem_desc(b_addr + s * 32), 0);
    wg::wgmma_commit();
    // stage kt - 1's scaling runs while the tensor core multiplies stage kt
    if constexpr (!decltype(first)::value) {
      scale_partials<NT, R, KB>(acc, part[1 - B], ws_of(kt - 1), ws_ld, t.r_lo, ws_k(kt - 1), xs_of(kt - 1));
      if constexpr (CH) chunk.end_tile(acc, t, sp.chunk_tiles, kt - 1);
    }
  };
  // The last stage's partials (set B), once every wgmma is done.
  auto finish = [&](int kt, auto set) {
    constexpr int B = decltype(set)::value;
    wg::wgmma_wait<0>();
    for (auto& p : part[B]) wg::fence_operands(p);
    wg::fence_operands(a_flat);
    scale_partials<NT, R, KB>(acc, part[B], ws_of(kt), ws_ld, t.r_lo, ws_k(kt), xs_of(kt));
    if constexpr (CH) chunk.end_tile(acc, t, sp.chunk_tiles, kt);
  };
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
  finish_cta<NT, CH>(args, sp, chunk, acc, t);
#else
  __trap();
#endif
}

// Every launch asks for the largest shared-memory carveout (variants >= 1): the driver's default may
// keep more L1 and fit fewer CTAs per SM than the kernel's shared memory allows.
template <typename Kernel>
void launch_kernel(Kernel kernel, int smem, bool carveout, const SkinnyGemmArgs& args, const MoeFp4WgmmaSplit& sp,
                   int grid_y, int grid_z, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.n / kRows * sp.splits), static_cast<unsigned>(grid_y),
                  static_cast<unsigned>(grid_z));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (carveout) cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  launch_dependent(kernel, grid, dim3(kThreads), static_cast<std::size_t>(smem), stream, sp.dependent, args, sp);
}

// K in several chunks (MoeFp4WgmmaSplit): the default form's kernels with the chunk sums and the split
// (register-A form 3 for items of <= 16 rows, act block 128 or 32; the shared-memory form 1 for 32);
// moe_fp4_wgmma_variant picks no other form here.
template <int NT>
void launch_chunked(const SkinnyGemmArgs& args, const MoeFp4WgmmaSplit& sp, int grid_y, int grid_z,
                    cudaStream_t stream) {
  if constexpr (NT <= 16) {
    constexpr int kMinBlocks = NT == 8 ? 5 : 1;
    if (args.act_block == 32) {
      launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 5, 256, kMinBlocks, 4, false, true>,
                    RegaLayout<NT, 5, 4>::bytes(args.k), true, args, sp, grid_y, grid_z, stream);
    } else {
      launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 5, 256, kMinBlocks, 1, false, true>,
                    RegaLayout<NT, 5, 1>::bytes(args.k), true, args, sp, grid_y, grid_z, stream);
    }
  } else {
    launch_kernel(moe_fp4_wgmma_kernel<NT, 256, true>, Layout<NT>::bytes(args.k), true, args, sp, grid_y, grid_z,
                  stream);
  }
}

template <int NT>
void launch_config(int variant, const SkinnyGemmArgs& args, const MoeFp4WgmmaSplit& sp, int grid_y, int grid_z,
                   cudaStream_t stream) {
  if (sp.chunk_tiles < args.k / kBK) {
    launch_chunked<NT>(args, sp, grid_y, grid_z, stream);
    return;
  }
  const int smem = Layout<NT>::bytes(args.k);
  if constexpr (NT <= 16) {
    if (args.act_block == 32) {  // V4.1: per-32-K act scales, the register-A form (3) only
      launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 5, 256, NT == 8 ? 5 : 1, 4>, RegaLayout<NT, 5, 4>::bytes(args.k),
                    true, args, sp, grid_y, grid_z, stream);
      return;
    }
  }
  if (variant == 1 || (variant >= 2 && NT > 16)) {  // register-A kernels take items of <= 16 rows
    launch_kernel(moe_fp4_wgmma_kernel<NT, 256>, smem, true, args, sp, grid_y, grid_z, stream);
    return;
  }
  if constexpr (NT <= 16) {
    constexpr int kMinBlocks = NT == 8 ? 5 : 1;
    switch (variant) {
      case 2:
        launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 5, 0, kMinBlocks>, RegaLayout<NT, 5, 1>::bytes(args.k), true, args,
                      sp, grid_y, grid_z, stream);
        return;
      case 3:
        launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 5, 256, kMinBlocks>, RegaLayout<NT, 5, 1>::bytes(args.k), true,
                      args, sp, grid_y, grid_z, stream);
        return;
      case 4:
        launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 4, 256, NT == 8 ? 6 : 1>, RegaLayout<NT, 4, 1>::bytes(args.k), true,
                      args, sp, grid_y, grid_z, stream);
        return;
      case 5:
        launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 6, 256, NT == 8 ? 4 : 1>, RegaLayout<NT, 6, 1>::bytes(args.k), true,
                      args, sp, grid_y, grid_z, stream);
        return;
      case 6:  // streamed scales, swizzled 64-byte rows: 7 stages (5 ahead), 5 CTAs/SM
        launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 7, 0, kMinBlocks, 1, true>, RegaLayout<NT, 7, 1, true>::bytes(args.k),
                      true, args, sp, grid_y, grid_z, stream);
        return;
      case 7:  // the same with 9 stages (7 ahead), 4 CTAs/SM
        launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 9, 0, NT == 8 ? 4 : 1, 1, true>,
                      RegaLayout<NT, 9, 1, true>::bytes(args.k), true, args, sp, grid_y, grid_z, stream);
        return;
      default:
        break;
    }
  }
  launch_kernel(moe_fp4_wgmma_kernel<NT, 0>, smem, false, args, sp, grid_y, grid_z, stream);
}

}  // namespace

bool moe_fp4_wgmma_fits(std::int64_t n, std::int64_t k, const DevWeight& w) {
  return n % kRows == 0 && k % kBK == 0 && k <= kMoeFp4WgmmaMaxK && !w.scale_f32 && w.block == 32 &&
         w.scale_ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(w.scale) % 4 == 0 &&
         reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0;
}

int moe_fp4_wgmma_chunk_tiles(std::int64_t k, int requested) {
  const int ktiles = static_cast<int>(k / kBK);
  if (requested == 0 || ktiles <= 1) return std::max(ktiles, 1);
  // Auto: 4 chunks of at least 4 tiles (V4-Flash: w1 / w3 K 4096 -> 8 tiles, w2 K 2048 -> 4), so a split
  // CTA still runs its S - 2 stages ahead for a while.
  const int chunks = requested < 0 ? 4 : requested;
  const int tiles = (ktiles + chunks - 1) / chunks;
  return requested < 0 ? std::max(tiles, 4) : tiles;
}

void launch_moe_fp4_wgmma(int group_rows, int variant, const SkinnyGemmArgs& args, const MoeFp4WgmmaSplit& split,
                          int grid_y, int grid_z, cudaStream_t stream) {
  if (group_rows <= 8) {
    launch_config<8>(variant, args, split, grid_y, grid_z, stream);
  } else if (group_rows <= 16) {
    launch_config<16>(variant, args, split, grid_y, grid_z, stream);
  } else {
    launch_config<32>(variant, args, split, grid_y, grid_z, stream);
  }
}

}  // namespace deepinfer::ops::cuda
