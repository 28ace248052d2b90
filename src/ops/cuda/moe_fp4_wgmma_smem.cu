// The routed experts' decode GEMM on wgmma, shared-memory form (items of 32 rows): each fp4 weight tile
// is widened once into 128-byte-swizzled K-major e4m3 in shared memory, the A operand of every column
// group. moe_fp4_wgmma.cu has the register-A form (items of <= 16 rows), the dispatch and the layout
// facts both forms rest on; moe_fp4_wgmma.cuh the pieces they share.
#include "ops/cuda/moe_fp4_wgmma.cuh"
#include "ops/cuda/skinny_mma.cuh"

namespace deepinfer::ops::cuda::moe_fp4 {
namespace {

using skinny::e2m1x4_to_e4m3x4;

constexpr int kATile = kRows * kBK;        // 8 KB of widened e4m3 (two, alternating)
constexpr int kStages = 5;                 // cp.async ring depth (tuning knob: bytes in flight per CTA)

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
template <int NT, bool PK, int R>
__device__ __forceinline__ void scale_partials(float (&acc)[R], const float (&part)[4][R], const std::uint8_t* ws,
                                               int wstride, int r_lo, int kt, const float* xs) {
  const int lane = threadIdx.x % 32;
  const std::uint32_t sw_lo = *reinterpret_cast<const std::uint32_t*>(ws + r_lo * wstride + kt * 4);
  const std::uint32_t sw_hi = *reinterpret_cast<const std::uint32_t*>(ws + (r_lo + 8) * wstride + kt * 4);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    // Per row and step, not per element: the scale, and for K-permuted (scaled) partials scaled_fma's two
    // exact forms as (pre, sw): codes <= 248 give (1, scale x 2^6), others (2^6, scale) — part x 1 is
    // part, so each element gets scaled_fma's bits in 3 instructions instead of the per-element decode.
    float sw[2], pre[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto code = static_cast<std::uint8_t>((h != 0 ? sw_hi : sw_lo) >> (8 * s));
      const float u = ue8m0_to_f32(code);
      const bool plain = !PK || code <= 248;
      pre[h] = plain ? 1.0f : 64.0f;
      sw[h] = PK && plain ? u * 64.0f : u;
    }
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float sx = xs[j * 8 + (lane % 4) * 2 + (e % 2)];
        if constexpr (PK) {
          acc[4 * j + e] = fmaf(part[s][4 * j + e] * pre[e / 2], sw[e / 2] * sx, acc[4 * j + e]);
        } else {
          acc[4 * j + e] = fmaf(part[s][4 * j + e], sw[e / 2] * sx, acc[4 * j + e]);
        }
      }
  }
}

// wgmma m64nNk32 e4m3 x e4m3 -> f32 (wgmma_sm90.cuh's wgmma_e4m3 with acc_in = 0: scale-d false, D =
// A·B, a fresh partial per 32-K weight-scale block). Accumulator fragment (the PTX ISA's m64nN f32 D
// layout, as moe_prefill_wgmma.cu's verified bf16 one): warp w of the warpgroup holds rows 16w +
// lane/4 and 16w + lane/4 + 8; register 4j + e holds column 8j + 2 (lane % 4) + (e % 2) of row + 8 (e / 2).

// Grid: (n / 64, max items, weight sets). Per output element the K order is fixed by K alone: 32-K
// partials from the tensor core, each scaled by (ue8m0 weight scale x act block scale) in f32 and added
// in ascending K. This shared-memory form takes items of 32 rows (the register-A form below, <= 16).
template <int NT, bool PK, bool WALK>
__global__ void __launch_bounds__(kThreads) moe_fp4_wgmma_kernel(SkinnyGemmArgs args) {
  enter_dependent_kernel();
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
    if constexpr (PK) {  // K step 2h + i: its low nibbles (scaled e4m3) in chunk 4h + 2i, high in + 1
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        uint2 e[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) e[j] = e2m1x8_to_e4m3x8_scaled(words[4 * i + j]);
        *reinterpret_cast<uint4*>(dst + wg::swizzled(r, h * 4 + 2 * i)) = make_uint4(e[0].x, e[1].x, e[2].x, e[3].x);
        *reinterpret_cast<uint4*>(dst + wg::swizzled(r, h * 4 + 2 * i + 1)) = make_uint4(e[0].y, e[1].y, e[2].y, e[3].y);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const std::uint32_t w0 = words[2 * i], w1 = words[2 * i + 1];
        *reinterpret_cast<uint4*>(dst + wg::swizzled(r, h * 4 + i)) =
            make_uint4(e2m1x4_to_e4m3x4(w0 & 0xffffu), e2m1x4_to_e4m3x4(w0 >> 16), e2m1x4_to_e4m3x4(w1 & 0xffffu),
                       e2m1x4_to_e4m3x4(w1 >> 16));
      }
    }
  };

  float acc[R];
  [[maybe_unused]] float lo[R];  // WALK: the first K range's sum
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

  auto stage = [&](int kt) {
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
    scale_partials<NT, PK>(acc, part, smem + L::kWs, t.wstride, t.r_lo, kt,
                       reinterpret_cast<const float*>(smem + L::kXs + (kt % kStages) * NT * 4));
    wg::fence_proxy_async();  // this thread's cp.async and widened rows, for the next wgmma
    __syncthreads();
  };
  // WALK: the second K range restarts the sum between two loops (no per-stage test: the loop bodies
  // stay the one-range kernel's).
  const int mid = WALK ? ktiles / 2 : ktiles;
  for (int kt = 0; kt < mid; ++kt) stage(kt);
  if constexpr (WALK) {
    start_second_range(lo, acc);
    for (int kt = mid; kt < ktiles; ++kt) stage(kt);
    join_ranges(lo, acc);
  }
  finish_cta<NT>(args, acc, t);
#else
  __trap();
#endif
}

}  // namespace

void launch_smem_form(const SkinnyGemmArgs& args, int grid_y, int grid_z, bool k_permuted, cudaStream_t stream) {
  constexpr int NT = kSkinnyRowsLarge;
  const int bytes = Layout<NT>::bytes(cta_k(args));
  const bool walk = args.k_ranges > args.k_splits;
  if (k_permuted) {
    launch_kernel(walk ? moe_fp4_wgmma_kernel<NT, true, true> : moe_fp4_wgmma_kernel<NT, true, false>, bytes, args,
                  grid_y, grid_z, stream);
  } else {
    launch_kernel(walk ? moe_fp4_wgmma_kernel<NT, false, true> : moe_fp4_wgmma_kernel<NT, false, false>, bytes, args,
                  grid_y, grid_z, stream);
  }
}

}  // namespace deepinfer::ops::cuda::moe_fp4
