// The linear-layer kernels: a bf16 tensor-core GEMM (mma.sync m16n8k16, f32 accumulate) that
// dequantises fp8-block / fp4 weight tiles
// in shared memory, a SIMT f32 fallback for any shape and format, the split-K reduction and a
// whole-weight dequantiser for the cuBLASLt path. Every output element is accumulated over K in
// the same order whatever M or the tile configuration, so only the split count (chosen by the
// host) can change a row's rounding.
#include <cuda_fp8.h>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kBK = 64;    // K elements per tile
constexpr int kALd = 72;   // bf16 elements per smem row (64 + 8 padding: conflict-free ldmatrix)

// ---- weight element decode (SIMT path and whole-weight dequant) ------------------------------------
__device__ __forceinline__ float weight_scale(const DevWeight& w, std::int64_t sidx) {
  return w.scale_f32 ? static_cast<const float*>(w.scale)[sidx]
                     : ue8m0_to_f32(static_cast<const std::uint8_t*>(w.scale)[sidx]);
}

__device__ __forceinline__ float decode_weight(const DevWeight& w, int format, std::int64_t k_dim, std::int64_t n,
                                               std::int64_t k) {
  switch (format) {
    case static_cast<int>(DevWeightFormat::kF32):
      return static_cast<const float*>(w.data)[n * k_dim + k];
    case static_cast<int>(DevWeightFormat::kBF16):
      return bf16_bits_to_f32(static_cast<const std::uint16_t*>(w.data)[n * k_dim + k]);
    case static_cast<int>(DevWeightFormat::kFp8Block):
      return e4m3_to_f32(static_cast<const std::uint8_t*>(w.data)[n * k_dim + k]) *
             weight_scale(w, (n / w.block) * w.scale_ld + k / w.block);
    default: {
      const std::uint8_t byte = static_cast<const std::uint8_t*>(w.data)[(n * k_dim + k) / 2];
      return e2m1_to_f32((k & 1) ? (byte >> 4) : (byte & 0xf)) * weight_scale(w, n * w.scale_ld + k / w.block);
    }
  }
}

// Whole-weight dequantisation to bf16 for the cuBLASLt path: one row per grid row, 8 elements
// (one scale) per thread, 16-byte stores. Needs K % 8 == 0 and block % 8 == 0.
__global__ void dequant_weight_kernel(DevWeight w, int format, std::int64_t n, std::int64_t k, std::uint16_t* out) {
  enter_dependent_kernel();
  const std::int64_t k0 = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (k0 >= k) return;
  for (std::int64_t row = blockIdx.y; row < n; row += gridDim.y) {
    float v[8];
    if (format == static_cast<int>(DevWeightFormat::kFp8Block)) {
      const float s = weight_scale(w, (row / w.block) * w.scale_ld + k0 / w.block);
      const uint2 bytes = *reinterpret_cast<const uint2*>(static_cast<const std::uint8_t*>(w.data) + row * k + k0);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = e4m3_to_f32(static_cast<std::uint8_t>(((e < 4 ? bytes.x : bytes.y) >> (8 * (e % 4))) & 0xffu)) * s;
    } else {
      const float s = weight_scale(w, row * w.scale_ld + k0 / w.block);
      const std::uint32_t word = *reinterpret_cast<const std::uint32_t*>(static_cast<const std::uint8_t*>(w.data) + (row * k + k0) / 2);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = e2m1_to_f32((word >> (4 * e)) & 0xfu) * s;
    }
    uint4 packed;
    packed.x = static_cast<std::uint32_t>(f32_to_bf16_bits(v[0])) | (static_cast<std::uint32_t>(f32_to_bf16_bits(v[1])) << 16);
    packed.y = static_cast<std::uint32_t>(f32_to_bf16_bits(v[2])) | (static_cast<std::uint32_t>(f32_to_bf16_bits(v[3])) << 16);
    packed.z = static_cast<std::uint32_t>(f32_to_bf16_bits(v[4])) | (static_cast<std::uint32_t>(f32_to_bf16_bits(v[5])) << 16);
    packed.w = static_cast<std::uint32_t>(f32_to_bf16_bits(v[6])) | (static_cast<std::uint32_t>(f32_to_bf16_bits(v[7])) << 16);
    *reinterpret_cast<uint4*>(out + row * k + k0) = packed;
  }
}

