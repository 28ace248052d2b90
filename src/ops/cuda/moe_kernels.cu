// MoE on the GPU: the router (score function, bias-corrected or hash selection, normalised
// weights), the deterministic grouping of (token, slot) pairs by expert that feeds the grouped
// GEMM, the SwiGLU between the expert GEMMs and the per-token combine in ascending expert order.
#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kRouteWarps = 4;
constexpr int kSortThreads = 1024;
constexpr int kSortThreadsSmall = 256;  // moe_sort for <= this many pairs (decode): 8 warps' barriers, not 32

__device__ __forceinline__ float route_score(float logit, int func) {
  if (func == 0) {
    const float sp = logit > 20.0f ? logit : log1pf(expf(logit));
    return sqrtf(sp);
  }
  if (func == 1) return 1.0f / (1.0f + expf(-logit));
  return logit;
}

// One warp per token. The selected ids are kept in shared memory (sel_s) and the weights computed from
// it: reading them back from global memory after writing them cost a dependent L2 round trip per id.
__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(RouteArgs a) {
  enter_dependent_kernel();
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= a.tokens) return;
  float* scores = smem + warp * 2 * a.experts;
  float* biased = scores + a.experts;
  std::int32_t* sel_s = reinterpret_cast<std::int32_t*>(smem + kRouteWarps * 2 * a.experts) + warp * a.k;
  unsigned char* taken =
      reinterpret_cast<unsigned char*>(smem + kRouteWarps * (2 * a.experts + a.k)) + warp * a.experts;
  const float* lg = a.logits + t * a.experts;
  if (a.score_func == 2) {
    float mx = -INFINITY;
    for (int i = lane; i < a.experts; i += 32) mx = fmaxf(mx, lg[i]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int i = lane; i < a.experts; i += 32) {
      scores[i] = expf(lg[i] - mx);
      sum += scores[i];
    }
    sum = warp_sum(sum);
    for (int i = lane; i < a.experts; i += 32) scores[i] /= sum;
  } else {
    for (int i = lane; i < a.experts; i += 32) scores[i] = route_score(lg[i], a.score_func);
  }
  for (int i = lane; i < a.experts; i += 32) {
    biased[i] = scores[i] + (a.bias != nullptr ? a.bias[i] : 0.0f);
    taken[i] = 0;
  }
  __syncwarp();
  std::int32_t* sel = a.ids + t * a.k;
  if (a.tid2eid != nullptr) {
    const std::int32_t tok = a.token_ids[t];
    const bool tok_ok = tok >= 0 && tok < a.vocab;
    if (!tok_ok && lane == 0) report_fault(a.err, DeviceFault::kHashTokenId, tok, a.vocab);
    for (int j = lane; j < a.k; j += 32) {
      std::int32_t e = tok_ok ? a.tid2eid[static_cast<std::int64_t>(tok) * a.k + j] : 0;
      if (e < 0 || e >= a.experts) {
        report_fault(a.err, DeviceFault::kExpertId, e, a.experts);
        e = 0;
      }
      sel[j] = e;
      sel_s[j] = e;
    }
  } else {
    for (int j = 0; j < a.k; ++j) {
      float bv = -INFINITY;
      int bi = -1;
      for (int i = lane; i < a.experts; i += 32)
        if (!taken[i] && (bi < 0 || biased[i] > bv)) {
          bv = biased[i];
          bi = i;
        }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
          bv = ov;
          bi = oi;
        }
      }
      if (lane == 0) {
        sel[j] = bi;
        sel_s[j] = bi;
        taken[bi] = 1;
      }
      __syncwarp();
    }
  }
  __syncwarp();
  // w_j = score_j (/ (Σ score in slot order + eps)) x route_scale: the sum serial in slot order.
  float sum = 0.0f;
  if (lane == 0)
    for (int j = 0; j < a.k; ++j) sum += scores[sel_s[j]];
  sum = __shfl_sync(0xffffffffu, sum, 0);
  float* w = a.weights + t * a.k;
  for (int j = lane; j < a.k; j += 32) {
    float v = scores[sel_s[j]];
    if (a.normalize) v /= sum + a.normalize_eps;
    w[j] = v * a.route_scale;
  }
}

