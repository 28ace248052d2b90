// Sparse MQA attention with sinks (online softmax over blocks of the index list, optional split of
// the list across thread blocks for decode parallelism), the lightning indexer's scores and the
// visibility-masked top-k (radix select + bitonic sort, ties to the lower index).
#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/device_formats.cuh"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr int kAttnThreads = 256;
constexpr int kAttnChunk = 32;   // KV rows staged in shared memory at a time
constexpr int kAttnCols = 2;     // head_dim <= 2 * kAttnThreads

// Resolves index -> (source, physical row) and stages row j of the chunk, transposed, as f32.
__device__ void stage_row(const AttentionArgs& a, std::int32_t index, float* kv_s, int j, int lane, int* valid_s) {
  if (index < 0) {
    for (int c = lane; c < a.d; c += 32) kv_s[c * (kAttnChunk + 1) + j] = 0.0f;
    if (lane == 0) valid_s[j] = 0;
    return;
  }
  int s = a.num_sources - 1;
  while (s > 0 && a.src_start[s] > index) --s;
  const std::int64_t local = index - a.src_start[s];
  std::int64_t phys = -1;
  if (index < a.src_start[a.num_sources]) phys = physical_row(a.src[s], local);
  if (phys < 0) {
    if (lane == 0) report_fault(a.err, index >= a.src_start[a.num_sources] ? DeviceFault::kAttnIndex : DeviceFault::kPageTable,
                                index, a.src_start[a.num_sources]);
    for (int c = lane; c < a.d; c += 32) kv_s[c * (kAttnChunk + 1) + j] = 0.0f;
    if (lane == 0) valid_s[j] = 0;
    return;
  }
  for (int c = lane; c < a.d; c += 32) kv_s[c * (kAttnChunk + 1) + j] = load_elem(a.src[s].rows, phys, c);
  if (lane == 0) valid_s[j] = 1;
}

__device__ void stage_chunk(const AttentionArgs& a, const std::int32_t* idx, int count, float* kv_s, int* valid_s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j = warp; j < kAttnChunk; j += kAttnThreads / 32) {
    if (j < count) {
      stage_row(a, idx[j], kv_s, j, lane, valid_s);
    } else if (lane == 0) {
      valid_s[j] = 0;
    }
  }
}

