// The routed experts' decode GEMM (the skinny fp4 work items of backend_moe.cpp) on Hopper's
// warpgroup MMA: on sm_90 mma.sync e4m3 is emulated (F2FP + f16 HMMA per m16n8k32), only wgmma
// multiplies fp8 natively. Each CTA (one warpgroup) owns 64 weight rows of one expert for one item.
// fp4 tiles stream in through a cp.async ring; the item's act-quant e4m3 rows are B (N = 8 / 16 / 32
// tokens). Items of 32 rows: the fp4 tile is widened once into 128-byte-swizzled K-major e4m3 (the A
// operand) in shared memory (moe_fp4_wgmma_smem.cu). Items of <= 16 rows ("register-A form", below): each thread converts its own
// A fragment into registers instead (17-20% faster at 8..128 tokens, same bits; PERFORMANCE_CUDA_OPS.md).
// By default both forms take K-permuted operands (below: ldmatrix fragments, fp4 widened to 2^-6-scaled
// e4m3 by shifts); CudaBackendOptions::moe_fp4_wgmma_permuted = false keeps the unpermuted ones.
//
// Layout facts the kernels rest on (all confirmed on the H200: probe and parity tests, compute-sanitizer
// memcheck clean on a full-size V4-Flash expert case, 2026-11-30): smem descriptor start >> 4, LBO 16 B,
// SBO 1024 B (8 rows x 128 B), 128-byte swizzle, every tile 1024-aligned; 16-byte chunk c of row r at
// r * 128 + ((c ^ r % 8) << 4); K step s of a 128-K stage = descriptor start + 32 s bytes; B = the item's
// rows, N x 128 bytes K-major; wgmma scale-d = 0 ignores the accumulator's old values; fp4 element 2b in
// the low nibble of byte b (quantize_fp4), widened exactly to e4m3 (skinny::e2m1x4_to_e4m3x4).
// Other forms (a plain launch without carveout or prefetch, 4 / 6 stages, streamed scales, K chunks with
// a split, a programmatic-dependent launch) were measured slower or within noise and deleted (session 6;
// docs/PERFORMANCE_CUDA_OPS.md has their numbers). Session 9: the register-A prologue before
// griddepcontrol.wait (EARLY, on) and an optional K order in two halves (args.k_ranges, off by default:
// split over CTAs it took 4% off one token's MoE; walked by one CTA it cost 2-7% from 8 tokens up with a
// per-stage test, since replaced by two loops: not yet re-measured).
#include <type_traits>

#include "ops/cuda/moe_fp4_wgmma.cuh"

namespace deepinfer::ops::cuda {
namespace {

using namespace moe_fp4;

// The A fragments of one stage, K-permuted: a[s][h] / a[s][2 + h] = the low / high nibbles of the
// thread's word of row r_lo + 8h, step s. Two ldmatrix.x4: matrix j of load p is (row half j % 2, step
// 2p + j / 2); lane l gives row l % 8 of matrix l / 8 (`at`: its shared address for load 0).
template <typename = void>
__device__ __forceinline__ void rega_fragments_permuted(std::uint32_t (&a)[4][4], std::uint32_t at) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    std::uint32_t w[4];
    ldsm_x4(at + 32 * p, w);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint2 e = e2m1x8_to_e4m3x8_scaled(w[j]);
      a[2 * p + j / 2][j % 2] = e.x;
      a[2 * p + j / 2][2 + j % 2] = e.y;
    }
  }
}

// acc + part x (weight scale x act scale) for a partial of scaled codes (2^-6 x the true one) and the
// weight's ue8m0 code: (2^6 x scale) x sx where that is exact (codes <= 248: the same bits as the shift
// of code + 6 the register-A form takes), else the partial times 2^6 (NaN, 2^122..2^127 stay as they are).
template <typename = void>
__device__ __forceinline__ float scaled_fma(float part, std::uint8_t code, float sx, float acc) {
  return code <= 248 ? fmaf(part, ue8m0_to_f32(code) * 64.0f * sx, acc)
                     : fmaf(part * 64.0f, ue8m0_to_f32(code) * sx, acc);
}

