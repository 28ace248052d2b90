// The routed experts' decode GEMM (the skinny fp4 work items of backend_moe.cpp) on Hopper's
// warpgroup MMA: on sm_90 mma.sync e4m3 is emulated (F2FP + f16 HMMA per m16n8k32), only wgmma
// multiplies fp8 natively. Each CTA (one warpgroup) owns 64 weight rows of one expert for one item.
// fp4 tiles stream in through a cp.async ring; the item's act-quant e4m3 rows are B (N = 8 / 16 / 32
// tokens). Items of 32 rows: the fp4 tile is widened once into 128-byte-swizzled K-major e4m3 (the A
// operand) in shared memory. Items of <= 16 rows ("register-A form", below): each thread converts its own
// A fragment into registers instead (17-20% faster at 8..128 tokens, same bits; PERFORMANCE_CUDA_OPS.md).
//
// Layout facts the kernels rest on (all confirmed on the H200: probe and parity tests, compute-sanitizer
// memcheck clean on a full-size V4-Flash expert case, 2026-11-30): smem descriptor start >> 4, LBO 16 B,
// SBO 1024 B (8 rows x 128 B), 128-byte swizzle, every tile 1024-aligned; 16-byte chunk c of row r at
// r * 128 + ((c ^ r % 8) << 4); K step s of a 128-K stage = descriptor start + 32 s bytes; B = the item's
// rows, N x 128 bytes K-major; wgmma scale-d = 0 ignores the accumulator's old values; fp4 element 2b in
// the low nibble of byte b (quantize_fp4), widened exactly to e4m3 (skinny::e2m1x4_to_e4m3x4).
// Other forms (a plain launch without carveout or prefetch, 4 / 6 stages, streamed scales, K chunks with
// a split, a programmatic-dependent launch) were measured slower or within noise and deleted (session 6;
// docs/PERFORMANCE_CUDA_OPS.md has their numbers).
#include <type_traits>

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
// e4m3 activation rows of one stage (both forms).
template <int NT>
constexpr int b_tile_bytes() { return NT * kBK < 1024 ? 1024 : NT * kBK; }

template <int NT>
struct Layout {
  static constexpr int kBTile = b_tile_bytes<NT>();
  static constexpr int kA = 0;
  static constexpr int kRaw = kA + 2 * kATile;
  static constexpr int kB = kRaw + kStages * kRawTile;
  static constexpr int kXs = kB + kStages * kBTile;               // f32 act scales, NT per stage
  static constexpr int kWs = kXs + kStages * NT * 4;              // ue8m0 weight scales: 64 rows x ws_stride(K)
  static int bytes(std::int64_t k) { return kWs + kRows * ws_stride(k) + 1024; }  // + alignment slack
};

