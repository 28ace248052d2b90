// mHC mixing (stream RMS, mixing dot products, Sinkhorn, collapse, post-mix, head), V4.1's
// Engram read-out gate and the KV compressor over a batch: one thread per (row, channel) pools the
// group a row completes, then each sequence's ring keeps its last rows.
#include <algorithm>

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
// (slice, token), so a decode step's few tokens still spread over many SMs (one block per token
// read its 1.5 MB of fn from one SM: ~330 us per site at batch 1). The split depends only on the
// row width, never on T, so every row sums in the same order at any batch size.
constexpr std::int64_t kHcSplit = 512;
constexpr int kPartialThreads = 512;  // one element of the slice per thread: all its loads in flight at once

__host__ __device__ inline int hc_slices(std::int64_t width) {
  return static_cast<int>((width + kHcSplit - 1) / kHcSplit);
}

// grid (slices, T): partial[t, s, m] = Σ_{i in slice s} fn[m, i] · x[t, i] for every mix m, and
// partial[t, s, n_mix] = Σ x[t, i]² over the slice.
__global__ void __launch_bounds__(kPartialThreads, 2) hc_mix_partial_kernel(HcArgs a) {
  __shared__ float red[kPartialThreads / 32][kMixChunk + 1];
  const int slice = blockIdx.x, slices = gridDim.x;
  const std::int64_t t = blockIdx.y;
  const std::int64_t width = a.n * a.d;
  const int n_mix = a.head ? a.n : (2 + a.n) * a.n;
  const std::int64_t begin = slice * kHcSplit, end = begin + kHcSplit < width ? begin + kHcSplit : width;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* out = a.partial + (t * slices + slice) * (n_mix + 1);
  // Grid z splits the mixes (kMixChunk per block) so a decode step's fn reads spread over twice the
  // SMs; each mix's partial is computed exactly as without the split. Block z = 0 writes Σ x².
  const int m_begin = static_cast<int>(blockIdx.z) * kMixChunk;
  for (int m0 = m_begin; m0 < n_mix && m0 < m_begin + kMixChunk; m0 += kMixChunk) {
    float acc[kMixChunk];
#pragma unroll
    for (int m = 0; m < kMixChunk; ++m) acc[m] = 0.0f;
    float ss = 0.0f;
    for (std::int64_t i = begin + threadIdx.x; i < end; i += kPartialThreads) {
      // Every load first (x as raw bits), so they are all in flight together.
      const std::uint32_t xb = load_bits(a.x, t, i);
      const float* fn = a.fn + m0 * width + i;
      float fv[kMixChunk];
#pragma unroll
      for (int m = 0; m < kMixChunk; ++m) fv[m] = m0 + m < n_mix ? fn[m * width] : 0.0f;
      const float xv = bits_value(a.x, xb);
      ss = fmaf(xv, xv, ss);
#pragma unroll
      for (int m = 0; m < kMixChunk; ++m) acc[m] = fmaf(fv[m], xv, acc[m]);
    }
#pragma unroll
    for (int m = 0; m < kMixChunk; ++m) {
      const float v = warp_sum(acc[m]);
      if (lane == 0) red[warp][m] = v;
    }
    const float vs = warp_sum(ss);
    if (lane == 0) red[warp][kMixChunk] = vs;
    __syncthreads();
    if (threadIdx.x <= kMixChunk) {
      float total = 0.0f;
      for (int w = 0; w < kPartialThreads / 32; ++w) total += red[w][threadIdx.x];
      if (threadIdx.x < kMixChunk) {
        if (m0 + static_cast<int>(threadIdx.x) < n_mix) out[m0 + threadIdx.x] = total;
      } else if (m0 == 0) {
        out[n_mix] = total;
      }
    }
    __syncthreads();
  }
}