// ---- register-A form (items of <= 16 rows) --------------------------------------------------------
// The fp4 tile is not widened into shared memory: each thread converts the bytes of its own wgmma A
// fragment (rows lane/4 and + 8 of its warp's 16, K 4q..4q+3 and 16+4q.. of each 32-K step, q =
// lane % 4) straight from the cp.async ring into registers, so a stage costs one barrier, no e4m3
// stores and no A reads by the tensor core from shared memory. Same e4m3 codes, same K order inside
// each 32-K step (the A fragment is the one the swizzled tile describes), same f32 scaling and
// ascending-K sum as the shared-memory form (moe_fp4_wgmma_smem.cu): bit-identical outputs.
//
// Written for few instructions per weight byte (session 6: the first version issued ~600 SASS
// instructions per 128-K stage, issue-bound at ~2 TB/s; this one ~240 for items of 8, ~270 for 16;
// K-permuted, session 7: 187 / 220):
// each thread's copies are fixed for the CTA (addresses computed once, no loops), a stage's B tile,
// weight rows and act scales share one ring slot (one rolling offset), the weight scales convert by a
// shift (exact for every code a quantiser writes; a CTA whose table holds code 0 or 255 converts them
// as ue8m0_to_f32 does), and the wgmma descriptors are one add from the slot offset.