// 16-byte weight copy asking L2 to fetch the surrounding 256 bytes (the next stages' pieces of the same
// weight row), so DRAM sees 256-byte reads where each stage takes 64 bytes of a row.
template <typename = void>  // (a template: no unused-function warning where only sm_90a uses it)
__device__ __forceinline__ void cp_async_weight16(std::uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
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

// One CTA's work: 64 weight rows (n0 ..) of one expert for the item's rows row0 .. row0 + mrows - 1.
struct CtaTile {
  const std::uint8_t* w_bytes;  // fp4 row n0 of the expert's weight
  const std::uint8_t* scale;    // its ue8m0 scale row n0, rows scale_ld bytes apart
  std::int64_t scale_ld;
  std::int64_t row0, n0;
  int mrows, ktiles, wstride;
  int r_lo;  // this thread's accumulator rows r_lo, r_lo + 8 of the tile
};

// The CTA's tile; the item's activation rows (rows past it: -1) into rows_s, and the tile's ue8m0
// weight scales into ws (cp.async, in the caller's first group: 16-byte copies where rows allow, else
// 4-byte ones). The caller's __syncthreads publishes rows_s.
template <int NT>
__device__ __forceinline__ CtaTile begin_tile(const SkinnyGemmArgs& args, std::int32_t* rows_s, std::uint8_t* ws) {
  const int4 item = args.items[blockIdx.y];
  const DevWeight w = args.tables[blockIdx.z][item.x];
  const int tid = threadIdx.x;
  CtaTile t;
  t.ktiles = static_cast<int>(args.k / kBK);
  t.row0 = item.y;
  t.mrows = item.z;
  t.n0 = static_cast<std::int64_t>(blockIdx.x) * kRows;
  t.w_bytes = static_cast<const std::uint8_t*>(w.data) + t.n0 * (args.k / 2);
  t.wstride = ws_stride(args.k);
  t.r_lo = (tid / 32) * 16 + (tid % 32) / 4;
  for (int c = tid; c < NT; c += kThreads)
    rows_s[c] = c < t.mrows ? static_cast<std::int32_t>(args.x_rows ? args.x_rows[t.row0 + c] : t.row0 + c) : -1;
  const auto* scale = static_cast<const std::uint8_t*>(w.scale);
  t.scale = scale + t.n0 * w.scale_ld;
  t.scale_ld = w.scale_ld;
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

// One stage's B operand (shared-memory form): NT swizzled e4m3 activation rows of K tile kt (rows past
// the item zero-filled) and their act scales (act block 128: one per row).
template <int NT>
__device__ __forceinline__ void load_acts(const SkinnyGemmArgs& args, const std::int32_t* rows_s, std::uint8_t* b,
                                          float* xs, int kt) {
  const int tid = threadIdx.x;
  for (int idx = tid; idx < NT * 8; idx += kThreads) {
    const int r = idx / 8, c = idx % 8;
    const std::int32_t src = rows_s[r];
    const std::uint8_t* g = src >= 0 ? args.x + src * args.ldx + kt * kBK + c * 16 : args.x;
    cp_async16_zfill(smem_u32(b + wg::swizzled(r, c)), g, src >= 0);
  }
  if (tid < NT) {
    const std::int32_t src = rows_s[tid];
    if (src >= 0) {
      cp_async4(smem_u32(xs + tid), args.xs + static_cast<std::int64_t>(kt) * args.xs_ld + src);
    } else {
      xs[tid] = 0.0f;
    }
  }
}

// acc += each 32-K partial of stage kt x (ue8m0 weight scale x act block scale), in ascending K (fmaf,
// as skinny_fp4_wide_kernel does per 32-K step). Rows r_lo and r_lo + 8: one scale word each (byte s =
// K step s).
template <int NT, int R>
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
        const float sx = xs[j * 8 + (lane % 4) * 2 + (e % 2)];
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

// A kernel's end: the ring's last copies drained, then its outputs.
template <int NT, int R>
__device__ __forceinline__ void finish_cta(const SkinnyGemmArgs& args, const float (&acc)[R], const CtaTile& t) {
  cp_async_wait_group<0>();
  store_tile<NT>(args, acc, t);
}

// wgmma m64nNk32 e4m3 x e4m3 -> f32 (wgmma_sm90.cuh's wgmma_e4m3 with acc_in = 0: scale-d false, D =
// A·B, a fresh partial per 32-K weight-scale block). Accumulator fragment (the PTX ISA's m64nN f32 D
// layout, as moe_prefill_wgmma.cu's verified bf16 one): warp w of the warpgroup holds rows 16w +
// lane/4 and 16w + lane/4 + 8; register 4j + e holds column 8j + 2 (lane % 4) + (e % 2) of row + 8 (e / 2).

// Grid: (n / 64, max items, weight sets). Per output element the K order is fixed by K alone: 32-K
// partials from the tensor core, each scaled by (ue8m0 weight scale x act block scale) in f32 and added
// in ascending K. This shared-memory form takes items of 32 rows (the register-A form below, <= 16).
template <int NT>
__global__ void __launch_bounds__(kThreads) moe_fp4_wgmma_kernel(SkinnyGemmArgs args) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<NT>;
  constexpr int R = NT / 2;  // accumulator registers per thread
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  std::uint8_t* smem = align1024(smem_in);
  __shared__ std::int32_t rows_s[NT];

  if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
  const CtaTile t = begin_tile<NT>(args, rows_s, smem + L::kWs);
  __syncthreads();
  const int tid = threadIdx.x, ktiles = t.ktiles;

  // Stage `st` <- K tile kt: 64 fp4 row pieces of 64 bytes and the activations.
  auto load_weights = [&](int st, int kt) {
    std::uint8_t* raw = smem + L::kRaw + st * kRawTile;
#pragma unroll
    for (int i = 0; i < kRawTile / 16 / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / 4, c = idx % 4;
      cp_async_weight16(smem_u32(raw + r * kRawRow + c * 16),
                        t.w_bytes + r * (args.k / 2) + static_cast<std::int64_t>(kt) * kRawRow + c * 16);
    }
  };
  auto load_x = [&](int st, int kt) {
    load_acts<NT>(args, rows_s, smem + L::kB + st * L::kBTile, reinterpret_cast<float*>(smem + L::kXs + st * NT * 4),
                  kt);
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
  float part[4][R];  // one fresh 32-K partial per weight-scale block of a stage (wgmma scale-d = 0)
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int i = 0; i < R; ++i) part[s][i] = 0.0f;
  // Groups: one per stage; the prologue's stages (and the scale copies) form the first, S - 2 empty
  // groups keep the loop's count.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < ktiles) load_tile(s, s);
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
    wg::fence_proxy_async();  // this thread's cp.async and widened rows, for the next wgmma
    __syncthreads();
  }
  finish_cta<NT>(args, acc, t);
#else
  __trap();
#endif
}

