// Tensor-core sparse MQA attention with sinks for bf16 q and KV rows (mma.sync m16n8k16, f32
// accumulators), laid out like FlashMLA's sparse decode: the heads of one token are the M tile, 64
// gathered KV rows the N tile, loaded once into shared memory and read as K for Q·Kᵀ and as V for P·V.
#include <algorithm>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_sync.cuh"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 64;      // KV rows per tile = the online-softmax block the op specifies
constexpr int kResolveTiles = 16;  // row addresses resolved ahead (index -> source -> page), in tiles
constexpr int kResolveRows = kResolveTiles * kTileRows;

// Shared memory of one CTA (byte offsets). Tiles of bf16 rows are swizzled per 16-byte chunk
// (chunk ^ row % 8) so that ldmatrix's eight row addresses hit distinct banks.
template <int D, int MT>
struct Layout {
  static constexpr int kHeads = 16 * MT;
  static constexpr int kRowWarps = kWarps / MT;                    // warps along the tile in Q·Kᵀ
  static constexpr int q = 0;                                      // bf16 [kHeads][D]
  static constexpr int kv = q + kHeads * D * 2;                    // bf16 [2 stages][64][D]
  static constexpr int p = kv + 2 * kTileRows * D * 2;             // bf16 [hi, lo][kHeads][64]
  static constexpr int ptr = p + 2 * kHeads * kTileRows * 2;       // const u16* [kResolveRows]
  static constexpr int valid = ptr + kResolveRows * 8;             // int [2 stages][64]
  static constexpr int red_max = valid + 2 * kTileRows * 4;        // f32 [kRowWarps][kHeads]
  static constexpr int red_sum = red_max + kRowWarps * kHeads * 4;  // f32 [8 n8 tiles][kHeads]
  static constexpr int stats = red_sum + 8 * kHeads * 4;           // f32 m, l, new m, rescale [4][kHeads]
  static constexpr int bytes = stats + 4 * kHeads * 4;
};

template <int kCols>
__device__ __forceinline__ int swizzled(int row, int col) {  // byte offset of (row, col), col % 8 == 0
  return row * kCols * 2 + ((((col >> 3) ^ (row & 7))) << 4);
}

// Row addresses of index positions [begin, begin + kResolveRows) clipped to end (null for -1 and
// for bad indices or page entries, which are reported through the fault word as the SIMT kernel
// does, then skipped). Each thread loads all its indices, then all its page entries, so a round
// costs two memory latencies, paid once per kResolveTiles tiles.
__device__ void resolve_rows(const AttentionArgs& a, const std::int32_t* idx, int begin, int end,
                             const std::uint16_t** ptr_s) {
  constexpr int kPer = kResolveRows / kThreads;
  const std::int64_t total = a.src_start[a.num_sources];
  std::int32_t index[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int r = begin + static_cast<int>(threadIdx.x) + i * kThreads;
    index[i] = r < end ? idx[r] : -1;
  }
  int src[kPer];
  std::int64_t phys[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    int s = a.num_sources - 1;
    while (s > 0 && a.src_start[s] > index[i]) --s;
    src[i] = s;
    phys[i] = (index[i] >= 0 && index[i] < total) ? physical_row(a.src[s], index[i] - a.src_start[s]) : -1;
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const std::uint16_t* p = nullptr;
    if (index[i] >= total) {
      report_fault(a.err, DeviceFault::kAttnIndex, index[i], total);
    } else if (index[i] >= 0 && phys[i] < 0) {
      report_fault(a.err, DeviceFault::kPageTable, index[i], total);
    } else if (index[i] >= 0) {
      p = static_cast<const std::uint16_t*>(a.src[src[i]].rows.base) + phys[i] * a.src[src[i]].rows.stride;
    }
    ptr_s[threadIdx.x + i * kThreads] = p;
  }
}