// grid (T, head groups, splits); each block keeps its heads' accumulators in registers.
__global__ void __launch_bounds__(kAttnThreads) sparse_attention_kernel(AttentionArgs a) {
  enter_dependent_kernel();
  extern __shared__ float smem[];
  const int hg = a.heads_per_cta;
  float* q_s = smem;                               // [hg][d]
  float* kv_s = q_s + hg * a.d;                    // [d][33]
  float* sc_s = kv_s + a.d * (kAttnChunk + 1);     // [hg][block]
  float* m_s = sc_s + hg * a.block;                // [hg]
  float* l_s = m_s + hg;                           // [hg]
  float* resc_s = l_s + hg;                        // [hg]
  int* valid_s = reinterpret_cast<int*>(resc_s + hg);  // [32]

  const std::int64_t t = blockIdx.x;
  const int h0 = blockIdx.y * hg;
  const int nh = min(hg, a.heads - h0);
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int32_t* idx = a.idx + t * a.idx_stride;

  for (int i = threadIdx.x; i < nh * a.d; i += kAttnThreads)
    q_s[i] = load_elem(a.q, t * a.heads + h0 + i / a.d, i % a.d);
  for (int h = threadIdx.x; h < hg; h += kAttnThreads) {
    m_s[h] = -INFINITY;
    l_s[h] = 0.0f;
  }
  float acc[16][kAttnCols];
#pragma unroll
  for (int h = 0; h < 16; ++h)
#pragma unroll
    for (int c = 0; c < kAttnCols; ++c) acc[h][c] = 0.0f;
  __syncthreads();

  const int nblocks = (a.kcount + a.block - 1) / a.block;
  const int blk_begin = split * a.blocks_per_split;
  const int blk_end = min(nblocks, blk_begin + a.blocks_per_split);
  for (int blk = blk_begin; blk < blk_end; ++blk) {
    const int b0 = blk * a.block;
    const int len = min(a.block, a.kcount - b0);
    // Pass 1: scores of every (head, row) of the block.
    int any_valid = 0;
    for (int c0 = 0; c0 < len; c0 += kAttnChunk) {
      const int count = min(kAttnChunk, len - c0);
      stage_chunk(a, idx + b0 + c0, count, kv_s, valid_s);
      __syncthreads();
      for (int h = warp; h < nh; h += kAttnThreads / 32) {
        float dot = 0.0f;
        for (int c = 0; c < a.d; ++c) dot = fmaf(q_s[h * a.d + c], kv_s[c * (kAttnChunk + 1) + lane], dot);
        if (lane < count) sc_s[h * a.block + c0 + lane] = valid_s[lane] ? dot * a.scale : -INFINITY;
      }
      any_valid |= __syncthreads_or(threadIdx.x < count ? valid_s[threadIdx.x] : 0);
    }
    if (!any_valid) continue;  // the whole block is -1: nothing changes (as in the reference)
    // Block max, rescale and probabilities, one warp per head.
    for (int h = warp; h < nh; h += kAttnThreads / 32) {
      float bm = -INFINITY;
      for (int j = lane; j < len; j += 32) bm = fmaxf(bm, sc_s[h * a.block + j]);
      bm = warp_max(bm);
      const float old_max = m_s[h];
      const float new_max = fmaxf(old_max, bm);
      if (new_max == -INFINITY) {
        for (int j = lane; j < len; j += 32) sc_s[h * a.block + j] = 0.0f;
        if (lane == 0) resc_s[h] = 1.0f;
        continue;
      }
      float sum = 0.0f;
      for (int j = lane; j < len; j += 32) {
        const float s = sc_s[h * a.block + j];
        const float p = s == -INFINITY ? 0.0f : expf(s - new_max);
        sum += p;
        sc_s[h * a.block + j] = a.round_probs ? round_bf16(p) : p;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float rescale = expf(old_max - new_max);
        resc_s[h] = rescale;
        l_s[h] = l_s[h] * rescale + sum;
        m_s[h] = new_max;
      }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 16; ++h) {
      if (h < nh) {
        const float r = resc_s[h];
#pragma unroll
        for (int c = 0; c < kAttnCols; ++c) acc[h][c] *= r;
      }
    }
    // Pass 2: P·V.
    for (int c0 = 0; c0 < len; c0 += kAttnChunk) {
      const int count = min(kAttnChunk, len - c0);
      __syncthreads();
      stage_chunk(a, idx + b0 + c0, count, kv_s, valid_s);
      __syncthreads();
      for (int j = 0; j < count; ++j) {
#pragma unroll
        for (int c = 0; c < kAttnCols; ++c) {
          const int col = threadIdx.x + c * kAttnThreads;
          if (col >= a.d) continue;
          const float v = kv_s[col * (kAttnChunk + 1) + j];
#pragma unroll
          for (int h = 0; h < 16; ++h)
            if (h < nh) acc[h][c] = fmaf(sc_s[h * a.block + c0 + j], v, acc[h][c]);
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int h = 0; h < 16; ++h) {
    if (h >= nh) continue;
    const std::int64_t row = t * a.heads + h0 + h;
    const float m = m_s[h];
    if (a.splits == 1) {
      const float denom = l_s[h] + expf(a.sinks[h0 + h] - m);
#pragma unroll
      for (int c = 0; c < kAttnCols; ++c) {
        const int col = threadIdx.x + c * kAttnThreads;
        if (col < a.d) store_elem(a.out, row, col, m == -INFINITY ? 0.0f : acc[h][c] / denom);
      }
    } else {
      const std::int64_t slot = row * a.splits + split;
      if (threadIdx.x == 0) {
        a.part_ml[slot * 2] = m;
        a.part_ml[slot * 2 + 1] = l_s[h];
      }
#pragma unroll
      for (int c = 0; c < kAttnCols; ++c) {
        const int col = threadIdx.x + c * kAttnThreads;
        if (col < a.d) a.part_acc[slot * a.d + col] = acc[h][c];
      }
    }
  }
}

// Merges the splits of one (token, head) row; the sink joins the denominator here.
__global__ void attention_combine_kernel(AttentionArgs a) {
  enter_dependent_kernel();
  const std::int64_t row = blockIdx.x;
  const int h = static_cast<int>(row % a.heads);
  float gmax = -INFINITY;
  for (int s = 0; s < a.splits; ++s) gmax = fmaxf(gmax, a.part_ml[(row * a.splits + s) * 2]);
  float denom = 0.0f;
  for (int s = 0; s < a.splits; ++s) {
    const float m = a.part_ml[(row * a.splits + s) * 2];
    if (m != -INFINITY) denom += a.part_ml[(row * a.splits + s) * 2 + 1] * expf(m - gmax);
  }
  denom += expf(a.sinks[h] - gmax);
  for (int col = threadIdx.x; col < a.d; col += blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
      const float m = a.part_ml[(row * a.splits + s) * 2];
      if (m != -INFINITY) v += a.part_acc[(row * a.splits + s) * a.d + col] * expf(m - gmax);
    }
    store_elem(a.out, row, col, gmax == -INFINITY ? 0.0f : v / denom);
  }
}

constexpr int kIdxKeys = 16;    // keys per block: a decode step's few hundred keys still fill many SMs
constexpr int kIdxGroups = 16;  // head groups per key (kIdxKeys × kIdxGroups = 256 threads)

// Shared-memory row stride of q and keys: d rounded up to float4, plus 4 floats so rows start in
// different banks; the padding columns hold zeros.
__host__ __device__ inline int indexer_row_stride(int d) { return (d + 3) / 4 * 4 + 4; }

// Stages count_rows rows of d values (row j from source row row_of(j), < 0 = zeros) into shared
// memory rows of `stride` floats, 8 loads (raw bits) in flight per thread. Element i = tid + 256·k
// is (row, column) = divmod(i, d), walked incrementally (no division per element).
template <typename RowOf>
__device__ __forceinline__ void stage_rows(float* dst, int stride, int count_rows, int d, const DevRows& src,
                                           RowOf row_of) {
  const int total = count_rows * d;
  const int step_rows = 256 / d, step_cols = 256 % d;
  int row = static_cast<int>(threadIdx.x) / d, col = static_cast<int>(threadIdx.x) % d;
  for (int i0 = threadIdx.x; i0 < total; i0 += 8 * 256) {
    std::uint32_t v[8];
    int rows[8], cols[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      rows[k] = row;
      cols[k] = col;
      const std::int64_t r = i0 + k * 256 < total ? row_of(row) : -1;
      v[k] = r >= 0 ? load_bits(src, r, col) : 0u;
      row += step_rows;
      col += step_cols;
      if (col >= d) {
        col -= d;
        ++row;
      }
    }
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (i0 + k * 256 < total) dst[rows[k] * stride + cols[k]] = bits_value(src, v[k]);
  }
}

// grid (key tiles of kIdxKeys, T): out[t, s] = Σ_h w[t, h] · ReLU(q[t, h] · k[row_base[t] + s]) for
// s < num_keys[t], -inf beyond. Thread (g, j) sums heads g, g + 16, ... of key j (dot products in
// column order, float4 shared-memory reads); the 16 group sums are added in group order, so a
// key's score depends on (heads, d) only, never on the batch.
__global__ void __launch_bounds__(256) indexer_scores_kernel(IndexerArgs a) {
  enter_dependent_kernel();
  extern __shared__ float smem[];
  const int stride = indexer_row_stride(a.d);
  float* q_s = smem;                          // [H][stride]
  float* k_s = q_s + a.heads * stride;        // [kIdxKeys][stride]
  float* red_s = k_s + kIdxKeys * stride;     // [kIdxGroups][kIdxKeys]
  const std::int64_t t = blockIdx.y;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x) * kIdxKeys;
  const std::int64_t count = a.num_keys[t], base = a.row_base[t];
  if (s0 >= count) {  // a tile past this token's keys (shorter sequence or batch padding)
    for (int j = threadIdx.x; j < kIdxKeys; j += 256)
      if (s0 + j < a.width) a.out[t * a.out_stride + s0 + j] = -INFINITY;
    return;
  }
  // Zero the padding columns (stride - d per row), then stage q and this tile's keys.
  const int pad = stride - a.d;
  for (int i = threadIdx.x; i < (a.heads + kIdxKeys) * pad; i += 256) q_s[(i / pad) * stride + a.d + i % pad] = 0.0f;
  stage_rows(q_s, stride, a.heads, a.d, a.q, [=](int h) { return t * a.heads + h; });
  stage_rows(k_s, stride, kIdxKeys, a.d, a.keys.rows, [=](int j) -> std::int64_t {
    const std::int64_t s = s0 + j;
    if (s >= count) return -1;
    const std::int64_t phys = physical_row(a.keys, base + s);
    if (phys < 0) report_fault(a.err, DeviceFault::kPageTable, base + s, a.keys.rows.rows);
    return phys;
  });
  __syncthreads();
  const int j = threadIdx.x % kIdxKeys, g = threadIdx.x / kIdxKeys;
  const float* w = a.weights + t * a.heads;
  const float4* kr = reinterpret_cast<const float4*>(k_s + j * stride);
  const int vecs = (a.d + 3) / 4;
  float score = 0.0f;
  for (int h = g; h < a.heads; h += kIdxGroups) {
    const float4* qr = reinterpret_cast<const float4*>(q_s + h * stride);
    float dot = 0.0f;
    for (int c = 0; c < vecs; ++c) {
      const float4 qv = qr[c], kv = kr[c];
      dot = fmaf(qv.x, kv.x, dot);
      dot = fmaf(qv.y, kv.y, dot);
      dot = fmaf(qv.z, kv.z, dot);
      dot = fmaf(qv.w, kv.w, dot);
    }
    score += w[h] * fmaxf(dot, 0.0f);
  }
  red_s[g * kIdxKeys + j] = score;
  __syncthreads();
  if (g == 0 && s0 + j < a.width) {
    float total = 0.0f;
    for (int gi = 0; gi < kIdxGroups; ++gi) total += red_s[gi * kIdxKeys + j];
    a.out[t * a.out_stride + s0 + j] = s0 + j < count ? total : -INFINITY;
  }
}

// Order-preserving key of a score; -0 and +0 are one key (they compare equal on the CPU, where
// the lower index then wins).
__device__ __forceinline__ std::uint32_t order_key(float f) {
  const std::uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kTopkThreads = 512;

// Warp 0 of the radix select: the highest bin d with (keys in bins above d) + hist[d] >= remaining
// (what a serial scan from bin 255 down finds). Lane l sums bins 255 - 8l down to 248 - 8l, a
// shuffle scan gives the counts above each lane's bins, and the lane holding the answer scans
// its 8 bins.
__device__ void select_bin(const int* hist, std::uint32_t prefix, std::uint32_t mask, int shift, int* remaining,
                           std::uint32_t* out_prefix, std::uint32_t* out_mask) {
  const int lane = threadIdx.x % 32;
  const int top = 255 - 8 * lane;
  int local = 0;
#pragma unroll
  for (int b = 0; b < 8; ++b) local += hist[top - b];
  int incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  const int rem = *remaining;
  int cum = incl - local;
  const bool mine = cum < rem && rem <= incl;
  __syncwarp();
  if (!mine) return;
  for (int b = 0; b < 8; ++b) {
    const int d = top - b;
    if (cum + hist[d] >= rem) {
      *remaining = rem - cum;
      *out_prefix = prefix | (static_cast<std::uint32_t>(d) << shift);
      *out_mask = mask | (255u << shift);
      return;
    }
    cum += hist[d];
  }
}

// One block per row: radix-select the k-th largest key, collect everything above it plus the
// lowest-index ties, then bitonic-sort (score desc, index asc).
__global__ void __launch_bounds__(kTopkThreads) topk_visible_kernel(TopkArgs a) {
  enter_dependent_kernel();
  extern __shared__ unsigned long long sel[];  // [pow2]
  __shared__ int hist[256];
  __shared__ unsigned int s_prefix, s_mask;
  __shared__ int s_remaining, s_gt, s_ties_taken, s_warp[kTopkThreads / 32 + 1];
  const std::int64_t t = blockIdx.x;
  const float* row = a.scores + t * a.score_stride;
  std::int32_t* out = a.out + t * a.out_stride;
  const std::int64_t pos1 = static_cast<std::int64_t>(a.positions[t]) + 1;
  const std::int64_t visible = pos1 <= 0 ? 0 : min(a.n, pos1 / a.ratio);
  const int tid = threadIdx.x;
  // Entries scored -inf are masked out (V4.1 candidate masks): they are never picked, so at most
  // the number of other visible entries is taken. -inf has the lowest order key, so the selection
  // below never reaches one when take is limited to that count.
  __shared__ int s_candidates;
  if (tid == 0) s_candidates = 0;
  __syncthreads();
  int local = 0;
  for (std::int64_t i = tid; i < visible; i += kTopkThreads) local += row[i] != -INFINITY ? 1 : 0;
  if (local > 0) atomicAdd(&s_candidates, local);
  __syncthreads();
  const int take = static_cast<int>(min(static_cast<std::int64_t>(a.k), static_cast<std::int64_t>(s_candidates)));
  for (int j = tid; j < a.pow2; j += kTopkThreads) sel[j] = 0ull;
  if (tid == 0) {
    s_prefix = 0;
    s_mask = 0;
    s_remaining = take;
    s_gt = 0;
    s_ties_taken = 0;
  }
  __syncthreads();
  if (take > 0 && take == s_candidates) {
    // Every candidate is taken (a context shorter than k): no threshold to find. The slots come in
    // any order; the sort below orders them.
    for (std::int64_t i = tid; i < visible; i += kTopkThreads) {
      const float v = row[i];
      if (v != -INFINITY)
        sel[atomicAdd(&s_gt, 1)] =
            (static_cast<unsigned long long>(order_key(v)) << 32) | (0xffffffffu - static_cast<std::uint32_t>(i));
    }
  } else if (take > 0) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kTopkThreads) hist[i] = 0;
      __syncthreads();
      const std::uint32_t prefix = s_prefix, mask = s_mask;
      for (std::int64_t i = tid; i < visible; i += kTopkThreads) {
        const std::uint32_t key = order_key(row[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
      }
      __syncthreads();
      if (tid < 32) select_bin(hist, prefix, mask, shift, &s_remaining, &s_prefix, &s_mask);
      __syncthreads();
    }
    const std::uint32_t thr = s_prefix;
    const int ties_needed = s_remaining;
    const int greater = take - ties_needed;
    for (std::int64_t i = tid; i < visible; i += kTopkThreads) {
      const std::uint32_t key = order_key(row[i]);
      if (key > thr) {
        const int slot = atomicAdd(&s_gt, 1);
        sel[slot] = (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<std::uint32_t>(i));
      }
    }
    // Ties at the threshold: the lowest indices, in index order.
    const int warp = tid / 32, lane = tid % 32;
    for (std::int64_t base = 0; base < visible; base += kTopkThreads) {
      __syncthreads();
      const int taken = s_ties_taken;
      if (taken >= ties_needed) break;
      const std::int64_t i = base + tid;
      const bool flag = i < visible && order_key(row[i]) == thr;
      const unsigned ballot = __ballot_sync(0xffffffffu, flag);
      if (lane == 0) s_warp[warp] = __popc(ballot);
      __syncthreads();
      int before = 0;
      for (int w = 0; w < warp; ++w) before += s_warp[w];
      const int rank = taken + before + __popc(ballot & ((1u << lane) - 1u));
      if (flag && rank < ties_needed)
        sel[greater + rank] = (static_cast<unsigned long long>(thr) << 32) | (0xffffffffu - static_cast<std::uint32_t>(i));
      __syncthreads();
      if (tid == 0) {
        int total = 0;
        for (int w = 0; w < kTopkThreads / 32; ++w) total += s_warp[w];
        s_ties_taken = taken + total;
      }
    }
  }
  if (take > 0) {
    __syncthreads();
    // Bitonic sort, descending, of the first pow2 >= take slots (the rest stay zero).
    int size_all = 1;
    while (size_all < take) size_all *= 2;
    for (int size = 2; size <= size_all; size <<= 1) {
      for (int stride = size / 2; stride > 0; stride >>= 1) {
        for (int i = tid; i < size_all; i += kTopkThreads) {
          const int j = i ^ stride;
          if (j > i) {
            const unsigned long long x = sel[i], y = sel[j];
            const bool descending = (i & size) == 0;
            if (descending ? x < y : x > y) {
              sel[i] = y;
              sel[j] = x;
            }
          }
        }
        __syncthreads();
      }
    }
  }
  for (int j = tid; j < a.k; j += kTopkThreads) {
    if (j < take) {
      const auto index = static_cast<std::int64_t>(0xffffffffu - static_cast<std::uint32_t>(sel[j] & 0xffffffffull));
      out[j] = static_cast<std::int32_t>(index + a.offsets[t]);
    } else {
      out[j] = -1;
    }
  }
}

// One block per row: each block's max over its visible entries (-inf where none; +inf for the
// newest visible entry's block), and the inputs that let the top-k kernel rank all blocks.
__global__ void candidate_block_max_kernel(CandidateArgs a) {
  enter_dependent_kernel();
  const std::int64_t t = blockIdx.x;
  const std::int64_t pos1 = static_cast<std::int64_t>(a.positions[t]) + 1;
  const std::int64_t visible = pos1 <= 0 ? 0 : min(a.n, pos1 / a.ratio);
  const float* row = a.scores + t * a.n;
  for (std::int64_t b = threadIdx.x; b < a.blocks; b += blockDim.x) {
    float m = -INFINITY;
    const std::int64_t end = min(visible, (b + 1) * a.block);
    for (std::int64_t s = b * a.block; s < end; ++s) m = fmaxf(m, row[s]);
    if (visible > 0 && b == (visible - 1) / a.block) m = INFINITY;  // partly filled: always kept
    a.best[t * a.blocks + b] = m;
  }
  if (threadIdx.x == 0) {
    a.all_visible[t] = static_cast<std::int32_t>(a.blocks - 1);
    a.zeros[t] = 0;
  }
}

// One block per row: -inf everywhere, then 0 over the entries of each kept block.
__global__ void candidate_fill_kernel(CandidateArgs a) {
  enter_dependent_kernel();
  const std::int64_t t = blockIdx.x;
  float* out = a.out + t * a.n;
  for (std::int64_t s = threadIdx.x; s < a.n; s += blockDim.x) out[s] = -INFINITY;
  __syncthreads();
  for (std::int64_t i = threadIdx.x; i < static_cast<std::int64_t>(a.take) * a.block; i += blockDim.x) {
    const std::int32_t b = a.picked[t * a.take + i / a.block];
    const std::int64_t s = static_cast<std::int64_t>(b) * a.block + i % a.block;
    if (b >= 0 && s < a.n) out[s] = 0.0f;
  }
}

}  // namespace