// ---- register-A form (items of <= 16 rows) --------------------------------------------------------
// The fp4 tile is not widened into shared memory: each thread converts the bytes of its own wgmma A
// fragment (rows lane/4 and + 8 of its warp's 16, K 4q..4q+3 and 16+4q.. of each 32-K step, q =
// lane % 4) straight from the cp.async ring into registers, so a stage costs one barrier, no e4m3
// stores and no A reads by the tensor core from shared memory. Same e4m3 codes, same K order inside
// each 32-K step (the A fragment is the one the swizzled tile describes), same f32 scaling and
// ascending-K sum as the kernel above: bit-identical outputs.
//
// Written for few instructions per weight byte (session 6: the first version issued ~600 SASS
// instructions per 128-K stage, issue-bound at ~2 TB/s; this one ~240 for items of 8, ~270 for 16):
// each thread's copies are fixed for the CTA (addresses computed once, no loops), a stage's B tile,
// weight rows and act scales share one ring slot (one rolling offset), the weight scales convert by a
// shift (exact for every code a quantiser writes; a CTA whose table holds code 0 or 255 converts them
// as ue8m0_to_f32 does), and the wgmma descriptors are one add from the slot offset.

// Weight rows of a stage padded to 80 bytes: the 8 rows x 2 words a warp's 32-bit reads touch fall in
// 16 distinct banks (64-byte rows would put rows r and r + 2 in the same ones). The pads hold the
// stage's act scales.
constexpr int kRegaRow = kRawRow + 16;

// One ring slot: the B tile (1024-aligned: the slot size is a multiple of 1024), then the 64 padded fp4
// rows; act scale i of the stage (i = act block x NT + token) is float i % 4 of row i / 4's pad.
template <int NT, int S>
struct RegaLayout {
  static constexpr int kBTile = b_tile_bytes<NT>();
  static constexpr int kSlot = kBTile + kRows * kRegaRow;  // 6 KB (NT = 8) / 7 KB (16)
  static_assert(kSlot % 1024 == 0, "every slot's B tile on a 1024-byte boundary");
  static constexpr int kWs = S * kSlot;
  static int bytes(std::int64_t k) { return kWs + kRows * ws_stride(k) + 1024; }
  static constexpr int xs_at(int i) { return kBTile + (i / 4) * kRegaRow + kRawRow + (i % 4) * 4; }
};

// 8 e2m1 (a 32-bit word, element 2b in the low nibble of byte b) -> 8 e4m3: .x = elements 0..3,
// .y = 4..7. The codes skinny::e2m1x4_to_e4m3x4 gives (magnitude by table, sign bit moved to bit 7),
// in 8 instructions for 8 elements: even elements' signs (bit 3 of a byte) reach bit 7 by the shift.
template <typename = void>
__device__ __forceinline__ uint2 e2m1x8_to_e4m3x8(std::uint32_t w, std::uint32_t tbl) {
  const std::uint32_t m = w & 0x77777777u, u = w << 4;
  const std::uint32_t mag0 = __byte_perm(tbl, 0x4c484440u, m);
  const std::uint32_t mag1 = __byte_perm(tbl, 0x4c484440u, m >> 16);
  const std::uint32_t sg0 = __byte_perm(u, w, 0x5140u), sg1 = __byte_perm(u, w, 0x7362u);
  return make_uint2((sg0 & 0x80808080u) | mag0, (sg1 & 0x80808080u) | mag1);
}

