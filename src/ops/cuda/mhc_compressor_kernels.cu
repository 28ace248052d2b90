// mHC mixing (stream RMS, mixing dot products, Sinkhorn, collapse, post-mix, head), V4.1's
// Engram read-out gate and the KV compressor over a batch: one thread per (row, channel) pools the
// group a row completes, then each sequence's ring keeps its last rows.
#include <algorithm>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kHcThreads = 256;
constexpr int kMixChunk = 12;  // mixing sums held in registers per block (grid z covers the rest)
constexpr int kMaxMix = (2 + 16) * 16;

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// comb (n × n) <- Sinkhorn of its logits, in the reference's order (single thread: n <= 16).
__device__ void sinkhorn(float* comb, int n, int iters, float eps) {
  for (int r = 0; r < n; ++r) {
    float* row = comb + r * n;
    float mx = row[0];
    for (int c = 1; c < n; ++c) mx = fmaxf(mx, row[c]);
    float sum = 0.0f;
    for (int c = 0; c < n; ++c) {
      row[c] = expf(row[c] - mx);
      sum += row[c];
    }
    for (int c = 0; c < n; ++c) row[c] = row[c] / sum + eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
      for (int r = 0; r < n; ++r) {
        float sum = 0.0f;
        for (int c = 0; c < n; ++c) sum += comb[r * n + c];
        for (int c = 0; c < n; ++c) comb[r * n + c] /= sum + eps;
      }
    }
    for (int c = 0; c < n; ++c) {
      float sum = 0.0f;
      for (int r = 0; r < n; ++r) sum += comb[r * n + c];
      for (int r = 0; r < n; ++r) comb[r * n + c] /= sum + eps;
    }
  }
}

// The mixing dot products are split over kHcSplit-element slices of the stream row, one block per
// (slice, group of tokens, mix chunk), so a decode step's few tokens still spread over many SMs (one
// block per token read its 1.5 MB of fn from one SM: ~330 us per site at batch 1). The split depends
// only on the row width, never on T, so every row sums in the same order at any batch size.
constexpr std::int64_t kHcSplit = 512;
constexpr int kPartialThreads = 512;  // one element of the slice per thread: all its loads in flight at once
static_assert(kHcSplit == kPartialThreads, "hc_mix_partial_kernel: one slice element per thread");
constexpr int kMaxGroup = 8;    // tokens per partial block: the block's fn slice is read once for all of them
constexpr int kSumSlots = 16;   // kMixChunk mixes + Σ x², padded to a power of two for warp_sum16
static_assert(kSumSlots == 16 && kMixChunk + 1 <= kSumSlots, "warp_sum16 reduces 16 slots");

__host__ __device__ inline int hc_slices(std::int64_t width) {
  return static_cast<int>((width + kHcSplit - 1) / kHcSplit);
}

// Tokens per partial block at a T-token step: about 4 blocks of tokens per (slice, chunk), so batch
// 32 runs 256 blocks (one wave at two per SM) and reads fn 4 times instead of 32. Any grouping gives
// the same bits (every token sums alone), so this is free to follow T.
int hc_partial_group(std::int64_t tokens) {
  return static_cast<int>(std::min<std::int64_t>(kMaxGroup, std::max<std::int64_t>(1, (tokens + 3) / 4)));
}

// Slot of the warp total that warp_sum16 leaves in this lane (lanes l and l ^ 1 hold the same one).
__device__ __forceinline__ int warp_sum16_slot(int lane) {
  return ((lane >> 4) & 1) * 8 + ((lane >> 3) & 1) * 4 + ((lane >> 2) & 1) * 2 + ((lane >> 1) & 1);
}