// Starts the copy of one tile's 64 rows into a stage (invalid rows become zeros, so 0 · row stays 0)
// and records which rows are real.
template <int D>
__device__ void issue_tile(const std::uint16_t* const* rows, std::uint8_t* stage, int* valid_s, const void* any) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kTileRows * kChunks; i += kThreads) {
    const int row = i / kChunks, chunk = i % kChunks;
    const std::uint16_t* p = rows[row];
    cp_async16_zfill(smem_u32(stage + swizzled<D>(row, chunk * 8)), p != nullptr ? p + chunk * 8 : any, p != nullptr);
  }
  if (threadIdx.x < kTileRows) valid_s[threadIdx.x] = rows[threadIdx.x] != nullptr ? 1 : 0;
}

template <int D, int MT>
__device__ void load_q(const AttentionArgs& a, std::int64_t t, int h0, int nh, std::uint8_t* q_s) {
  constexpr int kChunks = D / 8;
  const auto* base = static_cast<const std::uint16_t*>(a.q.base);
  for (int i = threadIdx.x; i < 16 * MT * kChunks; i += kThreads) {
    const int h = i / kChunks, chunk = i % kChunks;
    const std::int64_t row = t * a.heads + h0 + min(h, nh - 1);
    cp_async16_zfill(smem_u32(q_s + swizzled<D>(h, chunk * 8)), base + row * a.q.stride + chunk * 8, h < nh);
  }
}