// ---- SIMT GEMM (any K, any format, f32 activations) ---------------------------------------------
// 64x64 output tile, 256 threads of 4x4 outputs, K in chunks of 16 with a fixed per-element order.
__global__ void __launch_bounds__(256) simt_gemm_kernel(SimtGemmArgs args) {
  enter_dependent_kernel();
  __shared__ float as[16][65];
  __shared__ float ws[16][65];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * 64;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * 64;
  float acc[4][4] = {};
  for (std::int64_t k0 = 0; k0 < args.k; k0 += 16) {
    for (int idx = threadIdx.x; idx < 64 * 16; idx += 256) {
      const int r = idx / 16, kk = idx % 16;
      const std::int64_t kg = k0 + kk;
      const std::int64_t m = row0 + r;
      as[kk][r] = (m < args.m && kg < args.k) ? args.a[m * args.lda + kg] : 0.0f;
      const std::int64_t n = n0 + r;
      ws[kk][r] = (n < args.n && kg < args.k) ? decode_weight(args.w, args.format, args.k, n, kg) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      float av[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = ws[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], wv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t m = row0 + ty + 16 * i;
    if (m >= args.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::int64_t n = n0 + tx + 16 * j;
      if (n < args.n) store_elem(args.out, m, n, acc[i][j]);
    }
  }
}

// ---- tensor-core GEMM --------------------------------------------------------------------------------
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<std::uint32_t>(f32_to_bf16_bits(lo)) | (static_cast<std::uint32_t>(f32_to_bf16_bits(hi)) << 16);
}

// Raw bytes of one weight row's K tile, and the padded shared-memory stride.
template <int F>
struct RawTile {
  static constexpr int kBytes = F == 1 ? 128 : (F == 2 ? 64 : 32);
  static constexpr int kLd = kBytes + 16;
  static constexpr int kChunks = kBytes / 16;
  static constexpr int kChunkElems = F == 1 ? 8 : (F == 2 ? 16 : 32);
};

template <int F, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
struct MmaConfig {
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int kWtm = BM / WARPS_M;
  static constexpr int kWtn = BN / WARPS_N;
  static constexpr int kMFrag = kWtm / 16;
  static constexpr int kNFrag = kWtn / 8;
  static constexpr int kABytes = STAGES * BM * kALd * 2;
  static constexpr int kRawBytes = STAGES * BN * RawTile<F>::kLd;
  static constexpr int kDeqBytes = F == 1 ? 0 : BN * kALd * 2;
  // The block's weight scales, preloaded once (ue8m0 bytes or f32) when they fit.
  static constexpr int kScaleBytes = F == 1 ? 0 : 16384;
  static constexpr int kSmem = kABytes + kRawBytes + kDeqBytes + kScaleBytes + BM * 4;
  static_assert(kNFrag % 2 == 0 && kMFrag >= 1, "warp tile");
};

// F: 1 = bf16, 2 = fp8 block, 3 = fp4. GROUPED: blockIdx.y indexes a work item (expert, rows) and
// blockIdx.z the weight set; otherwise blockIdx.y is the M tile and blockIdx.z the K split.
template <int F, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, bool GROUPED>
__global__ void __launch_bounds__(WARPS_M* WARPS_N * 32) mma_gemm_kernel(MmaGemmArgs args) {
  enter_dependent_kernel();
  using Cfg = MmaConfig<F, BM, BN, WARPS_M, WARPS_N, STAGES>;
  using Raw = RawTile<F>;
  extern __shared__ __align__(128) std::uint8_t smem[];
  auto* a_s = reinterpret_cast<std::uint16_t*>(smem);
  std::uint8_t* raw_s = smem + Cfg::kABytes;
  auto* deq_s = reinterpret_cast<std::uint16_t*>(smem + Cfg::kABytes + Cfg::kRawBytes);
  std::uint8_t* scale_s = smem + Cfg::kABytes + Cfg::kRawBytes + Cfg::kDeqBytes;
  auto* rows_s = reinterpret_cast<std::int32_t*>(scale_s + Cfg::kScaleBytes);

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;

  DevWeight w;
  void* out;
  std::int64_t row0;
  int mrows;
  int kt_begin = 0, kt_end = args.ktiles;
  int split = 0;
  if constexpr (GROUPED) {
    if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
    const int4 item = args.items[blockIdx.y];
    w = args.tables[blockIdx.z][item.x];
    out = args.out[blockIdx.z];
    row0 = item.y;
    mrows = item.z;
  } else {
    w = args.w;
    out = args.out[0];
    row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
    mrows = static_cast<int>(min(static_cast<std::int64_t>(BM), args.m - row0));
    split = blockIdx.z;
    kt_begin = split * args.ktiles_per_split;
    kt_end = min(args.ktiles, kt_begin + args.ktiles_per_split);
  }
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * BN;
  for (int r = tid; r < BM; r += Cfg::kThreads)
    rows_s[r] = r < mrows ? static_cast<std::int32_t>(args.a_rows ? args.a_rows[row0 + r] : row0 + r) : -1;
  // Scale preload: removes a dependent global load from every K tile's dequantisation.
  std::int64_t s_rlo = 0, s_clo = 0, s_nc = 0;
  bool s_smem = false;
  if constexpr (F != 1) {
    if (kt_end > kt_begin && n0 < args.n) {
      const std::int64_t nlast = min(n0 + BN, args.n) - 1;
      const std::int64_t klast = min(static_cast<std::int64_t>(kt_end) * kBK, args.k) - 1;
      s_rlo = F == 2 ? n0 / w.block : n0;
      const std::int64_t rhi = F == 2 ? nlast / w.block : nlast;
      s_clo = static_cast<std::int64_t>(kt_begin) * kBK / w.block;
      s_nc = klast / w.block - s_clo + 1;
      const std::int64_t count = (rhi - s_rlo + 1) * s_nc;
      s_smem = count * (w.scale_f32 ? 4 : 1) <= Cfg::kScaleBytes;
      if (s_smem) {
        for (std::int64_t i = tid; i < count; i += Cfg::kThreads) {
          const std::int64_t src = (s_rlo + i / s_nc) * w.scale_ld + s_clo + i % s_nc;
          if (w.scale_f32) {
            reinterpret_cast<float*>(scale_s)[i] = static_cast<const float*>(w.scale)[src];
          } else {
            scale_s[i] = static_cast<const std::uint8_t*>(w.scale)[src];
          }
        }
      }
    }
  }
  __syncthreads();

  const std::int64_t w_row_bytes = F == 1 ? args.k * 2 : (F == 2 ? args.k : args.k / 2);
  const auto* w_bytes = static_cast<const std::uint8_t*>(w.data);

  auto load_tile = [&](int stage, int kt) {
    std::uint16_t* a_dst = a_s + stage * BM * kALd;
    for (int idx = tid; idx < BM * 8; idx += Cfg::kThreads) {
      const int r = idx / 8, c = idx % 8;
      const std::int32_t src = rows_s[r];
      const std::uint16_t* g = src >= 0 ? args.a + src * args.lda + kt * kBK + c * 8 : args.a;
      cp_async16(a_dst + r * kALd + c * 8, g, src >= 0);
    }
    std::uint8_t* w_dst = raw_s + stage * BN * Raw::kLd;
    for (int idx = tid; idx < BN * Raw::kChunks; idx += Cfg::kThreads) {
      const int r = idx / Raw::kChunks, c = idx % Raw::kChunks;
      const std::int64_t n = n0 + r;
      const bool valid = n < args.n && static_cast<std::int64_t>(kt) * kBK + c * Raw::kChunkElems < args.k;
      const std::uint8_t* g = valid ? w_bytes + n * w_row_bytes + static_cast<std::int64_t>(kt) * Raw::kBytes + c * 16
                                    : w_bytes;
      cp_async16(w_dst + r * Raw::kLd + c * 16, g, valid);
    }
  };

  // fp8 / fp4 tile -> bf16 (value × block scale is exact in bf16), 8 elements per step.
  auto dequant_tile = [&](int stage, int kt) {
    const std::uint8_t* src = raw_s + stage * BN * Raw::kLd;
    for (int idx = tid; idx < BN * 8; idx += Cfg::kThreads) {
      const int r = idx / 8, c8 = idx % 8;
      const std::int64_t n = n0 + r;
      const std::int64_t kg = static_cast<std::int64_t>(kt) * kBK + c8 * 8;
      float s = 0.0f;
      if (n < args.n && kg < args.k) {
        if (s_smem) {
          const std::int64_t i = ((F == 2 ? n / w.block : n) - s_rlo) * s_nc + kg / w.block - s_clo;
          s = w.scale_f32 ? reinterpret_cast<const float*>(scale_s)[i] : ue8m0_to_f32(scale_s[i]);
        } else {
          const std::int64_t sidx = F == 2 ? (n / w.block) * w.scale_ld + kg / w.block : n * w.scale_ld + kg / w.block;
          s = w.scale_f32 ? static_cast<const float*>(w.scale)[sidx]
                          : ue8m0_to_f32(static_cast<const std::uint8_t*>(w.scale)[sidx]);
        }
      }
      float v[8];
      if constexpr (F == 2) {
        const uint2 bytes = *reinterpret_cast<const uint2*>(src + r * Raw::kLd + c8 * 8);
        const std::uint32_t words[2] = {bytes.x, bytes.y};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int p = 0; p < 2; ++p) {
            const auto pair = static_cast<__nv_fp8x2_storage_t>((words[h] >> (16 * p)) & 0xffffu);
            const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&hr));
            v[h * 4 + p * 2] = f.x;
            v[h * 4 + p * 2 + 1] = f.y;
          }
      } else {
        const std::uint32_t word = *reinterpret_cast<const std::uint32_t*>(src + r * Raw::kLd + c8 * 4);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = e2m1_to_f32((word >> (4 * e)) & 0xfu);
      }
      uint4 packed;
      packed.x = pack_bf16x2(v[0] * s, v[1] * s);
      packed.y = pack_bf16x2(v[2] * s, v[3] * s);
      packed.z = pack_bf16x2(v[4] * s, v[5] * s);
      packed.w = pack_bf16x2(v[6] * s, v[7] * s);
      *reinterpret_cast<uint4*>(deq_s + r * kALd + c8 * 8) = packed;
    }
  };

  float acc[Cfg::kMFrag][Cfg::kNFrag][4] = {};
  auto compute_tile = [&](int stage) {
    const std::uint16_t* a_tile = a_s + stage * BM * kALd;
    const std::uint16_t* b_tile =
        F == 1 ? reinterpret_cast<const std::uint16_t*>(raw_s + stage * BN * Raw::kLd) : deq_s;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      std::uint32_t af[Cfg::kMFrag][4];
#pragma unroll
      for (int mf = 0; mf < Cfg::kMFrag; ++mf)
        ldmatrix_x4(af[mf], a_tile + (wm * Cfg::kWtm + mf * 16 + lane % 16) * kALd + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int nf2 = 0; nf2 < Cfg::kNFrag / 2; ++nf2) {
        std::uint32_t bf[4];
        ldmatrix_x4(bf, b_tile + (wn * Cfg::kWtn + nf2 * 16 + (lane / 16) * 8 + lane % 8) * kALd + kk * 16 +
                            ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mf = 0; mf < Cfg::kMFrag; ++mf) {
          mma_bf16(acc[mf][2 * nf2], af[mf], bf[0], bf[1]);
          mma_bf16(acc[mf][2 * nf2 + 1], af[mf], bf[2], bf[3]);
        }
      }
    }
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (kt_begin + s < kt_end) load_tile(s, kt_begin + s);
    cp_async_commit();
  }
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int it = kt - kt_begin;
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < kt_end) load_tile((it + STAGES - 1) % STAGES, next);
    cp_async_commit();
    const int stage = it % STAGES;
    if constexpr (F != 1) {
      dequant_tile(stage, kt);
      __syncthreads();
    }
    compute_tile(stage);
  }
  cp_async_wait<0>();

  // Epilogue: f32 partials for split-K, else the output dtype.