// warp_sum() of 16 per-lane values at once, each total bit-identical to warp_sum's: level o pairs lane
// l with l ^ o and adds the partner's value to its own, as warp_sum does, but a lane keeps only the
// half of the values whose slot matches its bit o and receives the partner's copy of that half, so
// the levels exchange 8 + 4 + 2 + 1 + 1 values instead of 16 × 5 (shuffles are one warp-instruction
// per clock per SM: at batch 32 the 5-shuffle trees were ~8 us of each partial call).
__device__ __forceinline__ float warp_sum16(float (&v)[kSumSlots]) {
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int level = 0; level < 4; ++level) {
    const int half = kSumSlots / 2 >> level, o = 16 >> level;
    // Bit selects (one LOP3 each): a `?:` on the two array elements became a select of their
    // addresses, which put v in local memory.
    const std::uint32_t upper = (lane & o) != 0 ? 0xffffffffu : 0u;
#pragma unroll
    for (int j = 0; j < half; ++j) {
      const std::uint32_t lo = __float_as_uint(v[j]), hi = __float_as_uint(v[j + half]);
      const float send = __uint_as_float((lo & upper) | (hi & ~upper));
      const float keep = __uint_as_float((hi & upper) | (lo & ~upper));
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
  return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}

// grid (slices, token groups, mix chunks): partial[t, s, m] = Σ_{i in slice s} fn[m, i] · x[t, i] for
// every mix m, and partial[t, s, n_mix] = Σ x[t, i]² over the slice. Each token of the group sums
// exactly as a block of its own did: per thread one product fmaf(fn, x, 0), the warp's xor tree
// (warp_sum16 == warp_sum), then the 16 warps in order — so the bits never depend on the group.
__global__ void __launch_bounds__(kPartialThreads, 2) hc_mix_partial_kernel(HcArgs a, int group) {
  __shared__ float red[kMaxGroup][kPartialThreads / 32][kMixChunk + 1];
  const int slice = blockIdx.x, slices = gridDim.x;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.y) * group;
  const int tokens = static_cast<int>(min(static_cast<std::int64_t>(group), a.x.rows - t0));
  const std::int64_t width = a.n * a.d;
  const int n_mix = a.head ? a.n : (2 + a.n) * a.n;
  const std::int64_t i = slice * kHcSplit + threadIdx.x;
  const bool live = i < width;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Grid z splits the mixes (kMixChunk per block) so a decode step's fn reads spread over twice the
  // SMs; each mix's partial is computed exactly as without the split. Block z = 0 writes Σ x².
  const int m0 = static_cast<int>(blockIdx.z) * kMixChunk;
  // Every load first (x as raw bits), so they are all in flight together. fn is a weight: launched as a
  // programmatic dependent (launch_hc_mix), the block reads it while the kernel that wrote x is still
  // finishing, and waits for that kernel only before its first read of x (and before any write).
  float fv[kMixChunk];
#pragma unroll
  for (int m = 0; m < kMixChunk; ++m) fv[m] = live && m0 + m < n_mix ? a.fn[(m0 + m) * width + i] : 0.0f;
  grid_dependency_wait();
  allow_dependents_early();  // the finish kernel may start: it reads nothing but weights before its own wait
  std::uint32_t xb[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) xb[g] = live && g < tokens ? load_bits(a.x, t0 + g, i) : 0u;
  const int slot = warp_sum16_slot(lane);
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= tokens) break;
    float acc[kSumSlots];
    const float xv = bits_value(a.x, xb[g]);
#pragma unroll
    for (int m = 0; m < kMixChunk; ++m) acc[m] = live ? fmaf(fv[m], xv, 0.0f) : 0.0f;
    acc[kMixChunk] = live ? fmaf(xv, xv, 0.0f) : 0.0f;
#pragma unroll
    for (int m = kMixChunk + 1; m < kSumSlots; ++m) acc[m] = 0.0f;
    const float v = warp_sum16(acc);
    if ((lane & 1) == 0 && slot <= kMixChunk) red[g][warp][slot] = v;
  }
  __syncthreads();
  const int g = static_cast<int>(threadIdx.x) / (kMixChunk + 1), m = static_cast<int>(threadIdx.x) % (kMixChunk + 1);
  if (g < tokens) {
    float total = 0.0f;
    for (int w = 0; w < kPartialThreads / 32; ++w) total += red[g][w][m];
    float* out = a.partial + ((t0 + g) * slices + slice) * (n_mix + 1);
    if (m < kMixChunk) {
      if (m0 + m < n_mix) out[m0 + m] = total;
    } else if (m0 == 0) {
      out[n_mix] = total;
    }
  }
}

