// mHC mixing (stream RMS, mixing dot products, Sinkhorn, collapse, post-mix, head), V4.1's
// Engram read-out gate and the KV compressor over a batch: one thread per (row, channel) pools the
// group a row completes, then each sequence's ring keeps its last rows.
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kHcThreads = 256;
constexpr int kMixChunk = 24;  // mixing sums held in registers per pass over the stream row
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

__host__ __device__ inline int hc_slices(std::int64_t width) {
  return static_cast<int>((width + kHcSplit - 1) / kHcSplit);
}

// grid (slices, T): partial[t, s, m] = Σ_{i in slice s} fn[m, i] · x[t, i] for every mix m, and
// partial[t, s, n_mix] = Σ x[t, i]² over the slice.
__global__ void __launch_bounds__(kHcThreads) hc_mix_partial_kernel(HcArgs a) {
  __shared__ float red[kHcThreads / 32][kMixChunk + 1];
  const int slice = blockIdx.x, slices = gridDim.x;
  const std::int64_t t = blockIdx.y;
  const std::int64_t width = a.n * a.d;
  const int n_mix = a.head ? a.n : (2 + a.n) * a.n;
  const std::int64_t begin = slice * kHcSplit, end = begin + kHcSplit < width ? begin + kHcSplit : width;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* out = a.partial + (t * slices + slice) * (n_mix + 1);
  for (int m0 = 0; m0 < n_mix; m0 += kMixChunk) {
    float acc[kMixChunk];
#pragma unroll
    for (int m = 0; m < kMixChunk; ++m) acc[m] = 0.0f;
    float ss = 0.0f;
    for (std::int64_t i = begin + threadIdx.x; i < end; i += kHcThreads) {
      const float xv = load_elem(a.x, t, i);
      ss = fmaf(xv, xv, ss);
#pragma unroll
      for (int m = 0; m < kMixChunk; ++m)
        if (m0 + m < n_mix) acc[m] = fmaf(a.fn[(m0 + m) * width + i], xv, acc[m]);
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
      for (int w = 0; w < kHcThreads / 32; ++w) total += red[w][threadIdx.x];
      if (threadIdx.x < kMixChunk) {
        if (m0 + static_cast<int>(threadIdx.x) < n_mix) out[m0 + threadIdx.x] = total;
      } else if (m0 == 0) {
        out[n_mix] = total;
      }
    }
    __syncthreads();
  }
}

// One block per token: sums the slices' partials in slice order, then mixes[m] = (fn[m] · x) ·
// rsqrt(mean(x²) + eps); pre (+ post, comb with Sinkhorn unless head) and y = Σ_i pre_i x_i (pre
// stored and y skipped for hc_mix).
__global__ void __launch_bounds__(kHcThreads) hc_mix_finish_kernel(HcArgs a, int slices) {
  __shared__ float mixes[kMaxMix + 1];
  __shared__ float pre[16];
  __shared__ float comb_s[16 * 16];
  const std::int64_t t = blockIdx.x;
  const std::int64_t width = a.n * a.d;
  const int n_mix = a.head ? a.n : (2 + a.n) * a.n;
  const float* part = a.partial + t * slices * (n_mix + 1);
  for (int m = threadIdx.x; m <= n_mix; m += kHcThreads) {
    float total = 0.0f;
    for (int s = 0; s < slices; ++s) total += part[s * (n_mix + 1) + m];
    mixes[m] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const float inv = 1.0f / sqrtf(mixes[n_mix] / static_cast<float>(width) + a.norm_eps);
    for (int m = 0; m < n_mix; ++m) mixes[m] *= inv;
    const int n = a.n;
    for (int i = 0; i < n; ++i) pre[i] = sigmoidf(mixes[i] * a.scale[0] + a.base[i]) + a.hc_eps;
    if (a.pre != nullptr)
      for (int i = 0; i < n; ++i) a.pre[t * n + i] = pre[i];
    if (!a.head) {
      for (int i = 0; i < n; ++i) a.post[t * n + i] = 2.0f * sigmoidf(mixes[n + i] * a.scale[1] + a.base[n + i]);
      for (int i = 0; i < n * n; ++i) comb_s[i] = mixes[2 * n + i] * a.scale[2] + a.base[2 * n + i];
      sinkhorn(comb_s, n, a.iters, a.hc_eps);
      for (int i = 0; i < n * n; ++i) a.comb[t * n * n + i] = comb_s[i];
    }
  }
  __syncthreads();
  if (a.y.base == nullptr) return;  // hc_mix: the collapse happens one site later
  for (std::int64_t c = threadIdx.x; c < a.d; c += kHcThreads) {
    float v = 0.0f;
    for (int i = 0; i < a.n; ++i) v = fmaf(pre[i], load_elem(a.x, t, i * a.d + c), v);
    store_elem(a.y, t, c, v);
  }
}

// out[t, k, i] = post[t, k] · f[t, i] + Σ_j comb[t, j, k] · residual[t, j, i].
__global__ void hc_post_kernel(DevRows f, DevRows residual, const float* post, const float* comb, int n, std::int64_t d,
                               DevRows out) {
  const std::int64_t total = residual.rows * n * d;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / (n * d);
    const int k = static_cast<int>((e / d) % n);
    const std::int64_t i = e % d;
    float s = 0.0f;
    for (int j = 0; j < n; ++j) s = fmaf(comb[(t * n + j) * n + k], load_elem(residual, t, j * d + i), s);
    store_elem(out, t, k * d + i, post[t * n + k] * load_elem(f, t, i) + s);
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
  hc_mix_partial_kernel<<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(args.x.rows)), kHcThreads, 0,
                          stream>>>(args);
  hc_mix_finish_kernel<<<static_cast<unsigned>(args.x.rows), kHcThreads, 0, stream>>>(args, slices);
}

void launch_hc_post(const DevRows& f, const DevRows& residual, const float* post, const float* comb, int n,
                    std::int64_t d, const DevRows& out, cudaStream_t stream) {
  const std::int64_t total = residual.rows * n * d;
  if (total == 0) return;
  const std::int64_t blocks = (total + 255) / 256;
  hc_post_kernel<<<static_cast<unsigned>(blocks > 65536 ? 65536 : blocks), 256, 0, stream>>>(f, residual, post, comb,
                                                                                             n, d, out);
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