#pragma unroll
  for (int mf = 0; mf < Cfg::kMFrag; ++mf)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int lr = wm * Cfg::kWtm + mf * 16 + lane / 4 + half * 8;
      if (lr >= mrows) continue;
      const std::int64_t row = row0 + lr;
#pragma unroll
      for (int nf = 0; nf < Cfg::kNFrag; ++nf) {
        const std::int64_t col = n0 + wn * Cfg::kWtn + nf * 8 + (lane % 4) * 2;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col + e >= args.n) continue;
          const float v = acc[mf][nf][half * 2 + e];
          if (!GROUPED && args.partial != nullptr) {
            args.partial[(static_cast<std::int64_t>(split) * args.m + row) * args.n + col + e] = v;
          } else if (args.out_bf16) {
            static_cast<std::uint16_t*>(out)[row * args.ldo + col + e] = f32_to_bf16_bits(v);
          } else {
            static_cast<float*>(out)[row * args.ldo + col + e] = v;
          }
        }
      }
    }
}

// ---- decode GEMV (M <= 4 rows) -----------------------------------------------------------------------
// Memory-bound path for decode: each warp owns 2 weight rows (or a 1/split share of their K when N
// is small, so the GPU still has ~4K warps streaming), loads 16-byte chunks with no shared-memory
// staging or block barrier in the loop, dequantises in registers (fp8 by the hardware converter)
// and multiplies with up to 4 activation rows. Per output: lane sums, warp tree, splits in order.
constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kGemvMaxRows = 4;
constexpr int kGemvRowsPerWarp = 2;