// One warp runs comb's Sinkhorn for n <= 5 from registers (lane r·n + c holds comb[r][c]; other lanes
// hold 0). Every row / column sum walks its n entries in the serial reference's order through
// shuffles, so comb is bit-identical to sinkhorn() above; the n·n divisions of a pass run in parallel.
template <int N>
__device__ float sinkhorn_warp(float v, int iters, float eps) {
  const int lane = threadIdx.x % 32;
  const int r = lane / N, c = lane % N;
  // The reference's sums start from 0.0f; starting from the first entry instead drops one dependent
  // add per sum (40 in the chain) and is exact: 0.0f + e == e for every entry here (exponentials and
  // quotients of them, never -0.0f).
  auto row_sum = [&](float x) {
    float s = __shfl_sync(0xffffffffu, x, (r * N) & 31);
#pragma unroll
    for (int j = 1; j < N; ++j) s += __shfl_sync(0xffffffffu, x, (r * N + j) & 31);
    return s;
  };
  auto col_sum = [&](float x) {
    float s = __shfl_sync(0xffffffffu, x, c & 31);
#pragma unroll
    for (int j = 1; j < N; ++j) s += __shfl_sync(0xffffffffu, x, (j * N + c) & 31);
    return s;
  };
  float mx = __shfl_sync(0xffffffffu, v, (r * N) & 31);
#pragma unroll
  for (int j = 1; j < N; ++j) mx = fmaxf(mx, __shfl_sync(0xffffffffu, v, (r * N + j) & 31));
  v = expf(v - mx);
  v = v / row_sum(v) + eps;
  for (int it = 0; it < iters; ++it) {
    if (it > 0) v /= row_sum(v) + eps;
    v /= col_sum(v) + eps;
  }
  return v;
}

constexpr int kFinishThreads = kNormThreads;  // collapse + fused norm threads (hc_pre / hc_mix add a Sinkhorn warp)
constexpr int kPrefetch = 8;     // collapse columns per thread held in registers (D <= 4096 in one pass)
constexpr int kSliceBatch = 32;  // slice partials one summing thread loads at once (V4-Flash: all 32)

// Raw bits of columns tid + k · kFinishThreads of streams 0..n-1 of row r, branch-free: one address and
// one predicated load each (load_bits per element put each load in a branch region of its own, ~12
// instructions and a constant-cache wait apiece: ~1 us to issue a block's 40 loads).
template <typename Bits, int Streams>
__device__ __forceinline__ void prefetch_columns(const DevRows& m, std::int64_t r, std::int64_t d, int n,
                                                 std::uint32_t (&out)[kPrefetch][Streams]) {
  const Bits* row = static_cast<const Bits*>(m.base) + r * m.stride + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kPrefetch; ++k) {
    const bool live = threadIdx.x + k * kFinishThreads < d;
#pragma unroll
    for (int i = 0; i < Streams; ++i) out[k][i] = live && i < n ? row[i * d + k * kFinishThreads] : 0u;
  }
}

// bar.sync 1 over the kFinishThreads collapse threads (the Sinkhorn warp never waits on them).
__device__ __forceinline__ void collapse_barrier() {
  asm volatile("bar.sync 1, %0;" ::"n"(kFinishThreads) : "memory");
}

// block_sum over the collapse threads: rms_norm_kernel's order (a warp's xor tree, then the 16 warps
// in order) with the barrier the Sinkhorn warp does not join.
__device__ __forceinline__ float collapse_sum(float v, float* red) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  collapse_barrier();
  float total = 0.0f;
  for (int w = 0; w < kFinishThreads / 32; ++w) total += red[w];
  return total;
}