// Exclusive prefix sums over the block of two per-thread values (the rows and the items of a thread's
// experts); returns the block totals in *total_a / *total_b.
__device__ __forceinline__ void block_exclusive_scan2(int& va, int& vb, int* scratch, int* total_a, int* total_b) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, warps = blockDim.x / 32;
  int ia = va, ib = vb;
  for (int o = 1; o < 32; o <<= 1) {
    const int ua = __shfl_up_sync(0xffffffffu, ia, o), ub = __shfl_up_sync(0xffffffffu, ib, o);
    if (lane >= o) {
      ia += ua;
      ib += ub;
    }
  }
  if (lane == 31) {
    scratch[warp] = ia;
    scratch[32 + warp] = ib;
  }
  __syncthreads();
  if (warp == 0) {
    int wa = lane < warps ? scratch[lane] : 0, wb = lane < warps ? scratch[32 + lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int ua = __shfl_up_sync(0xffffffffu, wa, o), ub = __shfl_up_sync(0xffffffffu, wb, o);
      if (lane >= o) {
        wa += ua;
        wb += ub;
      }
    }
    scratch[64 + lane] = wa;  // inclusive over warps
    scratch[96 + lane] = wb;
  }
  __syncthreads();
  const int before_a = warp > 0 ? scratch[64 + warp - 1] : 0, before_b = warp > 0 ? scratch[96 + warp - 1] : 0;
  *total_a = scratch[64 + warps - 1];
  *total_b = scratch[96 + warps - 1];
  va = before_a + ia - va;
  vb = before_b + ib - vb;
}

// Single block: counts per expert, expert start offsets and work items of <= bm rows (each thread
// owns a contiguous range of experts; one block-wide scan), then a stable placement (pairs of one
// expert keep ascending pair order) so the layout never depends on timing — nor on kThreads.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) moe_sort_kernel(MoeSortArgs a) {
  enter_dependent_kernel();
  constexpr int kWarps = kThreads / 32;
  extern __shared__ int sm[];
  __shared__ int scan[128];
  int* base = sm;                       // [E] count, then running placement offset
  int* wcount = sm + a.experts;         // [kWarps][E]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int e = tid; e < a.experts; e += kThreads) base[e] = 0;
  for (int j = tid; j < kWarps * a.experts; j += kThreads) wcount[j] = 0;
  __syncthreads();
  for (std::int64_t i = tid; i < a.pairs; i += kThreads) {
    const std::int32_t e = a.ids[i];
    if (e < 0 || e >= a.experts) {
      report_fault(a.err, DeviceFault::kExpertId, e, a.experts);
      a.pos[i] = -1;
    } else {
      atomicAdd(&base[e], 1);
    }
  }
  __syncthreads();
  const int per_thread = (a.experts + kThreads - 1) / kThreads;
  const int e0 = min(tid * per_thread, a.experts), e1 = min(e0 + per_thread, a.experts);
  int rows = 0, items = 0;
  for (int e = e0; e < e1; ++e) {
    rows += base[e];
    items += (base[e] + a.bm - 1) / a.bm;
  }
  int total_rows = 0, total_items = 0;
  block_exclusive_scan2(rows, items, scan, &total_rows, &total_items);
  for (int e = e0; e < e1; ++e) {
    const int c = base[e];
    for (int r = 0; r < c; r += a.bm) a.items[items++] = make_int4(e, rows + r, min(a.bm, c - r), 0);
    base[e] = rows;
    rows += c;
  }
  if (tid == 0) *a.item_count = total_items;
  __syncthreads();
  for (std::int64_t chunk = 0; chunk < a.pairs; chunk += kThreads) {
    const std::int64_t i = chunk + tid;
    std::int32_t e = i < a.pairs ? a.ids[i] : -1;
    if (e >= a.experts) e = -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (e >= 0 && rank == 0) wcount[warp * a.experts + e] = __popc(peers);
    __syncthreads();
    if (e >= 0) {
      int before = 0;
      for (int w = 0; w < warp; ++w) before += wcount[w * a.experts + e];
      const int p = base[e] + before + rank;
      a.pos[i] = p;
      a.a_rows[p] = static_cast<std::int32_t>(i / a.k);
      a.rw[p] = a.weights[i];
    }
    __syncthreads();
    for (int x = tid; x < a.experts; x += kThreads) {
      int total = 0;
      for (int w = 0; w < kWarps; ++w) total += wcount[w * a.experts + x];
      base[x] += total;
    }
    __syncthreads();
    for (int j = tid; j < kWarps * a.experts; j += kThreads) wcount[j] = 0;
    __syncthreads();
  }
}