// The A fragments of one stage: a[s] for K step s (32 K), from the thread's first word of row r_lo in
// the stage's slot (`row`: bytes 4 (q / 2) .. of the row; row r_lo + 8 is 8 rows further).
template <typename = void>
__device__ __forceinline__ void rega_fragments(std::uint32_t (&a)[4][4], const std::uint8_t* row, std::uint32_t sel,
                                               std::uint32_t tbl) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      // bytes 2q, 2q+1 (K 4q..4q+3) and 8+2q, 9+2q (K 16+4q..) of the step's 16 bytes
      const std::uint8_t* p = row + 8 * h * kRegaRow + 16 * s;
      const std::uint32_t lo = *reinterpret_cast<const std::uint32_t*>(p);
      const std::uint32_t hi = *reinterpret_cast<const std::uint32_t*>(p + 8);
      const uint2 e = e2m1x8_to_e4m3x8(__byte_perm(lo, hi, sel), tbl);
      a[s][h] = e.x;
      a[s][2 + h] = e.y;
    }
}

// A thread's share of every stage's copies, fixed for the CTA (stage kt reads K tile kt of each source):
// two 16-byte weight pieces (rows tid / 4 and + 32, chunk tid % 4), at most one 16-byte activation
// chunk (row tid / 8, chunk tid % 8: threads < NT x 8) and one act scale (the last NT x KB threads).
// Rows past the item are zero-filled (source size 0), as load_acts does.
template <int NT, int S, int KB>
struct RegaCopies {
  using L = RegaLayout<NT, S>;
  static constexpr int kScaleThreads = NT * KB;
  const std::uint8_t* w_lo;  // K tile 0 of the thread's weight pieces (rows tid / 4 and + 32)
  const std::uint8_t* w_hi;
  const std::uint8_t* x;     // ... of its activation chunk
  const float* xs;           // ... of its act scale
  std::uint32_t xs_step;     // floats per K tile of act scales
  std::uint32_t w_dst, x_dst, xs_dst, x_size, xs_size;  // slot offsets; bytes read (0: zero-fill)
  bool x_on, xs_on;

  __device__ __forceinline__ RegaCopies(const SkinnyGemmArgs& args, const CtaTile& t, const std::int32_t* rows_s) {
    const int tid = threadIdx.x;
    w_lo = t.w_bytes + (tid / 4) * (args.k / 2) + (tid % 4) * 16;
    w_hi = w_lo + (kRows / 2) * (args.k / 2);
    w_dst = L::kBTile + (tid / 4) * kRegaRow + (tid % 4) * 16;
    x_on = tid < NT * 8;
    const std::int32_t xrow = x_on ? rows_s[tid / 8] : -1;
    x = xrow >= 0 ? args.x + xrow * args.ldx + (tid % 8) * 16 : args.x;
    x_size = xrow >= 0 ? 16 : 0;
    x_dst = wg::swizzled(tid / 8, tid % 8);
    const int i = tid - (kThreads - kScaleThreads);  // act scale i = block x NT + token
    xs_on = i >= 0;
    const std::int32_t srow = xs_on ? rows_s[i % NT] : -1;
    xs = args.xs + (xs_on ? (i / NT) * args.xs_ld : 0) + (srow >= 0 ? srow : 0);
    xs_size = srow >= 0 ? 4 : 0;
    xs_step = static_cast<std::uint32_t>(KB * args.xs_ld);
    xs_dst = L::xs_at(xs_on ? i : 0);
  }
  // K tile kt into the slot at shared address `slot`.
  __device__ __forceinline__ void issue(std::uint32_t slot, int kt) const {
    const std::uint32_t wk = static_cast<std::uint32_t>(kt) * kRawRow;
    cp_async_weight16(slot + w_dst, w_lo + wk);
    cp_async_weight16(slot + w_dst + (kRows / 2) * kRegaRow, w_hi + wk);
    if (x_on)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(slot + x_dst),
                   "l"(x + static_cast<std::uint32_t>(kt) * kBK), "r"(x_size)
                   : "memory");
    if (xs_on)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(slot + xs_dst),
                   "l"(xs + static_cast<std::uint32_t>(kt) * xs_step), "r"(xs_size)
                   : "memory");
  }
};