// The Sinkhorn warp: comb's logits (mv · scale + base, as the coefficient threads form pre and post)
// straight into lanes, Sinkhorn, comb out. n > 5 runs the serial reference on lane 0 through comb_s.
__device__ void finish_comb(const HcArgs& a, std::int64_t t, const float* mixes, float inv, float scale_v,
                            float* comb_s) {
  const int n = a.n, lane = static_cast<int>(threadIdx.x % 32), nn = n * n;
  float* out = a.comb + t * nn;
  if (n <= 5) {
    const float base_v = lane < nn ? a.base[2 * n + lane] : 0.0f;
    float v = 0.0f;
    if (lane < nn) {
      const float mv = mixes[2 * n + lane] * inv;
      v = mv * scale_v + base_v;
    }
    switch (n) {
      case 1: v = sinkhorn_warp<1>(v, a.iters, a.hc_eps); break;
      case 2: v = sinkhorn_warp<2>(v, a.iters, a.hc_eps); break;
      case 3: v = sinkhorn_warp<3>(v, a.iters, a.hc_eps); break;
      case 4: v = sinkhorn_warp<4>(v, a.iters, a.hc_eps); break;
      default: v = sinkhorn_warp<5>(v, a.iters, a.hc_eps); break;
    }
    if (lane < nn) out[lane] = v;
    return;
  }
  for (int j = lane; j < nn; j += 32) {
    const float mv = mixes[2 * n + j] * inv;
    comb_s[j] = mv * scale_v + a.base[2 * n + j];
  }
  __syncwarp();
  if (lane == 0) sinkhorn(comb_s, n, a.iters, a.hc_eps);
  __syncwarp();
  for (int j = lane; j < nn; j += 32) out[j] = comb_s[j];
}