// v[i], or ((v[i] + v[stride + i]) + v[2 stride + i]) ...: an expert GEMM's output, or the sum of its
// K-split partials in split order (launch_moe_fp4_wgmma with k_splits > 1).
__device__ __forceinline__ float split_sum(const float* v, std::int64_t i, int splits, std::int64_t stride) {
  float s = v[i];
  for (int k = 1; k < splits; ++k) s += v[k * stride + i];
  return s;
}

// One block per placed row: h = round(w · silu(min(g, L)) · clamp(u, ±L)) in the intermediate
// dtype, FP8 fake quant per act block, bf16 into the w2 GEMM's A operand (zero padded to ld).
__global__ void moe_swiglu_kernel(MoeSwigluArgs a) {
  if (a.early_dependents != 0) allow_dependents_early();
  enter_dependent_kernel();
  extern __shared__ float h[];
  const std::int64_t p = blockIdx.x;
  const float rw = a.rw[p];
#pragma unroll 4
  for (std::int64_t j = threadIdx.x; j < a.inter; j += blockDim.x) {
    float g = round_like(a.mid_bf16, split_sum(a.gate, p * a.inter + j, a.splits, a.split_stride));
    float u = round_like(a.mid_bf16, split_sum(a.up, p * a.inter + j, a.splits, a.split_stride));
    if (a.limit > 0.0f) {
      u = fminf(fmaxf(u, -a.limit), a.limit);
      g = fminf(g, a.limit);
    }
    h[j] = round_like(a.mid_bf16, rw * (g / (1.0f + expf(-g)) * u));
  }
  __syncthreads();
  // bf16 rows for the tensor-core w2, or f32 rows (exact mode) for the SIMT one.
  auto store = [&](std::int64_t j, float v) {
    if (a.codes) {
      a.codes[p * a.ld + j] = 0;  // padding only: quantised blocks write codes below
    } else if (a.out_f32) {
      a.out_f32[p * a.ld + j] = v;
    } else {
      a.out[p * a.ld + j] = f32_to_bf16_bits(v);
    }
  };
  if (a.act_block <= 0) {
    for (std::int64_t j = threadIdx.x; j < a.inter; j += blockDim.x) store(j, h[j]);
  } else {
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (std::int64_t b0 = (threadIdx.x / 32) * static_cast<std::int64_t>(a.act_block); b0 < a.inter;
         b0 += static_cast<std::int64_t>(warps) * a.act_block) {
      const std::int64_t b1 = min(b0 + a.act_block, a.inter);
      float amax = 0.0f;
      for (std::int64_t j = b0 + lane; j < b1; j += 32) amax = fmaxf(amax, fabsf(h[j]));
      const float s = fp8_block_scale(warp_max(amax));
      if (a.codes) {
        for (std::int64_t j = b0 + lane; j < b1; j += 32)
          a.codes[p * a.ld + (a.codes_k_permuted ? k_permuted_col(j) : j)] =
              f32_to_e4m3(fminf(fmaxf(h[j] / s, -kE4M3MaxF), kE4M3MaxF));
        if (lane == 0) a.code_scales[(b0 / a.act_block) * a.scales_ld + p] = s;
      } else {
        for (std::int64_t j = b0 + lane; j < b1; j += 32) store(j, fake_fp8(h[j], s));
      }
    }
  }
  for (std::int64_t j = a.inter + threadIdx.x; j < a.ld; j += blockDim.x) store(j, 0.0f);
}