// One warp runs comb's Sinkhorn for n <= 5 (lane r·n + c holds comb[r][c]). Every row / column sum
// walks its n entries in the serial reference's order through shuffles, so comb is bit-identical
// to sinkhorn() above; the n·n divisions of a pass run in parallel instead of on one thread.
template <int N>
__device__ void sinkhorn_warp(float* comb, int iters, float eps) {
  const int lane = threadIdx.x % 32;
  const int r = lane / N, c = lane % N;
  const bool live = lane < N * N;
  float v = live ? comb[lane] : 0.0f;
  auto row_sum = [&](float x) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) s += __shfl_sync(0xffffffffu, x, (r * N + j) & 31);
    return s;
  };
  auto col_sum = [&](float x) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) s += __shfl_sync(0xffffffffu, x, (j * N + c) & 31);
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
  if (live) comb[lane] = v;
}

__device__ void sinkhorn_block(float* comb, int n, int iters, float eps) {
  if (threadIdx.x >= 32) return;
  switch (n) {
    case 1: sinkhorn_warp<1>(comb, iters, eps); break;
    case 2: sinkhorn_warp<2>(comb, iters, eps); break;
    case 3: sinkhorn_warp<3>(comb, iters, eps); break;
    case 4: sinkhorn_warp<4>(comb, iters, eps); break;
    case 5: sinkhorn_warp<5>(comb, iters, eps); break;
    default:
      if (threadIdx.x == 0) sinkhorn(comb, n, iters, eps);
  }
}

constexpr int kFinishThreads = kNormThreads;  // a fused norm sums like rms_norm_kernel
constexpr int kPrefetch = 8;         // collapse columns per thread held in registers (D <= 4096 in one pass)
constexpr int kStageFloats = 4096;   // partial sums staged in shared memory per group of slices

// Loads count floats from src into shared dst with up to 8 loads in flight per thread.
__device__ __forceinline__ void stage_floats(float* dst, const float* src, int count) {
  for (int i0 = 0; i0 < count; i0 += 8 * kFinishThreads) {
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int i = i0 + k * kFinishThreads + static_cast<int>(threadIdx.x);
      v[k] = i < count ? src[i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int i = i0 + k * kFinishThreads + static_cast<int>(threadIdx.x);
      if (i < count) dst[i] = v[k];
    }
  }
}