// S = scale · Q·Kᵀ for this warp's 16 heads × 8·MT tile rows, -inf where the row is not real.
template <int D, int MT>
__device__ __forceinline__ void tile_scores(const std::uint8_t* q_s, const std::uint8_t* kv, const int* valid, float scale,
                            float (&s)[MT][4]) {
  using L = Layout<D, MT>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / L::kRowWarps, wn = warp % L::kRowWarps;
  const int n_base = wn * MT * 8;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll 4
  for (int k0 = 0; k0 < D; k0 += 16) {
    std::uint32_t af[4];
    ldsm_x4(smem_u32(q_s + swizzled<D>(wm * 16 + (lane & 15), k0 + (lane >> 4) * 8)), af);
    if constexpr (MT == 1) {
      std::uint32_t bf[2];
      ldsm_x2(smem_u32(kv + swizzled<D>(n_base + (lane & 7), k0 + ((lane >> 3) & 1) * 8)), bf);
      mma_m16n8k16_bf16(s[0], af, bf[0], bf[1]);
    } else {
#pragma unroll
      for (int j = 0; j < MT; j += 2) {
        std::uint32_t bf[4];
        ldsm_x4(smem_u32(kv + swizzled<D>(n_base + j * 8 + (lane & 7) + (lane >> 4) * 8, k0 + ((lane >> 3) & 1) * 8)),
                bf);
        mma_m16n8k16_bf16(s[j], af, bf[0], bf[1]);
        mma_m16n8k16_bf16(s[j + 1], af, bf[2], bf[3]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = n_base + j * 8 + 2 * (lane & 3) + (e & 1);
      s[j][e] = valid[col] ? s[j][e] * scale : -INFINITY;
    }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Online-softmax step of one tile: block max per head across the row warps, probabilities
// p = exp(s - new max) written to shared memory as bf16 (hi, and the residual lo when the op wants
// f32 probabilities), sums of the unrounded p per 8 rows, and each head's new max and rescale
// factor. The sums are added in one order whatever MT is, so a row's bits do not depend on it.
template <int D, int MT, bool kSplitProbs>
__device__ __forceinline__ void tile_probabilities(float (&s)[MT][4], std::uint8_t* smem) {
  using L = Layout<D, MT>;
  constexpr int kHeads = L::kHeads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / L::kRowWarps, wn = warp % L::kRowWarps;
  auto* red_max = reinterpret_cast<float*>(smem + L::red_max);
  auto* red_sum = reinterpret_cast<float*>(smem + L::red_sum);
  auto* stats = reinterpret_cast<float*>(smem + L::stats);  // m, l, new m, rescale
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
  const int head[2] = {wm * 16 + (lane >> 2), wm * 16 + (lane >> 2) + 8};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = quad_max(mx[r]);
    if ((lane & 3) == 0) red_max[wn * kHeads + head[r]] = mx[r];
  }
  __syncthreads();
  float new_max[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float bm = -INFINITY;
    for (int w = 0; w < L::kRowWarps; ++w) bm = fmaxf(bm, red_max[w * kHeads + head[r]]);
    new_max[r] = fmaxf(stats[head[r]], bm);
  }
  std::uint8_t* p_hi = smem + L::p;
  std::uint8_t* p_lo = p_hi + kHeads * kTileRows * 2;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float p[2], sum = 0.0f;
      std::uint16_t hi[2], lo[2] = {0, 0};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = s[j][2 * r + e];
        p[e] = (v == -INFINITY || new_max[r] == -INFINITY) ? 0.0f : expf(v - new_max[r]);
        sum += p[e];
        hi[e] = f32_to_bf16_bits(p[e]);
        if (kSplitProbs) lo[e] = f32_to_bf16_bits(p[e] - bf16_bits_to_f32(hi[e]));
      }
      const int col = wn * MT * 8 + j * 8 + 2 * (lane & 3);
      const int off = swizzled<kTileRows>(head[r], col & ~7) + (col & 7) * 2;
      *reinterpret_cast<std::uint32_t*>(p_hi + off) = hi[0] | (static_cast<std::uint32_t>(hi[1]) << 16);
      if constexpr (kSplitProbs)
        *reinterpret_cast<std::uint32_t*>(p_lo + off) = lo[0] | (static_cast<std::uint32_t>(lo[1]) << 16);
      sum = quad_sum(sum);
      if ((lane & 3) == 0) red_sum[(col >> 3) * kHeads + head[r]] = sum;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if ((lane & 3) == 0) {
      if (wn == 0) {
        stats[2 * kHeads + head[r]] = new_max[r];
        stats[3 * kHeads + head[r]] = new_max[r] == -INFINITY ? 1.0f : expf(stats[head[r]] - new_max[r]);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < kHeads) {  // l = l · rescale + Σ p, in row order (fixed)
    const int h = threadIdx.x;
    float block_sum = 0.0f;
    for (int i = 0; i < kTileRows / 8; ++i) block_sum += red_sum[i * kHeads + h];
    stats[kHeads + h] = stats[kHeads + h] * stats[3 * kHeads + h] + block_sum;
    stats[h] = stats[2 * kHeads + h];
  }
}

// acc = acc · rescale + P·V for this warp's D/8 output columns of every head.
template <int D, int MT, bool kSplitProbs>
__device__ __forceinline__ void tile_pv(const std::uint8_t* smem, const std::uint8_t* kv, float (&acc)[MT][D / 64][4]) {
  using L = Layout<D, MT>;
  constexpr int kNt = D / 64;  // n8 tiles per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c0 = warp * (D / 8);
  const auto* rescale = reinterpret_cast<const float*>(smem + L::stats) + 3 * L::kHeads;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float f = rescale[mt * 16 + (lane >> 2) + 8 * r];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        acc[mt][nt][2 * r] *= f;
        acc[mt][nt][2 * r + 1] *= f;
      }
    }
  const std::uint8_t* p_hi = smem + L::p;
  const std::uint8_t* p_lo = p_hi + L::kHeads * kTileRows * 2;
#pragma unroll
  for (int k0 = 0; k0 < kTileRows; k0 += 16) {
    std::uint32_t bv[kNt][2];
#pragma unroll
    for (int j = 0; j < kNt; j += 2) {
      std::uint32_t r[4];
      ldsm_x4_trans(smem_u32(kv + swizzled<D>(k0 + (lane & 7) + ((lane >> 3) & 1) * 8, c0 + j * 8 + (lane >> 4) * 8)), r);
      bv[j][0] = r[0];
      bv[j][1] = r[1];
      bv[j + 1][0] = r[2];
      bv[j + 1][1] = r[3];
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      std::uint32_t ap[4];
      ldsm_x4(smem_u32(p_hi + swizzled<kTileRows>(mt * 16 + (lane & 15), k0 + (lane >> 4) * 8)), ap);
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) mma_m16n8k16_bf16(acc[mt][nt], ap, bv[nt][0], bv[nt][1]);
      if constexpr (kSplitProbs) {
        ldsm_x4(smem_u32(p_lo + swizzled<kTileRows>(mt * 16 + (lane & 15), k0 + (lane >> 4) * 8)), ap);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) mma_m16n8k16_bf16(acc[mt][nt], ap, bv[nt][0], bv[nt][1]);
      }
    }
  }
}