// One block per token; critical path: slice partials -> mixes -> Sinkhorn (40 dependent shuffle
// sums and IEEE divisions). After the wait for the partial kernel, the first threads load their
// mix's slice partials before anything else and sum them in slice order; the collapse threads'
// stream columns, needed only after that, are in flight behind them. Then mixes[m] = (fn[m] · x) ·
// rsqrt(mean(x²) + eps); an extra warp (hc_pre / hc_mix only) runs comb's Sinkhorn while the
// kFinishThreads others form pre and post, the collapse y = Σ_i pre_i x_i (skipped for hc_mix) and,
// when norm_w is set, y ← rms_norm(y) with rms_norm_kernel's summation order (the fusion is
// bit-identical to hc_pre followed by rms_norm). Every value is the same expression in the same
// order as when one warp did it all; only the waiting overlaps.
__global__ void __launch_bounds__(kFinishThreads + 32, 1) hc_mix_finish_kernel(HcArgs a, int slices) {
  __shared__ float mixes[kMaxMix + 1];
  __shared__ float pre[16];
  __shared__ float comb_s[16 * 16];
  __shared__ float red[32];
  const std::int64_t t = blockIdx.x;
  const int n = a.n, tid = static_cast<int>(threadIdx.x);
  const std::int64_t width = n * a.d;
  const int n_mix = a.head ? n : (2 + n) * n;
  const int per = n_mix + 1;
  const bool collapse = a.y.base != nullptr;
  const bool prefetch = collapse && n <= 4 && tid < kFinishThreads;
  const bool norm = a.norm_w.base != nullptr;
  const float* part = a.partial + t * slices * per + tid;
  // 1. Weights (norm weight, coefficient parameters): launched as a programmatic dependent of the
  // partial kernel, the block may load them while that kernel still runs. After the wait: this
  // thread's mix partials (the critical path's first load), then the stream columns behind them.
  std::uint32_t xb[kPrefetch][4], wb[kPrefetch][1] = {};
  if (prefetch && norm && a.norm_w.bf16) prefetch_columns<std::uint16_t, 1>(a.norm_w, 0, a.d, 1, wb);
  else if (prefetch && norm) prefetch_columns<std::uint32_t, 1>(a.norm_w, 0, a.d, 1, wb);
  const int coef = tid < kFinishThreads ? tid : 2 * n;  // pre (< n), post (< 2n) or, for the Sinkhorn warp, comb
  const float base_v = coef < n_mix && coef < 2 * n ? a.base[coef] : 0.0f;
  const float scale_v = coef < n_mix ? a.scale[coef < n ? 0 : (coef < 2 * n ? 1 : 2)] : 0.0f;
  grid_dependency_wait();
  allow_dependents_early();
  float pv[kSliceBatch];
  // Only the first warp(s) hold a mix: the others skip the batch instead of issuing it predicated off
  // (their instructions would share warp 0's scheduler while its loads are being issued).
  auto load_partials = [&](int s0) {
    if (tid >= per) return;
    const float* p = part + static_cast<std::int64_t>(s0) * per;
    asm("" : "+l"(p));  // kept in registers: re-derived from the kernel parameters it cost ~9 instructions a load
    const int count = min(kSliceBatch, slices - s0);
#pragma unroll
    for (int k = 0; k < kSliceBatch; ++k) pv[k] = k < count ? __ldcg(p + k * per) : 0.0f;  // another grid's: L2
  };
  load_partials(0);
  if (prefetch && a.x.bf16) prefetch_columns<std::uint16_t, 4>(a.x, t, a.d, n, xb);
  else if (prefetch) prefetch_columns<std::uint32_t, 4>(a.x, t, a.d, n, xb);
  // 2. mixes[m]: slice partials in slice order.
  if (tid < per) {
    float total = 0.0f;
    for (int s0 = 0; s0 < slices; s0 += kSliceBatch) {
      if (s0 > 0) load_partials(s0);
#pragma unroll
      for (int k = 0; k < kSliceBatch; ++k)
        if (s0 + k < slices) total += pv[k];
    }
    mixes[tid] = total;
  }
  __syncthreads();
  const float inv = 1.0f / sqrtf(mixes[n_mix] / static_cast<float>(width) + a.norm_eps);
  if (tid >= kFinishThreads) {
    finish_comb(a, t, mixes, inv, scale_v, comb_s);
    return;
  }
  // 3. pre and post (the collapse needs only pre: it does not wait for Sinkhorn).
  if (tid < n_mix && tid < 2 * n) {
    const float mv = mixes[tid] * inv;
    if (tid < n) {
      pre[tid] = sigmoidf(mv * scale_v + base_v) + a.hc_eps;
      if (a.pre != nullptr) a.pre[t * n + tid] = pre[tid];
    } else {
      a.post[t * n + tid - n] = 2.0f * sigmoidf(mv * scale_v + base_v);
    }
  }
  if (!collapse) return;  // hc_mix: the collapse happens one site later
  collapse_barrier();
  // 4. The collapse and the fused norm.
  float yv[kPrefetch];
  float ss = 0.0f;
  const std::int64_t rest = prefetch ? static_cast<std::int64_t>(kPrefetch) * kFinishThreads : 0;
  if (prefetch) {
#pragma unroll
    for (int k = 0; k < kPrefetch; ++k) {
      const std::int64_t c = tid + k * kFinishThreads;
      float v = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (i < n) v = fmaf(pre[i], bits_value(a.x, xb[k][i]), v);
      yv[k] = round_like(a.y.bf16, v);
      if (c < a.d) {
        if (norm) ss = fmaf(yv[k], yv[k], ss);
        else store_elem(a.y, t, c, v);
      }
    }
  }
  for (std::int64_t c = rest + tid; c < a.d; c += kFinishThreads) {
    float v = 0.0f;
    for (int i = 0; i < n; ++i) v = fmaf(pre[i], load_elem(a.x, t, i * a.d + c), v);
    store_elem(a.y, t, c, v);  // normalised below when fused: this thread re-reads its own value
    const float r = round_like(a.y.bf16, v);
    ss = fmaf(r, r, ss);
  }
  if (!norm) return;
  ss = collapse_sum(ss, red);
  const float rinv = 1.0f / sqrtf(ss / static_cast<float>(a.d) + a.rms_eps);
  if (prefetch) {
#pragma unroll
    for (int k = 0; k < kPrefetch; ++k) {
      const std::int64_t c = tid + k * kFinishThreads;
      if (c < a.d) store_elem(a.y, t, c, bits_value(a.norm_w, wb[k][0]) * (yv[k] * rinv));
    }
  }
  for (std::int64_t c = rest + tid; c < a.d; c += kFinishThreads)
    store_elem(a.y, t, c, load_elem(a.norm_w, 0, c) * (load_elem(a.y, t, c) * rinv));
}