// Byte s of a ue8m0 scale word as f32. EXACT: ue8m0_to_f32 (code 0 = 2^-127, 255 = NaN); else the code
// shifted into the exponent field, the same value for codes 1..254 (quantize_fp4 writes no other: its
// amax floor 6 x 2^-126 gives code >= 1) in two instructions instead of a compare-and-branch chain.
template <bool EXACT, int S>
__device__ __forceinline__ float ue8m0_byte(std::uint32_t word) {
  if constexpr (EXACT) {
    return ue8m0_to_f32(static_cast<std::uint8_t>(word >> (8 * S)));
  } else if constexpr (8 * S <= 23) {
    return __uint_as_float((word << (23 - 8 * S)) & 0x7f800000u);
  } else {
    return __uint_as_float((word >> (8 * S - 23)) & 0x7f800000u);
  }
}

// Whether the CTA's weight-scale table holds a code 0 or 255 (then the CTA scales with ue8m0_to_f32):
// a byte is one of them iff its 8 bits are equal, i.e. b ^ (b >> 1) has no bit in 0..6.
template <typename = void>
__device__ __forceinline__ bool special_scale_codes(const std::uint8_t* ws, int wstride, int ktiles) {
  const std::uint8_t* row = ws + (threadIdx.x / 2) * wstride;
  std::uint32_t all = 0x80808080u;
  for (int c = threadIdx.x % 2; c < ktiles; c += 2) {  // 64 rows, two threads a row
    const std::uint32_t w = *reinterpret_cast<const std::uint32_t*>(row + 4 * c);
    all &= ((w ^ (w >> 1)) & 0x7f7f7f7fu) + 0x7f7f7f7fu;  // bit 7 of a byte: some bit pair differs
  }
  return __syncthreads_or((all & 0x80808080u) != 0x80808080u) != 0;
}

// acc += each 32-K partial of a stage x (weight scale x act scale), in ascending K: scale_partials'
// fmaf order and operands. sw_lo / sw_hi: the stage's scale words of rows r_lo / r_lo + 8 (byte s = K
// step s); sx[b][j]: the act scales of block b for columns 8j + 2q, + 1.
template <int NT, int KB, bool EXACT, int R>
__device__ __forceinline__ void rega_scale(float (&acc)[R], const float (&part)[4][R], std::uint32_t sw_lo,
                                           std::uint32_t sw_hi, const float2 (&sx)[KB][NT / 8]) {
  const float sw[4][2] = {{ue8m0_byte<EXACT, 0>(sw_lo), ue8m0_byte<EXACT, 0>(sw_hi)},
                          {ue8m0_byte<EXACT, 1>(sw_lo), ue8m0_byte<EXACT, 1>(sw_hi)},
                          {ue8m0_byte<EXACT, 2>(sw_lo), ue8m0_byte<EXACT, 2>(sw_hi)},
                          {ue8m0_byte<EXACT, 3>(sw_lo), ue8m0_byte<EXACT, 3>(sw_hi)}};
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 x = sx[KB == 1 ? 0 : s][j];
        acc[4 * j + e] = fmaf(part[s][4 * j + e], sw[s][e / 2] * (e % 2 != 0 ? x.y : x.x), acc[4 * j + e]);
      }
}

// The wgmma B descriptor of a shared address (wg::smem_desc) as its constant high word and a low word
// that moves with the address (start >> 4: a slot offset or a K step adds without carrying out).
template <typename = void>
__device__ __forceinline__ std::uint64_t b_desc(std::uint32_t lo) {
  return (wg::smem_desc(0) & ~std::uint64_t{0xffffffffu}) | lo;
}

