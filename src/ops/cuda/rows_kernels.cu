// Row-wise CUDA kernels: fill/convert, embedding and row gathers/scatters, elementwise ops,
// RMSNorm, RoPE, Hadamard, FP8/FP4 fake quant and argmax. One thread block or warp per row where
// the row is reduced, so a row's result never depends on the other rows.
#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kNormRegs = 8;  // row values per thread held in registers by rms_norm_kernel

int grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

__global__ void fill_kernel(DevRows m, float value) {
  enter_dependent_kernel();
  const std::int64_t n = m.rows * m.width;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    store_elem(m, i / m.width, i % m.width, value);
}

__global__ void convert_kernel(DevRows src, DevRows dst) {
  enter_dependent_kernel();
  const std::int64_t n = src.rows * src.width;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / src.width, c = i % src.width;
    store_elem(dst, r, c, load_elem(src, r, c));
  }
}

constexpr int kCopyBatch = 8;                              // loads in flight per thread
constexpr std::int64_t kCopyChunk = kCopyBatch * kThreads;  // row elements per block (grid y)

// Copies a row's width elements from src row sr to dst rows dr, dr + 1, ... (copies of them); block
// y takes chunks y, y + gridDim.y, ... of kCopyChunk elements, each thread 8 loads (raw bits) in
// flight before its stores: a loop of load/store pairs waits one memory latency per element, since
// the stores may alias the next loads.
__device__ __forceinline__ void copy_row(const DevRows& src, std::int64_t sr, const DevRows& dst, std::int64_t dr,
                                         std::int64_t copies) {
  constexpr int kBatch = kCopyBatch;
  const std::int64_t width = src.width, step = blockDim.x;
  for (std::int64_t i0 = blockIdx.y * kCopyChunk + threadIdx.x; i0 < width; i0 += gridDim.y * kCopyChunk) {
    std::uint32_t v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const std::int64_t i = i0 + k * step;
      v[k] = i < width ? load_bits(src, sr, i) : 0u;
    }
    for (std::int64_t c = 0; c < copies; ++c)
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const std::int64_t i = i0 + k * step;
        if (i < width) store_elem(dst, dr + c, i, bits_value(src, v[k]));
      }
  }
}

__global__ void embedding_kernel(const std::int32_t* ids, DevRows table, DevRows out, std::int64_t copies, int* err) {
  enter_dependent_kernel();
  const std::int64_t t = blockIdx.x;
  std::int32_t id = ids[t];
  if (id < 0 || id >= table.rows) {
    if (threadIdx.x == 0) report_fault(err, DeviceFault::kTokenId, id, table.rows);
    return;
  }
  copy_row(table, id, out, t * copies, copies);
}

__global__ void gather_kernel(DevRows src, const std::int32_t* rows, DevRows out, int* err) {
  enter_dependent_kernel();
  const std::int64_t r = blockIdx.x;
  const std::int32_t s = rows[r];
  if (s < 0 || s >= src.rows) {
    if (threadIdx.x == 0) report_fault(err, DeviceFault::kGatherRow, s, src.rows);
    return;
  }
  copy_row(src, s, out, r, 1);
}

__global__ void scatter_kernel(DevRows src, DevRowSource dst, const std::int32_t* rows, int* err) {
  enter_dependent_kernel();
  const std::int64_t r = blockIdx.x;
  const std::int32_t d = rows[r];
  if (d == -1) return;  // writes nowhere (batch padding, no completed group)
  if (d < 0 || d >= dst.num_rows) {
    if (threadIdx.x == 0) report_fault(err, DeviceFault::kScatterRow, d, dst.num_rows);
    return;
  }
  const std::int64_t phys = physical_row(dst, d);
  if (phys < 0) {
    if (threadIdx.x == 0) report_fault(err, DeviceFault::kPageTable, d, dst.rows.rows);
    return;
  }
  copy_row(src, r, dst.rows, phys, 1);
}