template <int F>
struct GemvChunk {
  static constexpr int kElems = F == 1 ? 8 : (F == 2 ? 16 : 32);  // 16 bytes of weight
};

template <int F>
__device__ __forceinline__ void gemv_decode(const uint4& raw, float s, float (&wv)[GemvChunk<F>::kElems]) {
  const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (F == 1) {
#pragma unroll
    for (int e = 0; e < 8; ++e) wv[e] = __uint_as_float((e % 2) ? (words[e / 2] & 0xffff0000u) : (words[e / 2] << 16));
  } else if constexpr (F == 2) {
#pragma unroll
    for (int h = 0; h < 8; ++h) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>((words[h / 2] >> (16 * (h % 2))) & 0xffffu);
      const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&hr));
      wv[2 * h] = f.x * s;
      wv[2 * h + 1] = f.y * s;
    }
  } else {
#pragma unroll
    for (int e = 0; e < 32; ++e) wv[e] = e2m1_to_f32((words[e / 8] >> (4 * (e % 8))) & 0xfu) * s;
  }
}

template <int F, bool GROUPED>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(MmaGemmArgs args) {
  enter_dependent_kernel();
  using C = GemvChunk<F>;
  constexpr int RPW = kGemvRowsPerWarp;
  __shared__ float red[kGemvWarps][RPW * kGemvMaxRows];
  DevWeight w;
  void* out;
  std::int64_t row0 = 0;
  int mrows;
  if constexpr (GROUPED) {
    if (static_cast<int>(blockIdx.y) >= *args.item_count) return;
    const int4 item = args.items[blockIdx.y];
    w = args.tables[blockIdx.z][item.x];
    out = args.out[blockIdx.z];
    row0 = item.y;
    mrows = item.z;
  } else {
    w = args.w;
    out = args.out[0];
    row0 = static_cast<std::int64_t>(blockIdx.y) * kGemvMaxRows;
    mrows = static_cast<int>(min(static_cast<std::int64_t>(kGemvMaxRows), args.m - row0));
  }
  const int split = args.gemv_split;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / split, sub = warp % split;
  const std::int64_t n0 = (static_cast<std::int64_t>(blockIdx.x) * (kGemvWarps / split) + group) * RPW;
  const std::int64_t row_bytes = F == 1 ? args.k * 2 : (F == 2 ? args.k : args.k / 2);
  const auto* wb = static_cast<const std::uint8_t*>(w.data);
  const std::uint16_t* arow[kGemvMaxRows];
#pragma unroll
  for (int mi = 0; mi < kGemvMaxRows; ++mi) {
    const std::int64_t r = mi < mrows ? (args.a_rows ? args.a_rows[row0 + mi] : row0 + mi) : 0;
    arow[mi] = args.a + r * args.lda;
  }
  float acc[RPW][kGemvMaxRows] = {};
  const std::int64_t chunks = args.k / C::kElems;
  // Two chunks per step: their loads are issued together, before either is used.
  const std::int64_t stride = static_cast<std::int64_t>(split) * 32;
  auto load = [&](std::int64_t c, uint4 (&raw)[RPW], float (&scale)[RPW]) {
    const std::int64_t k0 = c * C::kElems;
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const std::int64_t n = n0 + r;
      raw[r] = make_uint4(0, 0, 0, 0);
      scale[r] = 0.0f;
      if (n < args.n && c < chunks) {
        raw[r] = __ldg(reinterpret_cast<const uint4*>(wb + n * row_bytes + c * 16));
        if constexpr (F != 1) {
          const std::int64_t sidx = F == 2 ? (n / w.block) * w.scale_ld + k0 / w.block : n * w.scale_ld + k0 / w.block;
          scale[r] = w.scale_f32 ? static_cast<const float*>(w.scale)[sidx]
                                 : ue8m0_to_f32(static_cast<const std::uint8_t*>(w.scale)[sidx]);
        }
      }
    }
  };
  auto accumulate = [&](std::int64_t c, const uint4 (&raw)[RPW], const float (&scale)[RPW]) {
    const std::int64_t k0 = c * C::kElems;
#pragma unroll
    for (int mi = 0; mi < kGemvMaxRows; ++mi) {
      if (mi >= mrows) break;
      std::uint32_t xw[C::kElems / 2];  // bf16 pairs, widened when used
#pragma unroll
      for (int h = 0; h < C::kElems / 8; ++h) {
        const uint4 v = *reinterpret_cast<const uint4*>(arow[mi] + k0 + h * 8);
        xw[h * 4] = v.x;
        xw[h * 4 + 1] = v.y;
        xw[h * 4 + 2] = v.z;
        xw[h * 4 + 3] = v.w;
      }
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        float wv[C::kElems];
        gemv_decode<F>(raw[r], scale[r], wv);
        float sum = acc[r][mi];
#pragma unroll
        for (int e = 0; e < C::kElems; ++e)
          sum = fmaf(wv[e], __uint_as_float((e % 2) ? (xw[e / 2] & 0xffff0000u) : (xw[e / 2] << 16)), sum);
        acc[r][mi] = sum;
      }
    }
  };
  for (std::int64_t c = static_cast<std::int64_t>(sub) * 32 + lane; c < chunks; c += 2 * stride) {
    uint4 raw0[RPW], raw1[RPW];
    float scale0[RPW], scale1[RPW];
    load(c, raw0, scale0);
    load(c + stride, raw1, scale1);
    accumulate(c, raw0, scale0);
    if (c + stride < chunks) accumulate(c + stride, raw1, scale1);
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int mi = 0; mi < kGemvMaxRows; ++mi) {
      const float v = warp_sum(acc[r][mi]);
      if (lane == 0) red[warp][r * kGemvMaxRows + mi] = v;
    }
  __syncthreads();
  if (sub == 0 && lane < RPW * kGemvMaxRows) {
    const int r = lane / kGemvMaxRows, mi = lane % kGemvMaxRows;
    const std::int64_t n = n0 + r;
    if (mi < mrows && n < args.n) {
      float total = 0.0f;
      for (int s2 = 0; s2 < split; ++s2) total += red[warp + s2][lane];
      const std::int64_t row = row0 + mi;
      if (args.out_bf16) {
        static_cast<std::uint16_t*>(out)[row * args.ldo + n] = f32_to_bf16_bits(total);
      } else {
        static_cast<float*>(out)[row * args.ldo + n] = total;
      }
    }
  }
}