// The same for e4m3 codes with 128-column act blocks and no padding columns (inter % 128 == 0, ld ==
// inter), one 128-thread block per (placed row, act block): every value is one thread's, so a decode
// step's few rows spread over many SMs. Same formulas; the block max is order-independent.
__global__ void __launch_bounds__(128) moe_swiglu_codes128_kernel(MoeSwigluArgs a) {
  // (the w2 GEMM reads nothing this kernel writes before its own wait)
  if (a.early_dependents != 0) allow_dependents_early();
  enter_dependent_kernel();
  __shared__ float wmax[4];
  const std::int64_t p = blockIdx.x;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.y) * 128 + threadIdx.x;
  const float rw = a.rw[p];
  float g = round_like(a.mid_bf16, split_sum(a.gate, p * a.inter + j, a.splits, a.split_stride));
  float u = round_like(a.mid_bf16, split_sum(a.up, p * a.inter + j, a.splits, a.split_stride));
  if (a.limit > 0.0f) {
    u = fminf(fmaxf(u, -a.limit), a.limit);
    g = fminf(g, a.limit);
  }
  const float h = round_like(a.mid_bf16, rw * (g / (1.0f + expf(-g)) * u));
  const float m = warp_max(fabsf(h));
  if (threadIdx.x % 32 == 0) wmax[threadIdx.x / 32] = m;
  __syncthreads();
  const float s = fp8_block_scale(fmaxf(fmaxf(wmax[0], wmax[1]), fmaxf(wmax[2], wmax[3])));
  const std::int64_t at = a.codes_k_permuted ? k_permuted_col(j) : j;
  a.codes[p * a.ld + at] = f32_to_e4m3(fminf(fmaxf(h / s, -kE4M3MaxF), kE4M3MaxF));
  if (threadIdx.x == 0) a.code_scales[static_cast<std::int64_t>(blockIdx.y) * a.scales_ld + p] = s;
}