__device__ __forceinline__ void store_pair(const DevRows& m, std::int64_t row, int col, float v0, float v1) {
  const std::int64_t off = row * m.stride + col;
  if (m.bf16) {
    *reinterpret_cast<std::uint32_t*>(static_cast<std::uint16_t*>(m.base) + off) =
        f32_to_bf16_bits(v0) | (static_cast<std::uint32_t>(f32_to_bf16_bits(v1)) << 16);
  } else {
    *reinterpret_cast<float2*>(static_cast<float*>(m.base) + off) = make_float2(v0, v1);
  }
}

// Writes the finished rows (one split: normalised with the sink; several: unnormalised partials
// and (max, sum) for the combine kernel).
template <int D, int MT>
__device__ __forceinline__ void write_output(const AttentionArgs& a, const std::uint8_t* smem, std::int64_t t, int h0, int nh,
                             const float (&acc)[MT][D / 64][4]) {
  using L = Layout<D, MT>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const auto* stats = reinterpret_cast<const float*>(smem + L::stats);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = mt * 16 + (lane >> 2) + 8 * r;
      if (h >= nh) continue;
      const std::int64_t row = t * a.heads + h0 + h;
      const float m = stats[h], l = stats[L::kHeads + h];
      if (a.splits == 1) {
        const float denom = l + expf(a.sinks[h0 + h] - m);
#pragma unroll
        for (int nt = 0; nt < D / 64; ++nt) {
          const int col = warp * (D / 8) + nt * 8 + 2 * (lane & 3);
          const bool none = m == -INFINITY;  // no key at all: zero output
          store_pair(a.out, row, col, none ? 0.0f : acc[mt][nt][2 * r] / denom,
                     none ? 0.0f : acc[mt][nt][2 * r + 1] / denom);
        }
      } else {
        const std::int64_t slot = row * a.splits + blockIdx.z;
        if (warp == 0 && (lane & 3) == 0) {
          a.part_ml[slot * 2] = m;
          a.part_ml[slot * 2 + 1] = l;
        }
#pragma unroll
        for (int nt = 0; nt < D / 64; ++nt) {
          const int col = warp * (D / 8) + nt * 8 + 2 * (lane & 3);
          *reinterpret_cast<float2*>(a.part_acc + slot * D + col) =
              make_float2(acc[mt][nt][2 * r], acc[mt][nt][2 * r + 1]);
        }
      }
    }
}

