// MoE on the GPU: the router (score function, bias-corrected or hash selection, normalised
// weights), the deterministic grouping of (token, slot) pairs by expert that feeds the grouped
// GEMM, the SwiGLU between the expert GEMMs and the per-token combine in ascending expert order.
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kRouteWarps = 4;
constexpr int kSortThreads = 1024;

__device__ __forceinline__ float route_score(float logit, int func) {
  if (func == 0) {
    const float sp = logit > 20.0f ? logit : log1pf(expf(logit));
    return sqrtf(sp);
  }
  if (func == 1) return 1.0f / (1.0f + expf(-logit));
  return logit;
}

// One warp per token.
__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(RouteArgs a) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= a.tokens) return;
  float* scores = smem + warp * 2 * a.experts;
  float* biased = scores + a.experts;
  unsigned char* taken = reinterpret_cast<unsigned char*>(smem + kRouteWarps * 2 * a.experts) + warp * a.experts;
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
        taken[bi] = 1;
      }
      __syncwarp();
    }
  }
  __syncwarp();
  if (lane == 0) {
    float* w = a.weights + t * a.k;
    float sum = 0.0f;
    for (int j = 0; j < a.k; ++j) {
      w[j] = scores[sel[j]];
      sum += w[j];
    }
    for (int j = 0; j < a.k; ++j) {
      if (a.normalize) w[j] /= sum + a.normalize_eps;
      w[j] *= a.route_scale;
    }
  }
}

// Single block: counts per expert, expert start offsets, work items of <= bm rows, then a stable
// placement (pairs of one expert keep ascending pair order) so the layout never depends on timing.
__global__ void __launch_bounds__(kSortThreads) moe_sort_kernel(MoeSortArgs a) {
  extern __shared__ int sm[];
  int* base = sm;                       // [E] running placement offset
  int* wcount = sm + a.experts;         // [32][E]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int e = tid; e < a.experts; e += kSortThreads) base[e] = 0;
  __syncthreads();
  for (std::int64_t i = tid; i < a.pairs; i += kSortThreads) {
    const std::int32_t e = a.ids[i];
    if (e < 0 || e >= a.experts) {
      report_fault(a.err, DeviceFault::kExpertId, e, a.experts);
      a.pos[i] = -1;
    } else {
      atomicAdd(&base[e], 1);
    }
  }
  __syncthreads();
  if (tid == 0) {
    int start = 0, items = 0;
    for (int e = 0; e < a.experts; ++e) {
      const int c = base[e];
      for (int r = 0; r < c; r += a.bm) a.items[items++] = make_int4(e, start + r, min(a.bm, c - r), 0);
      base[e] = start;
      start += c;
    }
    *a.item_count = items;
  }
  for (int j = tid; j < 32 * a.experts; j += kSortThreads) wcount[j] = 0;
  __syncthreads();
  for (std::int64_t chunk = 0; chunk < a.pairs; chunk += kSortThreads) {
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
    for (int x = tid; x < a.experts; x += kSortThreads) {
      int total = 0;
      for (int w = 0; w < 32; ++w) total += wcount[w * a.experts + x];
      base[x] += total;
    }
    __syncthreads();
    for (int j = tid; j < 32 * a.experts; j += kSortThreads) wcount[j] = 0;
    __syncthreads();
  }
}

// One block per placed row: h = round(w · silu(min(g, L)) · clamp(u, ±L)) in the intermediate
// dtype, FP8 fake quant per act block, bf16 into the w2 GEMM's A operand (zero padded to ld).
__global__ void moe_swiglu_kernel(MoeSwigluArgs a) {
  extern __shared__ float h[];
  const std::int64_t p = blockIdx.x;
  const float rw = a.rw[p];
#pragma unroll 4
  for (std::int64_t j = threadIdx.x; j < a.inter; j += blockDim.x) {
    float g = round_like(a.mid_bf16, a.gate[p * a.inter + j]);
    float u = round_like(a.mid_bf16, a.up[p * a.inter + j]);
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
          a.codes[p * a.ld + j] = f32_to_e4m3(fminf(fmaxf(h[j] / s, -kE4M3MaxF), kE4M3MaxF));
        if (lane == 0) a.code_scales[(b0 / a.act_block) * a.scales_ld + p] = s;
      } else {
        for (std::int64_t j = b0 + lane; j < b1; j += 32) store(j, fake_fp8(h[j], s));
      }
    }
  }
  for (std::int64_t j = a.inter + threadIdx.x; j < a.ld; j += blockDim.x) store(j, 0.0f);
}

// One block per token: Σ over its slots in ascending expert order of the rounded expert outputs.
__global__ void moe_combine_kernel(MoeCombineArgs a) {
  __shared__ int order[64];
  __shared__ std::int32_t prow[64];  // placed row of each slot, in summation order
  const std::int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int j = 0; j < a.k; ++j) order[j] = j;
    for (int j = 1; j < a.k; ++j) {  // insertion sort by (expert, slot): stable
      const int v = order[j];
      int i = j - 1;
      while (i >= 0 && a.ids[t * a.k + order[i]] > a.ids[t * a.k + v]) {
        order[i + 1] = order[i];
        --i;
      }
      order[i + 1] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < a.k) prow[threadIdx.x] = a.pos[t * a.k + order[threadIdx.x]];
  __syncthreads();
  // Four columns per thread and pass, so their loads are in flight together.
  const std::int64_t step = blockDim.x;
  for (std::int64_t c0 = threadIdx.x; c0 < a.d; c0 += 4 * step) {
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
    for (int j = 0; j < a.k; ++j) {
      const std::int32_t p = prow[j];
      if (p < 0) continue;
      const float* yr = a.y + static_cast<std::int64_t>(p) * a.d;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const std::int64_t c = c0 + e * step;
        if (c < a.d) s[e] += round_like(a.mid_bf16, yr[c]);
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::int64_t c = c0 + e * step;
      if (c < a.d) a.out[t * a.d + c] = s[e];
    }
  }
}

}  // namespace

void launch_moe_route(const RouteArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return;
  const std::size_t smem = static_cast<std::size_t>(kRouteWarps) * args.experts * (2 * sizeof(float) + 1);
  cudaFuncSetAttribute(moe_route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const auto blocks = static_cast<unsigned>((args.tokens + kRouteWarps - 1) / kRouteWarps);
  moe_route_kernel<<<blocks, kRouteWarps * 32, smem, stream>>>(args);
}

void launch_moe_sort(const MoeSortArgs& args, cudaStream_t stream) {
  const std::size_t smem = static_cast<std::size_t>(33) * args.experts * sizeof(int);
  cudaFuncSetAttribute(moe_sort_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  moe_sort_kernel<<<1, kSortThreads, smem, stream>>>(args);
}

void launch_moe_swiglu(const MoeSwigluArgs& args, std::int64_t rows, cudaStream_t stream) {
  if (rows == 0) return;
  const std::size_t smem = static_cast<std::size_t>(args.inter) * sizeof(float);
  cudaFuncSetAttribute(moe_swiglu_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  moe_swiglu_kernel<<<static_cast<unsigned>(rows), 256, smem, stream>>>(args);
}

void launch_moe_combine(const MoeCombineArgs& args, std::int64_t tokens, cudaStream_t stream) {
  if (tokens == 0) return;
  moe_combine_kernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(args);
}

}  // namespace deepinfer::ops::cuda