__global__ void splitk_reduce_kernel(const float* partial, int splits, std::int64_t m, std::int64_t n, DevRows out) {
  enter_dependent_kernel();
  const std::int64_t total = m * n;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += partial[s * total + i];
    store_elem(out, i / n, i % n, v);
  }
}

int blocks_for(std::int64_t n) {
  const std::int64_t b = (n + 255) / 256;
  return static_cast<int>(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

template <int F, int BM, int BN, int WM, int WN, int STAGES, bool GROUPED>
void launch_mma_config(const MmaGemmArgs& args, dim3 grid, cudaStream_t stream) {
  using Cfg = MmaConfig<F, BM, BN, WM, WN, STAGES>;
  auto kernel = mma_gemm_kernel<F, BM, BN, WM, WN, STAGES, GROUPED>;
  // Per call, not cached: the attribute belongs to the current device, and setting it is cheap.
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmem);
  launch_chained(kernel, grid, Cfg::kThreads, Cfg::kSmem, stream, args);
}

template <int F, bool GROUPED>
void launch_mma_format(MmaTile tile, const MmaGemmArgs& args, dim3 grid, cudaStream_t stream) {
  switch (tile) {
    case MmaTile::kSmall:
      launch_mma_config<F, 16, 64, 1, 4, 4, GROUPED>(args, grid, stream);
      break;
    case MmaTile::kMedium:
      launch_mma_config<F, 64, 128, 2, 2, 3, GROUPED>(args, grid, stream);
      break;
    case MmaTile::kLarge:
      launch_mma_config<F, 128, 128, 2, 4, 3, GROUPED>(args, grid, stream);
      break;
  }
}

}  // namespace