// op 0: a + b; op 1: swiglu(a = gate, b = up) with clamp `limit` (0 = none); op 2: a * s.
__global__ void binary_kernel(DevRows a, DevRows b, DevRows out, int op, float param) {
  enter_dependent_kernel();
  const std::int64_t n = a.rows * a.width;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / a.width, c = i % a.width;
    float x = load_elem(a, r, c);
    float v;
    if (op == 0) {
      v = x + load_elem(b, r, c);
    } else if (op == 1) {
      float u = load_elem(b, r, c);
      if (param > 0.0f) {
        x = fminf(x, param);
        u = fminf(fmaxf(u, -param), param);
      }
      v = x / (1.0f + expf(-x)) * u;
    } else {
      v = x * param;
    }
    store_elem(out, r, c, v);
  }
}

// The rotation of one interleaved pair, shared by rope_kernel and the fused norm so both round alike.
__device__ __forceinline__ void rotate_pair(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = x0 * c - x1 * s;
  y1 = x0 * s + x1 * c;
}

// The fused norm's rotation of column c of a row (o: its normed value; the rounded value of column c ^ 1
// comes from the neighbouring lane, so every lane of the warp calls): rope_kernel's rotation of the
// stored (rounded) values of the last rope_dim columns, the others unchanged.
__device__ __forceinline__ float rope_column(float o, std::int64_t c, std::int64_t width, int bf16, float pos,
                                             const RopeRows& rope) {
  const float mine = round_like(bf16, o);
  const float partner = __shfl_xor_sync(0xffffffffu, mine, 1);  // column c ^ 1
  const std::int64_t first = width - rope.rope_dim;
  if (c < first || c >= width) return o;
  float sn, cs, y0, y1;
  sincosf(pos * rope.inv_freq[(c - first) / 2], &sn, &cs);
  const bool even = ((c - first) & 1) == 0;
  rotate_pair(even ? mine : partner, even ? partner : mine, cs, sn, y0, y1);
  return even ? y0 : y1;
}

// One block per row. The row and the weight are loaded up front, kNormRegs values per thread, so
// their loads are in flight together (a strided loop of dependent loads was latency-bound: ~10 us
// for one 4096-wide row). Thread tid sums columns tid, tid + kNormThreads, ... in order, then the
// block sums the warps in order; hc_mix_finish_kernel's fused norm sums exactly the same way.
// kRope: then rope_kernel's rotation of the stored (rounded) values, the pair partner's value
// coming from the neighbouring lane (the row fits the registers, pairs start on even columns).
template <bool kRope>
__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(DevRows x, DevRows weight, int has_weight, float eps,
                                                                DevRows out, RopeRows rope) {
  enter_dependent_kernel();
  __shared__ float red[32];
  const std::int64_t r = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  std::uint32_t vb[kNormRegs], wb[kNormRegs];
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const std::int64_t c = tid + k * kNormThreads;
    vb[k] = c < x.width ? load_bits(x, r, c) : 0u;
    wb[k] = has_weight && c < x.width ? load_bits(weight, 0, c) : 0u;
  }
  float v[kNormRegs], w[kNormRegs];
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    v[k] = bits_value(x, vb[k]);
    w[k] = bits_value(weight, wb[k]);
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k)
    if (tid + k * kNormThreads < x.width) ss = fmaf(v[k], v[k], ss);
  const std::int64_t rest = static_cast<std::int64_t>(kNormRegs) * kNormThreads;
  for (std::int64_t c = rest + tid; !kRope && c < x.width; c += kNormThreads) {
    const float u = load_elem(x, r, c);
    ss = fmaf(u, u, ss);
  }
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(x.width) + eps);
  float pos = 0.0f;
  if (kRope) pos = static_cast<float>(rope.positions[r / rope.heads]);
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const std::int64_t c = tid + k * kNormThreads;
    float o = v[k] * inv;
    if (has_weight) o = w[k] * o;
    if (kRope) o = rope_column(o, c, x.width, out.bf16, pos, rope);
    if (c < x.width) store_elem(out, r, c, o);
  }
  // Columns past the registers (never with kRope): each is re-read by the thread that summed it
  // (out may alias x).
  for (std::int64_t c = rest + tid; !kRope && c < x.width; c += kNormThreads) {
    float o = load_elem(x, r, c) * inv;
    if (has_weight) o = load_elem(weight, 0, c) * o;
    store_elem(out, r, c, o);
  }
}