// Weight rows of a stage padded to 80 bytes: the 8 rows x 2 words a warp's 32-bit reads touch fall in
// 16 distinct banks (64-byte rows would put rows r and r + 2 in the same ones), as do the 8 rows x 16
// bytes of an ldmatrix (K-permuted). The pads hold the stage's act scales.
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
    x = xrow >= 0 ? args.x + xrow * args.ldx + static_cast<std::int64_t>(t.kt0) * kBK + (tid % 8) * 16 : args.x;
    x_size = xrow >= 0 ? 16 : 0;
    x_dst = wg::swizzled(tid / 8, tid % 8);
    const int i = tid - (kThreads - kScaleThreads);  // act scale i = block x NT + token
    xs_on = i >= 0;
    const std::int32_t srow = xs_on ? rows_s[i % NT] : -1;
    xs_step = static_cast<std::uint32_t>(KB * args.xs_ld);
    xs = args.xs + static_cast<std::int64_t>(t.kt0) * xs_step + (xs_on ? (i / NT) * args.xs_ld : 0) +
         (srow >= 0 ? srow : 0);
    xs_size = srow >= 0 ? 4 : 0;
    xs_dst = L::xs_at(xs_on ? i : 0);
  }
  // K tile kt into the slot at shared address `slot`.
  __device__ __forceinline__ void issue(std::uint32_t slot, int kt) const {
    issue_weights(slot, kt);
    issue_acts(slot, kt);
  }
  // Its two halves: the immutable weights (may be issued before griddepcontrol.wait), the activations.
  __device__ __forceinline__ void issue_weights(std::uint32_t slot, int kt) const {
    const std::uint32_t wk = static_cast<std::uint32_t>(kt) * kRawRow;
    cp_async_weight16(slot + w_dst, w_lo + wk);
    cp_async_weight16(slot + w_dst + (kRows / 2) * kRegaRow, w_hi + wk);
  }
  __device__ __forceinline__ void issue_acts(std::uint32_t slot, int kt) const {
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

// Whether the CTA's weight-scale table holds a code the shift cannot convert (then the CTA scales as
// ue8m0_to_f32 does). Unpermuted: codes 0 and 255 (a byte is one of them iff its 8 bits are equal, i.e.
// b ^ (b >> 1) has no bit in 0..6). K-permuted (PK): codes >= 249, whose code + 6 leaves the exponent
// range (b >= 249 iff bit 7 is set and b's low 7 bits + 7 carry into bit 7); otherwise every thread then
// adds 6 to the codes it read (no byte carries), so the shift gives 2^6 x the scale.
template <bool PK>
__device__ __forceinline__ bool special_scale_codes(std::uint8_t* ws, int wstride, int ktiles) {
  std::uint8_t* row = ws + (threadIdx.x / 2) * wstride;
  std::uint32_t any = 0;
  for (int c = threadIdx.x % 2; c < ktiles; c += 2) {  // 64 rows, two threads a row
    const std::uint32_t w = *reinterpret_cast<const std::uint32_t*>(row + 4 * c);
    if constexpr (PK) {
      any |= w & ((w & 0x7f7f7f7fu) + 0x07070707u);
    } else {
      any |= ~(((w ^ (w >> 1)) & 0x7f7f7f7fu) + 0x7f7f7f7fu);  // bit 7 of a byte: all its bits equal
    }
  }
  const bool special = __syncthreads_or((any & 0x80808080u) != 0) != 0;
  if (PK && !special) {
    for (int c = threadIdx.x % 2; c < ktiles; c += 2) *reinterpret_cast<std::uint32_t*>(row + 4 * c) += 0x06060606u;
    __syncthreads();  // (a one-stage CTA scales right after its first stage, with no barrier between)
  }
  return special;
}

// acc += each 32-K partial of a stage x (weight scale x act scale), in ascending K: scale_partials'
// fmaf order and operands. sw_lo / sw_hi: the stage's scale words of rows r_lo / r_lo + 8 (byte s = K
// step s); sx[b][j]: the act scales of block b for columns 8j + 2q, + 1. MODE 0: scales by the shift
// (codes + 6 for K-permuted partials); 1: ue8m0_to_f32; 2: scaled_fma (K-permuted, special codes).
template <int NT, int KB, int MODE, int R>
__device__ __forceinline__ void rega_scale(float (&acc)[R], const float (&part)[4][R], std::uint32_t sw_lo,
                                           std::uint32_t sw_hi, const float2 (&sx)[KB][NT / 8]) {
  const float sw[4][2] = {{ue8m0_byte<MODE != 0, 0>(sw_lo), ue8m0_byte<MODE != 0, 0>(sw_hi)},
                          {ue8m0_byte<MODE != 0, 1>(sw_lo), ue8m0_byte<MODE != 0, 1>(sw_hi)},
                          {ue8m0_byte<MODE != 0, 2>(sw_lo), ue8m0_byte<MODE != 0, 2>(sw_hi)},
                          {ue8m0_byte<MODE != 0, 3>(sw_lo), ue8m0_byte<MODE != 0, 3>(sw_hi)}};
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 x = sx[KB == 1 ? 0 : s][j];
        const float xe = e % 2 != 0 ? x.y : x.x;
        if constexpr (MODE == 2) {
          const std::uint32_t word = e / 2 != 0 ? sw_hi : sw_lo;
          acc[4 * j + e] = scaled_fma(part[s][4 * j + e], static_cast<std::uint8_t>(word >> (8 * s)), xe, acc[4 * j + e]);
        } else {
          acc[4 * j + e] = fmaf(part[s][4 * j + e], sw[s][e / 2] * xe, acc[4 * j + e]);
        }
      }
}

// The wgmma B descriptor of a shared address (wg::smem_desc) as its constant high word and a low word
// that moves with the address (start >> 4: a slot offset or a K step adds without carrying out).
template <typename = void>
__device__ __forceinline__ std::uint64_t b_desc(std::uint32_t lo) {
  return (wg::smem_desc(0) & ~std::uint64_t{0xffffffffu}) | lo;
}