MmaTileShape mma_tile_shape(MmaTile tile) {
  switch (tile) {
    case MmaTile::kSmall:
      return {16, 64};
    case MmaTile::kMedium:
      return {64, 128};
    case MmaTile::kLarge:
      return {128, 128};
  }
  return {16, 64};
}

void launch_mma_gemm(DevWeightFormat format, MmaTile tile, bool grouped, const MmaGemmArgs& args, int grid_x,
                     int grid_y, int grid_z, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y), static_cast<unsigned>(grid_z));
  switch (format) {
    case DevWeightFormat::kBF16:
      grouped ? launch_mma_format<1, true>(tile, args, grid, stream) : launch_mma_format<1, false>(tile, args, grid, stream);
      break;
    case DevWeightFormat::kFp8Block:
      grouped ? launch_mma_format<2, true>(tile, args, grid, stream) : launch_mma_format<2, false>(tile, args, grid, stream);
      break;
    case DevWeightFormat::kFp4:
      grouped ? launch_mma_format<3, true>(tile, args, grid, stream) : launch_mma_format<3, false>(tile, args, grid, stream);
      break;
    case DevWeightFormat::kF32:
      break;  // the host routes f32 weights to the SIMT kernel
  }
}

void launch_gemv(DevWeightFormat format, bool grouped, const MmaGemmArgs& args, int grid_y, int grid_z,
                 cudaStream_t stream) {
  // Warps per row pair: enough that ~4K warps stream the weight even when N is small.
  // Grouped launches already have a matrix per item and set, so each warp keeps a whole row pair.
  MmaGemmArgs a = args;
  const std::int64_t pairs = (args.n + kGemvRowsPerWarp - 1) / kGemvRowsPerWarp;
  a.gemv_split = 1;
  while (!grouped && a.gemv_split < kGemvWarps && pairs * a.gemv_split < 4096) a.gemv_split *= 2;
  const std::int64_t per_block = static_cast<std::int64_t>(kGemvWarps / a.gemv_split) * kGemvRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((args.n + per_block - 1) / per_block), static_cast<unsigned>(grid_y),
                  static_cast<unsigned>(grid_z));
  switch (format) {
    case DevWeightFormat::kBF16:
      launch_chained(grouped ? gemv_kernel<1, true> : gemv_kernel<1, false>, grid, kGemvThreads, 0, stream, a);
      break;
    case DevWeightFormat::kFp8Block:
      launch_chained(grouped ? gemv_kernel<2, true> : gemv_kernel<2, false>, grid, kGemvThreads, 0, stream, a);
      break;
    case DevWeightFormat::kFp4:
      launch_chained(grouped ? gemv_kernel<3, true> : gemv_kernel<3, false>, grid, kGemvThreads, 0, stream, a);
      break;
    case DevWeightFormat::kF32:
      break;
  }
}

void launch_simt_gemm(const SimtGemmArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.n + 63) / 64), static_cast<unsigned>((args.m + 63) / 64));
  launch_chained(simt_gemm_kernel, grid, 256, 0, stream, args);
}

void launch_splitk_reduce(const float* partial, int splits, std::int64_t m, std::int64_t n, const DevRows& out,
                          cudaStream_t stream) {
  launch_chained(splitk_reduce_kernel, blocks_for(m * n), 256, 0, stream, partial, splits, m, n, out);
}

void launch_dequant_weight(const DevWeight& w, DevWeightFormat format, std::int64_t n, std::int64_t k,
                           std::uint16_t* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((k / 8 + 255) / 256), static_cast<unsigned>(n < 65535 ? n : 65535));
  launch_chained(dequant_weight_kernel, grid, 256, 0, stream, w, static_cast<int>(format), n, k, out);
}

}  // namespace deepinfer::ops::cuda