// d = A · B (m64n8k32 / m64n16k32, A in registers, B by descriptor) with d written only: scale-d 0, so
// the registers' old values are dead before the instruction and the compiler may reuse them meanwhile.
template <typename = void>
__device__ __forceinline__ void wgmma_e4m3_rs_fresh(float (&d)[4], const std::uint32_t (&a)[4], std::uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 0, 1, 1;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <typename = void>
__device__ __forceinline__ void wgmma_e4m3_rs_fresh(float (&d)[8], const std::uint32_t (&a)[4], std::uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "
      "%12, 0, 1, 1;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

template <int NT, int S, int MINB, int KB = 1>
__global__ void __launch_bounds__(kThreads, MINB) moe_fp4_wgmma_rega_kernel(SkinnyGemmArgs args) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(S >= 3, "two stages ahead of the one being multiplied");
  using L = RegaLayout<NT, S>;
  __shared__ std::int32_t rows_s[NT];
  __shared__ std::uint32_t table_s;
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
  std::uint8_t* smem = align1024(smem_in);
  const CtaTile t = begin_tile<NT>(args, rows_s, smem + L::kWs);
  // (k >> 40 is 0, but not to the compiler: see tbl below)
  if (threadIdx.x == 0) table_s = 0x3c383000u | static_cast<std::uint32_t>(args.k >> 40);
  __syncthreads();
  const int lane = threadIdx.x % 32, q = lane % 4, ktiles = t.ktiles;
  const std::uint32_t smem_addr = smem_u32(smem);
  const RegaCopies<NT, S, KB> copies(args, t, rows_s);
  // S - 2 stages ahead: a stage's slot is refilled two iterations after its wgmma was issued (waited
  // for in the next one). The prologue's stages (and the scale copies) form the first group; S - 3
  // empty groups keep the loop's count of one per stage.
#pragma unroll
  for (int s = 0; s < S - 2; ++s)
    if (s < ktiles) copies.issue(smem_addr + s * L::kSlot, s);
#pragma unroll
  for (int s = 0; s < S - 2; ++s) cp_async_commit_group();

  constexpr int R = NT / 2;
  const std::uint32_t sel = (lane & 1) != 0 ? 0x7632u : 0x5410u;  // q odd: the upper byte pair of each word
  // e4m3 magnitudes of e2m1 codes 0..3 in one register, read back from shared memory: as a known
  // constant ptxas copies it from a uniform register before each of its 16 uses a stage.
  const std::uint32_t tbl = table_s;
  // Per-thread offsets within a slot: its fragment words, its act scale pairs (tokens 2q, 2q + 1 of
  // column group j, act block b at pad row (b x NT + 8j) / 4 + q / 2).
  const std::uint32_t frag_at = L::kBTile + t.r_lo * kRegaRow + 4 * (q / 2);
  const std::uint32_t xs_at = L::xs_at(2 * q);
  const std::uint32_t ws_at = L::kWs + t.r_lo * t.wstride, ws_hi = 8 * t.wstride;  // row r_lo's scales, + 8 rows
  const std::uint32_t desc_lo = static_cast<std::uint32_t>(wg::smem_desc(smem_addr));
  bool special = false;
  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  float part[4][R];               // the stage in flight's 32-K partials (wgmma scale-d 0: written fresh)
  std::uint32_t a_flat[16] = {};  // its A fragments: a[s] for K step s
  auto& a = *reinterpret_cast<std::uint32_t(*)[4][4]>(a_flat);
  // Ring slots as byte offsets: stage kt's (cur), kt - 1's (prev: its act scales are read when its
  // partials are scaled) and kt - 2's (free: it receives stage kt + S - 2).
  std::uint32_t cur = 0, prev = (S - 1) * L::kSlot, prev2 = (S - 2) * L::kSlot;
  // Stage kt's partials into acc (its wgmma done; its slot is `prev` by then).
  auto scale = [&](int kt) {
    wg::wgmma_wait<0>();
    for (auto& p : part) wg::fence_operands(p);
    wg::fence_operands(a_flat);
    float2 sx[KB][NT / 8];
#pragma unroll
    for (int b = 0; b < KB; ++b)
#pragma unroll
      for (int j = 0; j < NT / 8; ++j)
        sx[b][j] = *reinterpret_cast<const float2*>(smem + prev + xs_at + (b * NT + 8 * j) / 4 * kRegaRow);
    const std::uint8_t* ws = smem + ws_at + 4 * kt;
    const std::uint32_t sw_lo = *reinterpret_cast<const std::uint32_t*>(ws);
    const std::uint32_t sw_hi = *reinterpret_cast<const std::uint32_t*>(ws + ws_hi);
    if (special) {
      rega_scale<NT, KB, true>(acc, part, sw_lo, sw_hi, sx);
    } else {
      rega_scale<NT, KB, false>(acc, part, sw_lo, sw_hi, sx);
    }
  };
  // One stage: refill the free slot, scale stage kt - 1 (`first`: none), convert stage kt's fragments
  // and issue its wgmmas. The tensor core multiplies stage kt while the next stage's barrier and copies
  // issue; scaling kt - 1 before converting kt keeps one partial and one fragment set (80 registers
  // for items of 8, no spills: 5 CTAs an SM).
  auto stage = [&](int kt, auto first) {
    cp_async_wait_group<S - 3>();
    wg::fence_proxy_async();  // this thread's copies of stage kt, for the wgmma's B reads
    __syncthreads();          // everyone's; everyone is past stage kt - 1's reads and kt - 2's wgmma
    if constexpr (decltype(first)::value) special = special_scale_codes(smem + L::kWs, t.wstride, ktiles);
    if (kt + S - 2 < ktiles) copies.issue(smem_addr + prev2, kt + S - 2);
    cp_async_commit_group();
    if constexpr (!decltype(first)::value) scale(kt - 1);
    rega_fragments(a, smem + cur + frag_at, sel, tbl);
    wg::wgmma_fence();
    const std::uint32_t d = desc_lo + (cur >> 4);
#pragma unroll
    for (int s = 0; s < 4; ++s) wgmma_e4m3_rs_fresh(part[s], a[s], b_desc(d + 2 * s));  // + 32 B a K step
    wg::wgmma_commit();
    prev2 = prev;
    prev = cur;
    cur = cur + L::kSlot == S * L::kSlot ? 0 : cur + L::kSlot;
  };
  stage(0, std::true_type{});
  for (int kt = 1; kt < ktiles; ++kt) stage(kt, std::false_type{});
  scale(ktiles - 1);
  finish_cta<NT>(args, acc, t);
#else
  __trap();
#endif
}

// Every launch asks for the largest shared-memory carveout: the driver's default may keep more L1 and
// fit fewer CTAs per SM than the kernel's shared memory allows.
template <typename Kernel>
void launch_kernel(Kernel kernel, int smem, const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.n / kRows), static_cast<unsigned>(grid_y), static_cast<unsigned>(grid_z));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  kernel<<<grid, kThreads, static_cast<std::size_t>(smem), stream>>>(args);
}