// EARLY (CudaBackendOptions::moe_fp4_wgmma_early): the CTA reads its item, the expert table and the
// activation rows, and issues its prologue's weight stages and weight scales BEFORE griddepcontrol.wait,
// the activations after it. Safe because everything read before the wait is either immutable (weights,
// scales, the expert tables) or written by moe_sort, which completed before this launch: the GEMM's
// predecessor (the act quant for w1/w3, the SwiGLU for w2) lets dependents launch only after its own
// wait, and its predecessor chain runs back to the sort. Blocks past the item count leave without
// waiting; block y = 0 waits when there are no items at all, so the kernel never completes before its
// predecessor (docs/CUDA.md section 3 rule 4).
template <int NT, int S, int MINB, int KB, bool PK, bool EARLY, bool WALK>
__global__ void __launch_bounds__(kThreads, MINB) moe_fp4_wgmma_rega_kernel(SkinnyGemmArgs args) {
  if constexpr (!EARLY) enter_dependent_kernel();
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(S >= 3, "two stages ahead of the one being multiplied");
  using L = RegaLayout<NT, S>;
  __shared__ std::int32_t rows_s[NT];
  __shared__ std::uint32_t table_s;
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  if (static_cast<int>(blockIdx.y) >= __ldcg(args.item_count)) {
    if constexpr (EARLY) {
      if (blockIdx.y == 0) grid_dependency_wait();
    }
    return;
  }
  std::uint8_t* smem = align1024(smem_in);
  const CtaTile t = begin_tile<NT>(args, rows_s, smem + L::kWs);
  // (k >> 40 is 0, but not to the compiler: see tbl below)
  if (!PK && threadIdx.x == 0) table_s = 0x3c383000u | static_cast<std::uint32_t>(args.k >> 40);
  __syncthreads();
  const int lane = threadIdx.x % 32, q = lane % 4, ktiles = t.ktiles;
  const std::uint32_t smem_addr = smem_u32(smem);
  const RegaCopies<NT, S, KB> copies(args, t, rows_s);
  // S - 2 stages ahead: a stage's slot is refilled two iterations after its wgmma was issued (waited
  // for in the next one). The prologue's stages (and the scale copies) form the first group; S - 3
  // empty groups keep the loop's count of one per stage.
#pragma unroll
  for (int s = 0; s < S - 2; ++s)
    if (s < ktiles) {
      if constexpr (EARLY) {
        copies.issue_weights(smem_addr + s * L::kSlot, s);
      } else {
        copies.issue(smem_addr + s * L::kSlot, s);
      }
    }
  if constexpr (EARLY) {
    enter_dependent_kernel();
#pragma unroll
    for (int s = 0; s < S - 2; ++s)
      if (s < ktiles) copies.issue_acts(smem_addr + s * L::kSlot, s);
  }
#pragma unroll
  for (int s = 0; s < S - 2; ++s) cp_async_commit_group();

  constexpr int R = NT / 2;
  [[maybe_unused]] const std::uint32_t sel = (lane & 1) != 0 ? 0x7632u : 0x5410u;  // q odd: the upper byte pair of each word
  // e4m3 magnitudes of e2m1 codes 0..3 in one register, read back from shared memory: as a known
  // constant ptxas copies it from a uniform register before each of its 16 uses a stage.
  [[maybe_unused]] const std::uint32_t tbl = PK ? 0u : table_s;
  // Per-thread offsets within a slot: its fragment words (K-permuted: its ldmatrix row, row 8 (lane / 8
  // % 2) + lane % 8 of its warp's 16, step lane / 16), its act scale pairs (tokens 2q, 2q + 1 of column
  // group j, act block b at pad row (b x NT + 8j) / 4 + q / 2).
  std::uint32_t frag_at =
      PK ? L::kBTile + (16 * (threadIdx.x / 32) + 8 * (lane / 8 % 2) + lane % 8) * kRegaRow + 16 * (lane / 16)
         : L::kBTile + t.r_lo * kRegaRow + 4 * (q / 2);
  std::uint32_t xs_at = L::xs_at(2 * q);
  const std::uint32_t ws_at = L::kWs + t.r_lo * t.wstride, ws_hi = 8 * t.wstride;  // row r_lo's scales, + 8 rows
  const std::uint32_t desc_lo = static_cast<std::uint32_t>(wg::smem_desc(smem_addr));
  bool special = false;
  float acc[R];
  [[maybe_unused]] float lo[R];  // WALK: the first K range's sum
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
      rega_scale<NT, KB, PK ? 2 : 1>(acc, part, sw_lo, sw_hi, sx);
    } else {
      rega_scale<NT, KB, 0>(acc, part, sw_lo, sw_hi, sx);
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
    if constexpr (decltype(first)::value) special = special_scale_codes<PK>(smem + L::kWs, t.wstride, ktiles);
    if (kt + S - 2 < ktiles) copies.issue(smem_addr + prev2, kt + S - 2);
    cp_async_commit_group();
    // (K-permuted: the two offsets kept in registers; else ptxas recomputes them from threadIdx each
    // stage, 13 instructions)
    if constexpr (PK) asm volatile("" : "+r"(frag_at), "+r"(xs_at));
    if constexpr (!decltype(first)::value) scale(kt - 1);
    if constexpr (PK) {
      rega_fragments_permuted(a, smem_addr + cur + frag_at);
    } else {
      rega_fragments(a, smem + cur + frag_at, sel, tbl);
    }
    wg::wgmma_fence();
    const std::uint32_t d = desc_lo + (cur >> 4);
#pragma unroll
    for (int s = 0; s < 4; ++s) wg::wgmma_e4m3_rs_fresh(part[s], a[s], b_desc(d + 2 * s));  // + 32 B a K step
    wg::wgmma_commit();
    prev2 = prev;
    prev = cur;
    cur = cur + L::kSlot == S * L::kSlot ? 0 : cur + L::kSlot;
  };
  stage(0, std::true_type{});
  // WALK: stage(kt) scales stage kt - 1, so the second K range (from ktiles / 2) restarts the sum
  // between two loops, before stage(ktiles / 2 + 1) (no per-stage test: the loop bodies stay the
  // one-range kernel's).
  const int mid = WALK ? ktiles / 2 + 1 : ktiles;
  for (int kt = 1; kt < mid; ++kt) stage(kt, std::false_type{});
  if constexpr (WALK) {
    start_second_range(lo, acc);
    for (int kt = mid; kt < ktiles; ++kt) stage(kt, std::false_type{});
  }
  scale(ktiles - 1);
  if constexpr (WALK) join_ranges(lo, acc);
  finish_cta<NT>(args, acc, t);