std::size_t attention_smem_bytes(int heads_per_cta, int d, int block) {
  return static_cast<std::size_t>(heads_per_cta * d + d * (kAttnChunk + 1) + heads_per_cta * block + 3 * heads_per_cta) *
             sizeof(float) +
         kAttnChunk * sizeof(int);
}

void launch_sparse_attention(const AttentionArgs& args, std::int64_t tokens, cudaStream_t stream) {
  if (tokens == 0) return;
  const std::size_t smem = attention_smem_bytes(args.heads_per_cta, args.d, args.block);
  cudaFuncSetAttribute(sparse_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((args.heads + args.heads_per_cta - 1) / args.heads_per_cta),
                  static_cast<unsigned>(args.splits));
  launch_chained(sparse_attention_kernel, grid, kAttnThreads, smem, stream, args);
  if (args.splits > 1)
    launch_chained(attention_combine_kernel, static_cast<unsigned>(tokens * args.heads), 256, 0, stream, args);
}

std::size_t indexer_smem_bytes(int heads, int d) {
  return static_cast<std::size_t>((heads + kIdxKeys) * indexer_row_stride(d) + kIdxGroups * kIdxKeys) * sizeof(float);
}

void launch_indexer_scores(const IndexerArgs& args, std::int64_t tokens, cudaStream_t stream) {
  if (tokens == 0 || args.width == 0) return;
  const std::size_t smem = indexer_smem_bytes(args.heads, args.d);
  cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((args.width + kIdxKeys - 1) / kIdxKeys), static_cast<unsigned>(tokens));
  launch_chained(indexer_scores_kernel, grid, 256, smem, stream, args);
}