// grid (T, head groups of 16·MT, splits); each CTA runs tiles [z·blocks_per_split, +blocks_per_split)
// of its token's index list through a two-stage cp.async pipeline.
template <int D, int MT, bool kSplitProbs>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_mma_kernel(AttentionArgs a) {
  enter_dependent_kernel();
  using L = Layout<D, MT>;
  extern __shared__ __align__(128) std::uint8_t smem[];
  const std::int64_t t = blockIdx.x;
  const int h0 = blockIdx.y * L::kHeads;
  const int nh = min(L::kHeads, a.heads - h0);
  const int kcount = a.kcount;
  const int ntiles = (kcount + kTileRows - 1) / kTileRows;
  const int tile_begin = blockIdx.z * a.blocks_per_split;
  const int tile_end = min(ntiles, tile_begin + a.blocks_per_split);
  const int row_end = min(kcount, tile_end * kTileRows);
  const std::int32_t* idx = a.idx + t * a.idx_stride;
  auto** ptr_s = reinterpret_cast<const std::uint16_t**>(smem + L::ptr);
  auto* valid_s = reinterpret_cast<int*>(smem + L::valid);
  auto* stats = reinterpret_cast<float*>(smem + L::stats);
  const void* any = a.q.base;  // a mapped address for zero-filled copies

  load_q<D, MT>(a, t, h0, nh, smem + L::q);
  resolve_rows(a, idx, tile_begin * kTileRows, row_end, ptr_s);
  if (threadIdx.x < L::kHeads) {
    stats[threadIdx.x] = -INFINITY;
    stats[L::kHeads + threadIdx.x] = 0.0f;
  }
  __syncthreads();
  if (tile_begin < tile_end) issue_tile<D>(ptr_s, smem + L::kv, valid_s, any);
  cp_async_commit_group();

  float acc[MT][D / 64][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < D / 64; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int stage = (tile - tile_begin) & 1;
    const int next = tile + 1;
    if (next < tile_end) {
      const int slot = (next - tile_begin) % kResolveTiles;
      if (slot == 0) {
        resolve_rows(a, idx, next * kTileRows, row_end, ptr_s);
        __syncthreads();
      }
      issue_tile<D>(ptr_s + slot * kTileRows, smem + L::kv + (stage ^ 1) * kTileRows * D * 2,
                    valid_s + (stage ^ 1) * kTileRows, any);
    }
    cp_async_commit_group();
    cp_async_wait_group<1>();
    __syncthreads();
    const std::uint8_t* kv = smem + L::kv + stage * kTileRows * D * 2;
    float s[MT][4];
    tile_scores<D, MT>(smem + L::q, kv, valid_s + stage * kTileRows, a.scale, s);
    tile_probabilities<D, MT, kSplitProbs>(s, smem);
    tile_pv<D, MT, kSplitProbs>(smem, kv, acc);
    __syncthreads();
  }
  cp_async_wait_group<0>();
  __syncthreads();
  write_output<D, MT>(a, smem, t, h0, nh, acc);
}

// Merges the splits of one (token, head) row in split order; the sink joins the denominator here.
__global__ void __launch_bounds__(128) sparse_attention_mma_combine(AttentionArgs a) {
  enter_dependent_kernel();
  const std::int64_t row = blockIdx.x;
  const int h = static_cast<int>(row % a.heads);
  const float* ml = a.part_ml + row * a.splits * 2;
  float gmax = -INFINITY;
  for (int s = 0; s < a.splits; ++s) gmax = fmaxf(gmax, ml[2 * s]);
  float denom = 0.0f;
  for (int s = 0; s < a.splits; ++s)
    if (ml[2 * s] != -INFINITY) denom += ml[2 * s + 1] * expf(ml[2 * s] - gmax);
  denom += expf(a.sinks[h] - gmax);
  for (int col = 2 * threadIdx.x; col < a.d; col += 2 * blockDim.x) {
    float v0 = 0.0f, v1 = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
      if (ml[2 * s] == -INFINITY) continue;
      const float f = expf(ml[2 * s] - gmax);
      const float2 p = *reinterpret_cast<const float2*>(a.part_acc + (row * a.splits + s) * a.d + col);
      v0 += p.x * f;
      v1 += p.y * f;
    }
    const bool none = gmax == -INFINITY;
    store_pair(a.out, row, col, none ? 0.0f : v0 / denom, none ? 0.0f : v1 / denom);
  }
}