// One block per token. The token's stream columns for the collapse are loaded first (they do not
// depend on the coefficients, so their latency hides behind the rest); then the slices' partials
// are summed in slice order, mixes[m] = (fn[m] · x) · rsqrt(mean(x²) + eps), pre (+ post, and
// comb through Sinkhorn unless head), y = Σ_i pre_i x_i (skipped for hc_mix) and, when norm_w is
// set, y ← rms_norm(y) with rms_norm_kernel's summation order (so the fusion is bit-identical to
// hc_pre followed by rms_norm).
__global__ void __launch_bounds__(kFinishThreads, 1) hc_mix_finish_kernel(HcArgs a, int slices) {
  __shared__ float stage[kStageFloats];
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
  const bool prefetch = collapse && n <= 4;
  const bool norm = a.norm_w.base != nullptr;
  // Raw bits first (load_bits): every load of the batch is in flight before any is used.
  std::uint32_t xb[kPrefetch][4], wb[kPrefetch];
  if (prefetch) {
#pragma unroll
    for (int k = 0; k < kPrefetch; ++k) {
      const std::int64_t c = tid + k * kFinishThreads;
#pragma unroll
      for (int i = 0; i < 4; ++i) xb[k][i] = (i < n && c < a.d) ? load_bits(a.x, t, i * a.d + c) : 0u;
      wb[k] = norm && c < a.d ? load_bits(a.norm_w, 0, c) : 0u;
    }
  }
  // This thread's coefficient parameters (read after the partial sums) are fetched now too.
  const float base_v = tid < n_mix ? a.base[tid] : 0.0f;
  const float scale_v = tid < n_mix ? a.scale[tid < n ? 0 : (tid < 2 * n ? 1 : 2)] : 0.0f;
  const float* part = a.partial + t * slices * per;
  const int group = kStageFloats / per;
  float total = 0.0f;
  for (int s0 = 0; s0 < slices; s0 += group) {
    const int count = min(group, slices - s0);
    stage_floats(stage, part + s0 * per, count * per);
    __syncthreads();
    if (tid < per) {
#pragma unroll 8
      for (int s = 0; s < count; ++s) total += stage[s * per + tid];
    }
    __syncthreads();
  }
  if (tid < per) mixes[tid] = total;
  __syncthreads();
  const float inv = 1.0f / sqrtf(mixes[n_mix] / static_cast<float>(width) + a.norm_eps);
  if (tid < n_mix) {
    const float mv = mixes[tid] * inv;
    if (tid < n) {
      pre[tid] = sigmoidf(mv * scale_v + base_v) + a.hc_eps;
      if (a.pre != nullptr) a.pre[t * n + tid] = pre[tid];
    } else if (tid < 2 * n) {
      a.post[t * n + tid - n] = 2.0f * sigmoidf(mv * scale_v + base_v);
    } else {
      comb_s[tid - 2 * n] = mv * scale_v + base_v;
    }
  }
  __syncthreads();
  if (!a.head) {
    sinkhorn_block(comb_s, n, a.iters, a.hc_eps);
    __syncthreads();
    for (int i = tid; i < n * n; i += kFinishThreads) a.comb[t * n * n + i] = comb_s[i];
  }
  if (!collapse) return;  // hc_mix: the collapse happens one site later
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
  ss = block_sum(ss, red);
  const float rinv = 1.0f / sqrtf(ss / static_cast<float>(a.d) + a.rms_eps);
  if (prefetch) {
#pragma unroll
    for (int k = 0; k < kPrefetch; ++k) {
      const std::int64_t c = tid + k * kFinishThreads;
      if (c < a.d) store_elem(a.y, t, c, bits_value(a.norm_w, wb[k]) * (yv[k] * rinv));
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
  if (!launch_hc_mix_partial_prefill(args, kHcSplit, kPartialThreads, stream))  // prefill: fn read per 64 tokens
    hc_mix_partial_kernel<<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(args.x.rows),
                                 static_cast<unsigned>((n_mix + kMixChunk - 1) / kMixChunk)),
                            kPartialThreads, 0, stream>>>(args);
  hc_mix_finish_kernel<<<static_cast<unsigned>(args.x.rows), kFinishThreads, 0, stream>>>(args, slices);
}

void launch_hc_post(const DevRows& f, const DevRows& residual, const float* post, const float* comb, int n,
                    std::int64_t d, const DevRows& out, cudaStream_t stream) {
  const std::int64_t total = residual.rows * d;
  if (total == 0) return;
  const dim3 grid(static_cast<unsigned>((d + kPostThreads - 1) / kPostThreads),
                  static_cast<unsigned>(std::min<std::int64_t>(residual.rows, 65535)));
  hc_post_kernel<<<grid, kPostThreads, 0, stream>>>(f, residual, post, comb, n, d, out);
}

void launch_hc_collapse(const DevRows& x, const float* pre, int n, std::int64_t d, const DevRows& y,
                        cudaStream_t stream) {
  const std::int64_t total = x.rows * d;
  if (total == 0) return;
  const std::int64_t blocks = (total + 255) / 256;
  hc_collapse_kernel<<<static_cast<unsigned>(blocks > 65536 ? 65536 : blocks), 256, 0, stream>>>(x, pre, n, d, y);
}

void launch_engram_gate(const EngramGateArgs& args, cudaStream_t stream) {
  const std::int64_t blocks = args.x.rows * args.n;
  if (blocks == 0) return;
  engram_gate_kernel<<<static_cast<unsigned>(blocks), kHcThreads, 0, stream>>>(args);
}

void launch_compressor(const CompressorArgs& args, cudaStream_t stream) {
  if (args.tokens == 0) return;
  const dim3 pool_grid(static_cast<unsigned>((args.d + 127) / 128), static_cast<unsigned>(args.tokens));
  compressor_pool_kernel<<<pool_grid, 128, 0, stream>>>(args);
  const dim3 ring_grid(static_cast<unsigned>((args.width + 127) / 128), static_cast<unsigned>(args.tokens));
  compressor_ring_kernel<<<ring_grid, 128, 0, stream>>>(args);
}

}  // namespace deepinfer::ops::cuda