void launch_candidate_mask(const CandidateArgs& args, std::int64_t rows, cudaStream_t stream) {
  if (rows == 0 || args.n == 0) return;
  launch_chained(candidate_block_max_kernel, static_cast<unsigned>(rows), 256, 0, stream, args);
  TopkArgs k;
  k.scores = args.best;
  k.score_stride = args.blocks;
  k.n = args.blocks;
  k.positions = args.all_visible;
  k.ratio = 1;
  k.k = args.take;
  k.offsets = args.zeros;
  k.pow2 = 1;
  while (k.pow2 < args.take) k.pow2 *= 2;
  k.out = args.picked;
  k.out_stride = args.take;
  launch_topk_visible(k, rows, stream);
  launch_chained(candidate_fill_kernel, static_cast<unsigned>(rows), 256, 0, stream, args);
}

void launch_topk_visible(const TopkArgs& args, std::int64_t rows, cudaStream_t stream) {
  if (rows == 0 || args.k == 0) return;
  const std::size_t smem = static_cast<std::size_t>(args.pow2) * sizeof(unsigned long long);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(topk_visible_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  launch_chained(topk_visible_kernel, static_cast<unsigned>(rows), kTopkThreads, smem, stream, args);
}

}  // namespace deepinfer::ops::cuda