constexpr int kPostThreads = 256;

// out[t, k, i] = post[t, k] · f[t, i] + Σ_j comb[t, j, k] · residual[t, j, i]. grid (column tiles,
// T): the token's comb and post sit in shared memory, and one thread per column i loads its n
// residual values at once (raw bits, all in flight) and writes the n outputs. Each output sums in
// j order from 0, so the result never depends on the tiling.
__global__ void __launch_bounds__(kPostThreads) hc_post_kernel(DevRows f, DevRows residual, const float* post,
                                                               const float* comb, int n, std::int64_t d, DevRows out) {
  __shared__ float comb_s[16 * 16];
  __shared__ float post_s[16];
  // A programmatic dependent (launch_hc_post) that reads nothing before the previous kernel completes:
  // it is only resident early, so its launch overlaps that kernel's last CTAs.
  enter_dependent_kernel();
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kPostThreads + threadIdx.x;
  const bool live = i < d;
  for (std::int64_t t = blockIdx.y; t < residual.rows; t += gridDim.y) {
    std::uint32_t rb[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) rb[j] = j < n && live ? load_bits(residual, t, j * d + i) : 0u;
    const std::uint32_t fb = live ? load_bits(f, t, i) : 0u;
    for (int e = threadIdx.x; e < n * n; e += kPostThreads) comb_s[e] = comb[t * n * n + e];
    if (threadIdx.x < n) post_s[threadIdx.x] = post[t * n + threadIdx.x];
    __syncthreads();
    if (live) {
      float res[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) res[j] = bits_value(residual, rb[j]);
      const float fv = bits_value(f, fb);
      for (int k = 0; k < n; ++k) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; ++j)
          if (j < n) acc = fmaf(comb_s[j * n + k], res[j], acc);
        store_elem(out, t, k * d + i, post_s[k] * fv + acc);
      }
    }
    __syncthreads();  // comb_s / post_s are rewritten for the next token
  }
}

// y[t, c] = Σ_i pre[t, i] · x[t, i, c], accumulated in stream order like the CPU reference.
__global__ void hc_collapse_kernel(DevRows x, const float* pre, int n, std::int64_t d, DevRows y) {
  enter_dependent_kernel();
  const std::int64_t total = x.rows * d;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / d;
    const std::int64_t c = e % d;
    float v = 0.0f;
    for (int i = 0; i < n; ++i) v = fmaf(pre[t * n + i], load_elem(x, t, i * d + c), v);
    store_elem(y, t, c, v);
  }
}

// One block per (token, copy): the three row sums (x·ω·key, x², key²) in a fixed order, then
// out = x + gate · value. Each thread rewrites only elements it read after the reductions'
// barriers, so out may alias x.
__global__ void __launch_bounds__(kHcThreads) engram_gate_kernel(EngramGateArgs a) {
  enter_dependent_kernel();
  __shared__ float red[kHcThreads / 32];
  __shared__ float gate_s;
  const std::int64_t t = blockIdx.x / a.n;
  const int i = static_cast<int>(blockIdx.x % a.n);
  const std::int64_t off = static_cast<std::int64_t>(i) * a.d;
  const float* om = a.omega + off;
  float dot = 0.0f, xx = 0.0f, kk = 0.0f;
  for (std::int64_t c = threadIdx.x; c < a.d; c += kHcThreads) {
    const float xv = load_elem(a.x, t, off + c);
    const float kv = load_elem(a.key, t, off + c);
    dot = fmaf(xv * om[c], kv, dot);
    xx = fmaf(xv, xv, xx);
    kk = fmaf(kv, kv, kk);
  }
  dot = block_sum(dot, red);
  xx = block_sum(xx, red);
  kk = block_sum(kk, red);
  if (threadIdx.x == 0) {
    const float fd = static_cast<float>(a.d);
    const float rx = 1.0f / sqrtf(xx / fd + a.eps);
    const float rk = 1.0f / sqrtf(kk / fd + a.eps);
    const float s = dot * rx * rk * (1.0f / sqrtf(fd));
    const float mag = sqrtf(fmaxf(fabsf(s), 1e-6f));
    const float signed_mag = s > 0.0f ? mag : (s < 0.0f ? -mag : 0.0f);  // sign(0) = 0
    gate_s = sigmoidf(signed_mag);
  }
  __syncthreads();
  const float gate = gate_s;
  for (std::int64_t c = threadIdx.x; c < a.d; c += kHcThreads)
    store_elem(a.out, t, off + c, fmaf(gate, load_elem(a.value, t, c), load_elem(a.x, t, off + c)));
}

