// The routed experts' decode GEMM (the skinny fp4 work items of backend_moe.cpp) on Hopper's
// warpgroup MMA: on sm_90 mma.sync e4m3 is emulated (F2FP + f16 HMMA per m16n8k32), only wgmma
// multiplies fp8 natively. Each CTA (one warpgroup) owns 64 weight rows of one expert for one item.
// fp4 tiles stream in through a cp.async ring, are widened once into 128-byte-swizzled K-major e4m3
// (the A operand), and the item's act-quant e4m3 rows are B (N = 8 / 16 / 32 tokens).
//
// Written without a device (2026-11-30): what the first run must confirm, in the order to check it
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

// wgmma m64nNk32 e4m3 x e4m3 -> f32 (wgmma_sm90.cuh's wgmma_e4m3 with acc_in = 0: scale-d false, D =
// A·B, a fresh partial per 32-K weight-scale block). Accumulator fragment (the PTX ISA's m64nN f32 D
// layout, as moe_prefill_wgmma.cu's verified bf16 one): warp w of the warpgroup holds rows 16w +
// lane/4 and 16w + lane/4 + 8; register 4j + e holds column 8j + 2 (lane % 4) + (e % 2) of row + 8 (e / 2).

// Grid: (n / 64, max items, weight sets). Per output element the K order is fixed by K alone: 32-K
// partials from the tensor core, each scaled by (ue8m0 weight scale x act block scale) in f32 and
// added in ascending K (fmaf, as skinny_fp4_wide_kernel does per 32-K step), no K split.
template <int NT>
__global__ void __launch_bounds__(kThreads) moe_fp4_wgmma_kernel(SkinnyGemmArgs args) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<NT>;
  constexpr int R = NT / 2;  // accumulator registers per thread
  extern __shared__ __align__(1024) std::uint8_t smem_in[];
  std::uint8_t* smem = smem_in + ((1024 - smem_u32(smem_in) % 1024) % 1024);
  __shared__ std::int32_t rows_s[NT];
  auto cp_async4 = [](std::uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
  };

  if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
  const int4 item = args.items[blockIdx.y];
  const DevWeight w = args.tables[blockIdx.z][item.x];
  const std::int64_t row0 = item.y;
  const int mrows = item.z;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kRows;
  const int tid = threadIdx.x, lane = tid % 32, wq = tid / 32;
  const int ktiles = static_cast<int>(args.k / kBK);
  const int scols = static_cast<int>(args.k / 32);  // ue8m0 scale bytes per weight row
  const int wstride = ws_stride(args.k);

  for (int c = tid; c < NT; c += kThreads)
    rows_s[c] = c < mrows ? static_cast<std::int32_t>(args.x_rows ? args.x_rows[row0 + c] : row0 + c) : -1;
  {  // the tile's weight scales, in the first group: 16-byte copies where rows allow, else 4-byte ones
    const auto* scale = static_cast<const std::uint8_t*>(w.scale);
    const bool wide = scols % 16 == 0 && w.scale_ld % 16 == 0 && reinterpret_cast<std::uintptr_t>(scale) % 16 == 0;
    const int piece = wide ? 16 : 4, pieces = scols / piece;
    for (int idx = tid; idx < kRows * pieces; idx += kThreads) {
      const int r = idx / pieces, c = idx % pieces;
      const std::uint32_t dst = smem_u32(smem + L::kWs + r * wstride + c * piece);
      const std::uint8_t* src = scale + (n0 + r) * w.scale_ld + c * piece;
      if (wide) {
        cp_async16_zfill(dst, src, true);
      } else {
        cp_async4(dst, src);
      }
    }
  }
  __syncthreads();

  const auto* w_bytes = static_cast<const std::uint8_t*>(w.data);
  const std::int64_t w_row_bytes = args.k / 2;
  // Stage `st` <- K tile kt: 64 fp4 row pieces of 64 bytes, NT swizzled e4m3 activation rows (rows
  // past the item's zero-filled), NT act scales.
  auto load_tile = [&](int st, int kt) {
    std::uint8_t* raw = smem + L::kRaw + st * kRawTile;
#pragma unroll
    for (int i = 0; i < kRawTile / 16 / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / 4, c = idx % 4;
      cp_async16_zfill(smem_u32(raw + r * kRawRow + c * 16),
                       w_bytes + (n0 + r) * w_row_bytes + static_cast<std::int64_t>(kt) * kRawRow + c * 16, true);
    }
    std::uint8_t* b = smem + L::kB + st * L::kBTile;
    for (int idx = tid; idx < NT * 8; idx += kThreads) {
      const int r = idx / 8, c = idx % 8;
      const std::int32_t src = rows_s[r];
      const std::uint8_t* g = src >= 0 ? args.x + src * args.ldx + kt * kBK + c * 16 : args.x;
      cp_async16_zfill(smem_u32(b + wg::swizzled(r, c)), g, src >= 0);
    }
    if (tid < NT) {
      const std::int32_t src = rows_s[tid];
      float* xs = reinterpret_cast<float*>(smem + L::kXs + st * NT * 4);
      if (src >= 0) {
        cp_async4(smem_u32(xs + tid), args.xs + static_cast<std::int64_t>(kt) * args.xs_ld + src);
      } else {
        xs[tid] = 0.0f;
      }
    }
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
  // Groups: one per stage (the scale copies ride in the first); after the prologue S - 1 are out.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_tile(s, s);
    cp_async_commit_group();
  }
  cp_async_wait_group<kStages - 2>();
  __syncthreads();
  widen_tile(0, 0);
  wg::fence_proxy_async();
  __syncthreads();

  const int r_lo = wq * 16 + lane / 4;  // this thread's weight rows r_lo, r_lo + 8 of the tile
  const auto* ws = smem + L::kWs;
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
    const float* xs = reinterpret_cast<const float*>(smem + L::kXs + (kt % kStages) * NT * 4);
    // The stage's four ue8m0 scales of rows r_lo and r_lo + 8: one word each (byte s = K step s).
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
    wg::fence_proxy_async();  // this thread's cp.async and widened rows, for the next wgmma
    __syncthreads();
  }
  cp_async_wait_group<0>();

  void* out = args.out[blockIdx.z];
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = j * 8 + (lane % 4) * 2 + (e % 2);  // token of the item
      if (col >= mrows) continue;
      const std::int64_t n = n0 + r_lo + 8 * (e / 2);
      const std::int64_t row = row0 + col;
      if (args.out_bf16) {
        static_cast<std::uint16_t*>(out)[row * args.ldo + n] = f32_to_bf16_bits(acc[4 * j + e]);
      } else {
        static_cast<float*>(out)[row * args.ldo + n] = acc[4 * j + e];
      }
    }
#else
  __trap();
#endif
}

template <int NT>
void launch_config(const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream) {
  const int smem = Layout<NT>::bytes(args.k);
  const dim3 grid(static_cast<unsigned>(args.n / kRows), static_cast<unsigned>(grid_y), static_cast<unsigned>(grid_z));
  cudaFuncSetAttribute(moe_fp4_wgmma_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  moe_fp4_wgmma_kernel<NT><<<grid, kThreads, smem, stream>>>(args);
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