// Items of <= 16 rows: the register-A form (5 stages; 5 CTAs per SM for 8-row items, 4 for 16: their
// shared memory, 40 / 45 KB at K 4096, allows no more), act block 128 or 32 (V4.1); items of 32 rows: the
// shared-memory form.
template <int NT>
void launch_config(const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  if constexpr (NT <= 16) {
    constexpr int kMinBlocks = NT == 8 ? 5 : 4;
    if (args.act_block == 32) {
      launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 5, kMinBlocks, 4>, RegaLayout<NT, 5>::bytes(args.k), args, grid_y,
                    grid_z, stream);
    } else {
      launch_kernel(moe_fp4_wgmma_rega_kernel<NT, 5, kMinBlocks, 1>, RegaLayout<NT, 5>::bytes(args.k), args, grid_y,
                    grid_z, stream);
    }
  } else {
    launch_kernel(moe_fp4_wgmma_kernel<NT>, Layout<NT>::bytes(args.k), args, grid_y, grid_z, stream);
  }
}

}  // namespace

bool moe_fp4_wgmma_fits(std::int64_t n, std::int64_t k, const DevWeight& w) {
  return n % kRows == 0 && k % kBK == 0 && k <= kMoeFp4WgmmaMaxK && !w.scale_f32 && w.block == 32 &&
         w.scale_ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(w.scale) % 4 == 0 &&
         reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0;
}

void launch_moe_fp4_wgmma(int group_rows, const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  if (group_rows <= 8) {
    launch_config<8>(args, grid_y, grid_z, stream);
  } else if (group_rows <= 16) {
    launch_config<16>(args, grid_y, grid_z, stream);
  } else {
    launch_config<32>(args, grid_y, grid_z, stream);
  }
}

}  // namespace deepinfer::ops::cuda