// Row of this batch holding position q of the same sequence as row t, or -1 (then the slot's ring has it).
__device__ std::int64_t compressor_input_row(const CompressorArgs& a, std::int64_t t, std::int64_t q) {
  const std::int64_t back = static_cast<std::int64_t>(a.positions[t]) - q;
  if (back < 0 || back > t) return -1;
  const std::int64_t r = t - back;
  return a.slots[r] == a.slots[t] && a.positions[r] == q ? r : -1;
}

// grid (channel tiles, T): the group completed by row t, channel c (the CPU's order: max, sum of
// exponentials, weighted sum in slot order); rows that complete no group write zeros.
__global__ void compressor_pool_kernel(CompressorArgs a) {
  enter_dependent_kernel();
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t t = blockIdx.y;
  if (c >= a.d) return;
  const int ratio = a.ratio;
  const std::int64_t p = a.positions[t], slot = a.slots[t];
  if (slot >= a.num_slots || (slot >= 0 && p < 0)) {
    if (c == 0) report_fault(a.err, DeviceFault::kScatterRow, slot, a.num_slots);
    return;
  }
  if (slot < 0 || (p + 1) % ratio != 0) {
    a.out[t * a.d + c] = 0.0f;
    return;
  }
  const std::int64_t width = a.width;
  const int ring = a.overlap ? 2 * ratio : ratio;
  const std::int64_t first = p + 1 - ring;
  // Slot i reads position first + i: from this batch (score + position bias) or from the ring.
  auto load = [&](int i, float& kv, float& score) {
    const std::int64_t q = first + i;
    const std::int64_t col = a.overlap && i >= ratio ? a.d + c : c;
    const std::int64_t r = compressor_input_row(a, t, q);
    if (r >= 0) {
      kv = a.kv[r * width + col];
      score = a.score[r * width + col] + a.ape[((q % ratio + ratio) % ratio) * width + col];
    } else {
      const std::int64_t row = slot * ring + (q % ring + ring) % ring;
      kv = a.state_kv[row * width + col];
      score = a.state_score[row * width + col];
    }
  };
  constexpr int kRegRing = 16;
  if (ring <= kRegRing) {
    // Small rings (CSA: 2 × 4): every slot's loads are issued together, then the same three passes
    // run from registers (one dependent load per slot and pass was ~9 us per call at batch 1).
    float kvs[kRegRing], scores[kRegRing];
#pragma unroll
    for (int i = 0; i < kRegRing; ++i)
      if (i < ring) load(i, kvs[i], scores[i]);
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kRegRing; ++i)
      if (i < ring) mx = fmaxf(mx, scores[i]);
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kRegRing; ++i)
      if (i < ring) total += expf(scores[i] - mx);
    float pooled = 0.0f;
#pragma unroll
    for (int i = 0; i < kRegRing; ++i)
      if (i < ring) pooled += kvs[i] * (expf(scores[i] - mx) / total);
    a.out[t * a.d + c] = pooled;
    return;
  }
  float kv, score;
  float max_score = -INFINITY;
  for (int i = 0; i < ring; ++i) {
    load(i, kv, score);
    max_score = fmaxf(max_score, score);
  }
  float sum = 0.0f;
  for (int i = 0; i < ring; ++i) {
    load(i, kv, score);
    sum += expf(score - max_score);
  }
  float value = 0.0f;
  for (int i = 0; i < ring; ++i) {
    load(i, kv, score);
    value += kv * (expf(score - max_score) / sum);
  }
  a.out[t * a.d + c] = value;
}