template <int D, int MT, bool kSplitProbs>
void launch_variant(const AttentionArgs& a, std::int64_t tokens, cudaStream_t stream) {
  constexpr int kSmem = Layout<D, MT>::bytes;
  static_assert(kSmem <= 227 * 1024, "sparse_attention_mma: shared memory above the sm_90 limit");
  auto* kernel = sparse_attention_mma_kernel<D, MT, kSplitProbs>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((a.heads + 16 * MT - 1) / (16 * MT)),
                  static_cast<unsigned>(a.splits));
  launch_chained(kernel, grid, kThreads, kSmem, stream, a);
}

template <int D>
void launch_d(const AttentionArgs& a, std::int64_t tokens, cudaStream_t stream) {
  const bool split_probs = a.round_probs == 0;  // f32 probabilities: P as bf16 hi + lo
  if (a.heads_per_cta == 16) {
    split_probs ? launch_variant<D, 1, true>(a, tokens, stream) : launch_variant<D, 1, false>(a, tokens, stream);
  } else {
    split_probs ? launch_variant<D, 4, true>(a, tokens, stream) : launch_variant<D, 4, false>(a, tokens, stream);
  }
}

bool aligned16(const void* p, std::int64_t stride_elems) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && stride_elems % 8 == 0;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool sparse_attention_mma_eligible(const AttentionArgs& a) {
  if (a.d != 128 && a.d != 256 && a.d != 512) return false;
  if (a.block != kTileRows || a.heads <= 0 || !a.q.bf16 || !aligned16(a.q.base, a.q.stride)) return false;
  for (int s = 0; s < a.num_sources; ++s)
    if (!a.src[s].rows.bf16 || !aligned16(a.src[s].rows.base, a.src[s].rows.stride)) return false;
  const std::uintptr_t out_align = a.out.bf16 ? 4 : 8;
  return reinterpret_cast<std::uintptr_t>(a.out.base) % out_align == 0 && a.out.stride % 2 == 0;
}

void plan_sparse_attention_mma(AttentionArgs& a, std::int64_t tokens, int sm_count, bool batch_invariant) {
  const std::int64_t ntiles = ceil_div(a.kcount, kTileRows);
  // 64 heads per CTA reuse each staged KV tile most; 16 give few tokens more CTAs. Neither changes
  // any row's arithmetic (every output element sums over the same tiles in the same order), so
  // this choice may depend on T even in batch-invariant mode.
  const std::int64_t wide_ctas = tokens * ceil_div(a.heads, 64);
  const bool few = batch_invariant ? 2 * wide_ctas < sm_count : wide_ctas * std::max<std::int64_t>(ntiles, 1) < sm_count;
  a.heads_per_cta = (a.heads <= 16 || few) ? 16 : 64;
  // Split the index list when the CTAs cannot fill the GPU (decode). The split changes the
  // summation order, so batch-invariant mode never splits (a split fixed per index count would
  // need partials for every token of a prefill chunk).
  const std::int64_t ctas = tokens * ceil_div(a.heads, a.heads_per_cta);
  std::int64_t splits = 1;
  if (!batch_invariant && ctas < sm_count)
    splits = std::clamp<std::int64_t>(sm_count / ctas, 1, std::max<std::int64_t>(ntiles, 1));
  a.blocks_per_split = static_cast<int>(std::max<std::int64_t>(1, ceil_div(ntiles, splits)));
  a.splits = static_cast<int>(std::max<std::int64_t>(1, ceil_div(ntiles, a.blocks_per_split)));
}

void launch_sparse_attention_mma(const AttentionArgs& a, std::int64_t tokens, cudaStream_t stream) {
  if (tokens == 0) return;
  switch (a.d) {
    case 128: launch_d<128>(a, tokens, stream); break;
    case 256: launch_d<256>(a, tokens, stream); break;
    default: launch_d<512>(a, tokens, stream); break;
  }
  if (a.splits > 1)
    launch_chained(sparse_attention_mma_combine, static_cast<unsigned>(tokens * a.heads), 128, 0, stream, a);
}

}  // namespace deepinfer::ops::cuda