// Block (token, 512-column slice): Σ over the token's slots in ascending (expert, slot) order of the
// rounded expert outputs, four consecutive columns per thread (16-byte loads when aligned).
constexpr int kCombineThreads = 128;
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoeCombineArgs a) {
  enter_dependent_kernel();
  __shared__ std::int32_t sid[64], spos[64];
  __shared__ std::int32_t prow[64];  // placed row of each slot, in summation order
  const std::int64_t t = blockIdx.x;
  const int tid = threadIdx.x;
  if (tid < a.k) {
    sid[tid] = a.ids[t * a.k + tid];
    spos[tid] = a.pos[t * a.k + tid];
  }
  __syncthreads();
  if (tid < a.k) {  // rank by (expert, slot): the stable order, one slot per thread
    int rank = 0;
    for (int i = 0; i < a.k; ++i) rank += (sid[i] < sid[tid] || (sid[i] == sid[tid] && i < tid)) ? 1 : 0;
    prow[rank] = spos[tid];
  }
  __syncthreads();
  const std::int64_t c0 = (static_cast<std::int64_t>(blockIdx.y) * kCombineThreads + tid) * 4;
  if (c0 >= a.d) return;
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const bool vec = (a.d % 4 == 0) && a.split_stride % 4 == 0 &&
                   ((reinterpret_cast<std::uintptr_t>(a.y) | reinterpret_cast<std::uintptr_t>(a.out)) % 16 == 0);
  for (int j = 0; j < a.k; ++j) {
    const std::int32_t p = prow[j];
    if (p < 0) continue;
    const float* yr = a.y + static_cast<std::int64_t>(p) * a.d + c0;
    if (vec) {
      float4 v = *reinterpret_cast<const float4*>(yr);
      for (int k = 1; k < a.splits; ++k) {  // the K-split partials, added in split order
        const float4 v2 = *reinterpret_cast<const float4*>(yr + k * a.split_stride);
        v = make_float4(v.x + v2.x, v.y + v2.y, v.z + v2.z, v.w + v2.w);
      }
      s[0] += round_like(a.mid_bf16, v.x);
      s[1] += round_like(a.mid_bf16, v.y);
      s[2] += round_like(a.mid_bf16, v.z);
      s[3] += round_like(a.mid_bf16, v.w);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (c0 + e < a.d) s[e] += round_like(a.mid_bf16, split_sum(yr, e, a.splits, a.split_stride));
    }
  }
  float* o = a.out + t * a.d + c0;
  if (vec) {
    *reinterpret_cast<float4*>(o) = make_float4(s[0], s[1], s[2], s[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (c0 + e < a.d) o[e] = s[e];
  }
}

}  // namespace

void launch_moe_route(const RouteArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return;
  const std::size_t per_warp = static_cast<std::size_t>(args.experts) * (2 * sizeof(float) + 1) + args.k * 4;
  const std::size_t smem = kRouteWarps * per_warp;
  cudaFuncSetAttribute(moe_route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const auto blocks = static_cast<unsigned>((args.tokens + kRouteWarps - 1) / kRouteWarps);
  launch_chained(moe_route_kernel, blocks, kRouteWarps * 32, smem, stream, args);
}

template <int kThreads>
void launch_sort_block(const MoeSortArgs& args, cudaStream_t stream) {
  const std::size_t smem = static_cast<std::size_t>(1 + kThreads / 32) * args.experts * sizeof(int);
  cudaFuncSetAttribute(moe_sort_kernel<kThreads>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  launch_chained(moe_sort_kernel<kThreads>, 1, kThreads, smem, stream, args);
}

void launch_moe_sort(const MoeSortArgs& args, cudaStream_t stream) {
  if (args.small_block != 0 && args.pairs <= kSortThreadsSmall) {
    launch_sort_block<kSortThreadsSmall>(args, stream);
  } else {
    launch_sort_block<kSortThreads>(args, stream);
  }
}

void launch_moe_swiglu(const MoeSwigluArgs& args, std::int64_t rows, cudaStream_t stream) {
  if (rows == 0) return;
  if (args.codes != nullptr && args.act_block == 128 && args.inter % 128 == 0 && args.ld == args.inter) {
    launch_chained(moe_swiglu_codes128_kernel,
                   dim3(static_cast<unsigned>(rows), static_cast<unsigned>(args.inter / 128)), 128, 0, stream, args);
    return;
  }
  const std::size_t smem = static_cast<std::size_t>(args.inter) * sizeof(float);
  cudaFuncSetAttribute(moe_swiglu_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  launch_chained(moe_swiglu_kernel, static_cast<unsigned>(rows), 256, smem, stream, args);
}

void launch_moe_combine(const MoeCombineArgs& args, std::int64_t tokens, cudaStream_t stream) {
  if (tokens == 0) return;
  const auto slices = static_cast<unsigned>((args.d + 4 * kCombineThreads - 1) / (4 * kCombineThreads));
  const dim3 grid(static_cast<unsigned>(tokens), slices);
  launch_chained(moe_combine_kernel, grid, kCombineThreads, 0, stream, args);
}

}  // namespace deepinfer::ops::cuda