// grid (column tiles, T): row t enters its slot's ring unless a later row of the same sequence
// takes its ring row (runs after the pooling kernel, which reads the old rows).
__global__ void compressor_ring_kernel(CompressorArgs a) {
  enter_dependent_kernel();
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t t = blockIdx.y;
  if (col >= a.width) return;
  const std::int64_t slot = a.slots[t], p = a.positions[t];
  if (slot < 0 || slot >= a.num_slots || p < 0) return;  // the pooling kernel reports bad slots
  const int ring = a.overlap ? 2 * a.ratio : a.ratio;
  const std::int64_t later = t + ring;
  if (later < a.tokens && a.slots[later] == slot && a.positions[later] == p + ring) return;
  const std::int64_t row = slot * ring + p % ring;
  a.state_kv[row * a.width + col] = a.kv[t * a.width + col];
  a.state_score[row * a.width + col] = a.score[t * a.width + col] + a.ape[(p % a.ratio) * a.width + col];
}

}  // namespace

std::int64_t hc_mix_partial_floats(std::int64_t tokens, int n, std::int64_t d, bool head) {
  const int n_mix = head ? n : (2 + n) * n;
  return tokens * hc_slices(static_cast<std::int64_t>(n) * d) * (n_mix + 1);
}

void launch_hc_mix(const HcArgs& args, cudaStream_t stream) {
  if (args.x.rows == 0) return;
  const int slices = hc_slices(static_cast<std::int64_t>(args.n) * args.d);
  const int n_mix = args.head ? args.n : (2 + args.n) * args.n;
  if (!launch_hc_mix_partial_prefill(args, kHcSplit, kPartialThreads, stream)) {  // prefill: fn read per 64 tokens
    const int group = hc_partial_group(args.x.rows);
    const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>((args.x.rows + group - 1) / group),
                    static_cast<unsigned>((n_mix + kMixChunk - 1) / kMixChunk));
    launch_chained(hc_mix_partial_kernel, grid, dim3(kPartialThreads), 0, stream, args, group);
  }
  const int finish_threads = args.head ? kFinishThreads : kFinishThreads + 32;  // + the Sinkhorn warp
  launch_chained(hc_mix_finish_kernel, dim3(static_cast<unsigned>(args.x.rows)), dim3(finish_threads), 0, stream, args,
                 slices);
}

void launch_hc_post(const DevRows& f, const DevRows& residual, const float* post, const float* comb, int n,
                    std::int64_t d, const DevRows& out, cudaStream_t stream) {
  const std::int64_t total = residual.rows * d;
  if (total == 0) return;
  const dim3 grid(static_cast<unsigned>((d + kPostThreads - 1) / kPostThreads),
                  static_cast<unsigned>(std::min<std::int64_t>(residual.rows, 65535)));
  launch_chained(hc_post_kernel, grid, dim3(kPostThreads), 0, stream, f, residual, post, comb, n, d, out);
}

void launch_hc_collapse(const DevRows& x, const float* pre, int n, std::int64_t d, const DevRows& y,
                        cudaStream_t stream) {
  const std::int64_t total = x.rows * d;
  if (total == 0) return;
  const std::int64_t blocks = (total + 255) / 256;
  launch_chained(hc_collapse_kernel, static_cast<unsigned>(blocks > 65536 ? 65536 : blocks), 256, 0, stream, x, pre, n,
                 d, y);
}

void launch_engram_gate(const EngramGateArgs& args, cudaStream_t stream) {
  const std::int64_t blocks = args.x.rows * args.n;
  if (blocks == 0) return;
  launch_chained(engram_gate_kernel, static_cast<unsigned>(blocks), kHcThreads, 0, stream, args);
}

void launch_compressor(const CompressorArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return;
  const dim3 pool_grid(static_cast<unsigned>((args.d + 127) / 128), static_cast<unsigned>(args.tokens));
  launch_chained(compressor_pool_kernel, pool_grid, 128, 0, stream, args);
  const dim3 ring_grid(static_cast<unsigned>((args.width + 127) / 128), static_cast<unsigned>(args.tokens));
  launch_chained(compressor_ring_kernel, ring_grid, 128, 0, stream, args);
}

}  // namespace deepinfer::ops::cuda