// rms_norm_kernel<true> for rows of at most kNormThreads columns (the query heads and the KV row, 512
// wide): one warp per row instead of one 512-thread block, so a batch's 64 x T head rows are not 64 x T
// blocks with two barriers each (2,048 rows: 23 -> ~7 us per call on the H200). Bit-identical to it: lane
// l holds columns l + 32 w, chunk w's squares are summed by the same xor tree as warp w of the block and
// lane 0's sum is taken, the chunk sums are added in chunk order from 0 like block_sum's; the rest is the
// same expression per column. So the choice may follow the row count: a warp walking 16 chunks is slower
// than a block per row on few rows (64 rows: ~6 vs 3.4 us), hence from kNormWarpMinRows rows only.
constexpr int kNormRowsPerBlock = 4;
constexpr std::int64_t kNormWarpMinRows = 256;
constexpr int kNormChunks = kNormThreads / 32;

__global__ void __launch_bounds__(kNormRowsPerBlock * 32) rms_norm_rope_warp_kernel(DevRows x, DevRows weight,
                                                                                   int has_weight, float eps,
                                                                                   RopeRows rope) {
  enter_dependent_kernel();
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kNormRowsPerBlock + threadIdx.x / 32;
  if (r >= x.rows) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  std::uint32_t vb[kNormChunks], wb[kNormChunks];
#pragma unroll
  for (int w = 0; w < kNormChunks; ++w) {
    const std::int64_t c = lane + 32 * w;
    vb[w] = c < x.width ? load_bits(x, r, c) : 0u;
    wb[w] = has_weight && c < x.width ? load_bits(weight, 0, c) : 0u;
  }
  float v[kNormChunks], total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormChunks; ++w) {
    v[w] = bits_value(x, vb[w]);
    if (32 * w >= x.width) continue;  // (a chunk past the row adds 0 in the block kernel)
    const float s = lane + 32 * w < x.width ? fmaf(v[w], v[w], 0.0f) : 0.0f;
    total += __shfl_sync(0xffffffffu, warp_sum(s), 0);
  }
  const float inv = 1.0f / sqrtf(total / static_cast<float>(x.width) + eps);
  const float pos = static_cast<float>(rope.positions[r / rope.heads]);
#pragma unroll
  for (int w = 0; w < kNormChunks; ++w) {
    if (32 * w >= x.width) break;
    const std::int64_t c = lane + 32 * w;
    float o = v[w] * inv;
    if (has_weight) o = bits_value(weight, wb[w]) * o;
    o = rope_column(o, c, x.width, x.bf16, pos, rope);
    if (c < x.width) store_elem(x, r, c, o);
  }
}

// One thread per (row, pair) of the rotated tail.
__global__ void rope_kernel(DevRows x, std::int64_t heads, const std::int32_t* positions, const float* inv_freq,
                            int rope_dim, int inverse) {
  enter_dependent_kernel();
  const int pairs = rope_dim / 2;
  const std::int64_t n = x.rows * pairs;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / pairs;
    const int p = static_cast<int>(i % pairs);
    const std::int64_t t = r / heads;
    const float angle = static_cast<float>(positions[t]) * inv_freq[p];
    float s, c;
    sincosf(angle, &s, &c);
    if (inverse) s = -s;
    const std::int64_t col = x.width - rope_dim + 2 * p;
    float y0, y1;
    rotate_pair(load_elem(x, r, col), load_elem(x, r, col + 1), c, s, y0, y1);
    store_elem(x, r, col, y0);
    store_elem(x, r, col + 1, y1);
  }
}

// One block per row; the row lives in shared memory through the log2(n) butterfly stages.
__global__ void hadamard_kernel(DevRows x) {
  enter_dependent_kernel();
  extern __shared__ float v[];
  const std::int64_t r = blockIdx.x;
  const int n = static_cast<int>(x.width);
  for (int i = threadIdx.x; i < n; i += blockDim.x) v[i] = load_elem(x, r, i);
  __syncthreads();
  for (int h = 1; h < n; h *= 2) {
    for (int p = threadIdx.x; p < n / 2; p += blockDim.x) {
      const int j = (p / h) * 2 * h + p % h;
      const float a = v[j];
      const float b = v[j + h];
      v[j] = a + b;
      v[j + h] = a - b;
    }
    __syncthreads();
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(n));
  for (int i = threadIdx.x; i < n; i += blockDim.x) store_elem(x, r, i, v[i] * scale);
}