#else
  __trap();
#endif
}

// Items of <= 16 rows: the register-A form, act block 128 or 32 (V4.1); items of 32 rows: the
// shared-memory form. 5 stages: 5 CTAs per SM for 8-row items, 4 for 16 (their shared memory, 40 / 45
// KB at K 4096, allows no more). A small grid (V4-Flash at one token: 384 live CTAs of 448 launched,
// 32 or 16 stages each, one partial wave) is bound by each CTA's bytes in flight, not by the SM's
// issue slots: 8-row items there keep 10 stages (8 ahead, 32 KB) at 3 CTAs an SM. The launch's grid
// over-counts the live CTAs (max items has slack for items split at group boundaries), hence the
// bound of 4 launched CTAs an SM (7 stages at 4 CTAs an SM measured slower than either). With K in
// two halves (k_ranges 2) such a grid splits them over CTAs instead (kSplitCtasPerSm: 5 stages, 36 KB,
// 80 registers).
constexpr int kDeepStages = 10;
constexpr int kDeepCtasPerSm = 3;
constexpr int kDeepMaxLaunchedPerSm = 4;
constexpr int kSplitCtasPerSm = 6;

// Whether a launch of these items takes the deep ring (10 stages, one wave of <= 3 CTAs an SM) when its
// K is not split over CTAs.
bool deep_ring(int group_rows, std::int64_t n, int grid_y, int grid_z, const MoeFp4WgmmaConfig& c) {
  if (group_rows > kSkinnyRowsSmall) return false;
  const std::int64_t ctas = n / kRows * grid_y * grid_z;
  return c.stages == kDeepStages ||
         (c.stages == 0 && ctas <= static_cast<std::int64_t>(kDeepMaxLaunchedPerSm) * c.sm_count);
}

template <int NT, int S, int MINB, bool PK, bool EARLY, bool WALK>
void launch_rega_form(const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  if (args.act_block == 32) {
    launch_kernel(moe_fp4_wgmma_rega_kernel<NT, S, MINB, 4, PK, EARLY, WALK>, RegaLayout<NT, S>::bytes(cta_k(args)),
                  args, grid_y, grid_z, stream);
  } else {
    launch_kernel(moe_fp4_wgmma_rega_kernel<NT, S, MINB, 1, PK, EARLY, WALK>, RegaLayout<NT, S>::bytes(cta_k(args)),
                  args, grid_y, grid_z, stream);
  }
}