// One warp per quantisation block; kind 0 = FP8 E4M3 (pow2 scale), 1 = FP4 UE8M0, 2 = FP4 E4M3 scale.
__global__ void fake_quant_kernel(DevRows x, std::int64_t col_begin, std::int64_t col_end, int block, int kind) {
  enter_dependent_kernel();
  const int lane = threadIdx.x % 32;
  const std::int64_t warp = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
  const std::int64_t blocks_per_row = (col_end - col_begin + block - 1) / block;
  const std::int64_t total = x.rows * blocks_per_row;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  for (std::int64_t w = warp; w < total; w += warps) {
    const std::int64_t r = w / blocks_per_row;
    const std::int64_t b0 = col_begin + (w % blocks_per_row) * block;
    const std::int64_t b1 = min(b0 + block, col_end);
    float amax = 0.0f;
    for (std::int64_t i = b0 + lane; i < b1; i += 32) amax = fmaxf(amax, fabsf(load_elem(x, r, i)));
    amax = warp_max(amax);
    const float s = kind == 0 ? fp8_block_scale(amax) : fp4_block_scale(amax, kind - 1);
    for (std::int64_t i = b0 + lane; i < b1; i += 32) {
      const float v = load_elem(x, r, i);
      store_elem(x, r, i, kind == 0 ? fake_fp8(v, s) : fake_fp4(v, s));
    }
  }
}

__global__ void argmax_kernel(DevRows logits, std::int32_t* out) {
  enter_dependent_kernel();
  __shared__ float best_v[32];
  __shared__ std::int64_t best_i[32];
  const std::int64_t r = blockIdx.x;
  float bv = -INFINITY;
  std::int64_t bi = -1;
  for (std::int64_t i = threadIdx.x; i < logits.width; i += blockDim.x) {
    const float v = load_elem(logits, r, i);
    if (bi < 0 || v > bv) {
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const std::int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
      bv = ov;
      bi = oi;
    }
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      if (best_i[w] >= 0 && (bi < 0 || best_v[w] > bv || (best_v[w] == bv && best_i[w] < bi))) {
        bv = best_v[w];
        bi = best_i[w];
      }
    }
    out[r] = static_cast<std::int32_t>(bi < 0 ? 0 : bi);
  }
}

}  // namespace

// Blocks per row of a row copy (grid y): one per kCopyChunk elements, at most 64.
static unsigned copy_chunks(std::int64_t width) {
  const std::int64_t chunks = (width + kCopyChunk - 1) / kCopyChunk;
  return static_cast<unsigned>(chunks < 1 ? 1 : (chunks > 64 ? 64 : chunks));
}

void launch_fill(const DevRows& m, float value, cudaStream_t stream) {
  launch_chained(fill_kernel, grid_for(m.rows * m.width), kThreads, 0, stream, m, value);
}

void launch_convert(const DevRows& src, const DevRows& dst, cudaStream_t stream) {
  launch_chained(convert_kernel, grid_for(src.rows * src.width), kThreads, 0, stream, src, dst);
}

void launch_embedding(const std::int32_t* ids, std::int64_t count, const DevRows& table, const DevRows& out,
                      std::int64_t copies, int* err, cudaStream_t stream) {
  if (count == 0) return;
  const dim3 grid(static_cast<unsigned>(count), copy_chunks(table.width));
  launch_chained(embedding_kernel, grid, kThreads, 0, stream, ids, table, out, copies, err);
}

void launch_gather_rows(const DevRows& src, const std::int32_t* rows, const DevRows& out, int* err,
                        cudaStream_t stream) {
  if (out.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(out.rows), copy_chunks(src.width));
  launch_chained(gather_kernel, grid, kThreads, 0, stream, src, rows, out, err);
}

void launch_scatter_rows(const DevRows& src, const DevRowSource& dst, const std::int32_t* rows, int* err,
                         cudaStream_t stream) {
  if (src.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(src.rows), copy_chunks(src.width));
  launch_chained(scatter_kernel, grid, kThreads, 0, stream, src, dst, rows, err);
}

void launch_binary(const DevRows& a, const DevRows& b, const DevRows& out, BinaryOp op, float param,
                   cudaStream_t stream) {
  launch_chained(binary_kernel, grid_for(a.rows * a.width), kThreads, 0, stream, a, b, out, static_cast<int>(op),
                 param);
}

void launch_rms_norm(const DevRows& x, const DevRows* weight, float eps, const DevRows& out, cudaStream_t stream) {
  if (x.rows == 0) return;
  launch_chained(rms_norm_kernel<false>, static_cast<unsigned>(x.rows), kNormThreads, 0, stream, x,
                 weight ? *weight : DevRows{}, weight ? 1 : 0, eps, out, RopeRows{});
}

bool rms_norm_rope_fits(std::int64_t width, int rope_dim) {
  return width <= static_cast<std::int64_t>(kNormRegs) * kNormThreads && rope_dim % 2 == 0 && rope_dim <= width &&
         (width - rope_dim) % 2 == 0;
}

void launch_rms_norm_rope(const DevRows& x, const DevRows* weight, float eps, const RopeRows& rope,
                          cudaStream_t stream) {
  if (x.rows == 0) return;
  if (x.width <= kNormThreads && x.rows >= kNormWarpMinRows) {  // (either kernel gives the same bits)
    const auto blocks = static_cast<unsigned>((x.rows + kNormRowsPerBlock - 1) / kNormRowsPerBlock);
    launch_chained(rms_norm_rope_warp_kernel, blocks, kNormRowsPerBlock * 32, 0, stream, x,
                   weight ? *weight : DevRows{}, weight ? 1 : 0, eps, rope);
    return;
  }
  launch_chained(rms_norm_kernel<true>, static_cast<unsigned>(x.rows), kNormThreads, 0, stream, x,
                 weight ? *weight : DevRows{}, weight ? 1 : 0, eps, x, rope);
}

void launch_rope(const DevRows& x, std::int64_t heads, const std::int32_t* positions, const float* inv_freq,
                 int rope_dim, bool inverse, cudaStream_t stream) {
  launch_chained(rope_kernel, grid_for(x.rows * (rope_dim / 2)), kThreads, 0, stream, x, heads, positions, inv_freq,
                 rope_dim, inverse ? 1 : 0);
}

void launch_hadamard(const DevRows& x, cudaStream_t stream) {
  if (x.rows == 0) return;
  const std::size_t smem = static_cast<std::size_t>(x.width) * sizeof(float);
  if (smem > 48 * 1024) cudaFuncSetAttribute(hadamard_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem));
  launch_chained(hadamard_kernel, static_cast<unsigned>(x.rows), kThreads, smem, stream, x);
}

void launch_fake_quant(const DevRows& x, std::int64_t col_begin, std::int64_t col_end, int block, int kind,
                       cudaStream_t stream) {
  const std::int64_t blocks = x.rows * ((col_end - col_begin + block - 1) / block);
  if (blocks == 0) return;
  launch_chained(fake_quant_kernel, grid_for(blocks * 32), kThreads, 0, stream, x, col_begin, col_end, block, kind);
}

// One grid row per logits row; each thread tests one bit (the mask words stay in L1/L2).
__global__ void token_mask_kernel(DevRows logits, const std::uint32_t* mask) {
  enter_dependent_kernel();
  const std::int64_t t = blockIdx.y, words = (logits.width + 31) / 32;
  auto* row = static_cast<float*>(logits.base) + t * logits.stride;
  for (std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < logits.width;
       v += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    if (((mask[t * words + (v >> 5)] >> (v & 31)) & 1u) == 0) row[v] = -INFINITY;
}

void launch_token_mask(const DevRows& logits, const std::uint32_t* mask, cudaStream_t stream) {
  if (logits.rows == 0 || logits.width == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((logits.width + kThreads - 1) / kThreads, 64));
  launch_chained(token_mask_kernel, dim3(blocks, static_cast<unsigned>(logits.rows)), kThreads, 0, stream, logits,
                 mask);
}

void launch_argmax(const DevRows& logits, std::int32_t* out, cudaStream_t stream) {
  if (logits.rows == 0) return;
  launch_chained(argmax_kernel, static_cast<unsigned>(logits.rows), kThreads, 0, stream, logits, out);
}

}  // namespace deepinfer::ops::cuda