template <int NT, int S, int MINB, bool PK, bool WALK>
void launch_rega(const SkinnyGemmArgs& args, int grid_y, int grid_z, bool early, cudaStream_t stream) {
  if (early) {
    launch_rega_form<NT, S, MINB, PK, true, WALK>(args, grid_y, grid_z, stream);
  } else {
    launch_rega_form<NT, S, MINB, PK, false, WALK>(args, grid_y, grid_z, stream);
  }
}

// Items of 8: K split over CTAs (5 stages, half the K and scale table per CTA: 36 KB, 6 CTAs an SM), the
// deep ring for a small unsplit grid, else 5 stages at 5 CTAs an SM; each walking its K ranges where
// args.k_ranges > args.k_splits.
template <int NT, bool PK>
void launch_config(const SkinnyGemmArgs& args, int grid_y, int grid_z, const MoeFp4WgmmaConfig& c,
                   cudaStream_t stream) {
  [[maybe_unused]] const bool walk = args.k_ranges > args.k_splits;
  if constexpr (NT == 8) {
    if (args.k_splits > 1) {
      launch_rega<NT, 5, kSplitCtasPerSm, PK, false>(args, grid_y, grid_z, c.early, stream);
    } else if (!walk && deep_ring(NT, args.n, grid_y, grid_z, c)) {
      launch_rega<NT, kDeepStages, kDeepCtasPerSm, PK, false>(args, grid_y, grid_z, c.early, stream);
    } else if (walk) {
      launch_rega<NT, 5, 5, PK, true>(args, grid_y, grid_z, c.early, stream);
    } else {
      launch_rega<NT, 5, 5, PK, false>(args, grid_y, grid_z, c.early, stream);
    }
  } else if constexpr (NT == 16) {
    if (walk) {
      launch_rega<NT, 5, 4, PK, true>(args, grid_y, grid_z, c.early, stream);
    } else {
      launch_rega<NT, 5, 4, PK, false>(args, grid_y, grid_z, c.early, stream);
    }
  } else {
    launch_smem_form(args, grid_y, grid_z, PK, stream);
  }
}

template <int NT>
void launch_rows(const SkinnyGemmArgs& args, int grid_y, int grid_z, const MoeFp4WgmmaConfig& c, cudaStream_t stream) {
  if (c.k_permuted) {
    launch_config<NT, true>(args, grid_y, grid_z, c, stream);
  } else {
    launch_config<NT, false>(args, grid_y, grid_z, c, stream);
  }
}

}  // namespace

bool moe_fp4_wgmma_fits(std::int64_t n, std::int64_t k, const DevWeight& w) {
  return n % kRows == 0 && k % kBK == 0 && k <= kMoeFp4WgmmaMaxK && !w.scale_f32 && w.block == 32 &&
         w.scale_ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(w.scale) % 4 == 0 &&
         reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0;
}

int moe_fp4_wgmma_cta_splits(int group_rows, std::int64_t n, int k_ranges, int grid_y, int grid_z,
                             const MoeFp4WgmmaConfig& c) {
  return k_ranges > 1 && c.split_ctas && c.stages == 0 && deep_ring(group_rows, n, grid_y, grid_z, c) ? k_ranges : 1;
}

void launch_moe_fp4_wgmma(int group_rows, const SkinnyGemmArgs& args, int grid_y, int grid_z,
                          const MoeFp4WgmmaConfig& config, cudaStream_t stream) {
  if (group_rows <= 8) {
    launch_rows<8>(args, grid_y, grid_z, config, stream);
  } else if (group_rows <= 16) {
    launch_rows<16>(args, grid_y, grid_z, config, stream);
  } else {
    launch_rows<32>(args, grid_y, grid_z, config, stream);
  }
}

}  // namespace deepinfer::ops::cuda
