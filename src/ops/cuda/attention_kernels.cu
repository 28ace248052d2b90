// Sparse MQA attention with sinks (online softmax over blocks of the index list, optional split of
// the list across thread blocks for decode parallelism), the lightning indexer's scores and the
// visibility-masked top-k (radix select + bitonic sort, ties to the lower index).
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

// grid (key tiles of 64, T): out[t, s] = Σ_h w[t, h] · ReLU(q[t, h] · k[row_base[t] + s]) for
// s < num_keys[t], -inf beyond.
__global__ void __launch_bounds__(256) indexer_scores_kernel(IndexerArgs a) {
  extern __shared__ float smem[];
  float* q_s = smem;                   // [H][d]
  float* k_s = q_s + a.heads * a.d;    // [d][65]
  float* red_s = k_s + a.d * 65;       // [4][64]
  const std::int64_t t = blockIdx.y;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x) * 64;
  const std::int64_t count = a.num_keys[t], base = a.row_base[t];
  if (s0 >= count) {  // a tile past this token's keys (shorter sequence or batch padding)
    for (int j = threadIdx.x; j < 64; j += 256)
      if (s0 + j < a.width) a.out[t * a.out_stride + s0 + j] = -INFINITY;
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < a.heads * a.d; i += 256) q_s[i] = load_elem(a.q, t * a.heads + i / a.d, i % a.d);
  for (int j = warp; j < 64; j += 8) {
    const std::int64_t s = s0 + j;
    std::int64_t phys = -1;
    if (s < count) {
      phys = physical_row(a.keys, base + s);
      if (phys < 0 && lane == 0) report_fault(a.err, DeviceFault::kPageTable, base + s, a.keys.rows.rows);
    }
    for (int c = lane; c < a.d; c += 32) k_s[c * 65 + j] = phys >= 0 ? load_elem(a.keys.rows, phys, c) : 0.0f;
  }
  __syncthreads();
  const int j = threadIdx.x % 64, g = threadIdx.x / 64;
  const float* w = a.weights + t * a.heads;
  float score = 0.0f;
  for (int h = g; h < a.heads; h += 4) {
    float dot = 0.0f;
    for (int c = 0; c < a.d; ++c) dot = fmaf(q_s[h * a.d + c], k_s[c * 65 + j], dot);
    score += w[h] * fmaxf(dot, 0.0f);
  }
  red_s[g * 64 + j] = score;
  __syncthreads();
  if (g == 0 && s0 + j < a.width)
    a.out[t * a.out_stride + s0 + j] =
        s0 + j < count ? ((red_s[j] + red_s[64 + j]) + red_s[128 + j]) + red_s[192 + j] : -INFINITY;
}

// Order-preserving key of a score; -0 and +0 are one key (they compare equal on the CPU, where
// the lower index then wins).
__device__ __forceinline__ std::uint32_t order_key(float f) {
  const std::uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kTopkThreads = 512;

// One block per row: radix-select the k-th largest key, collect everything above it plus the
// lowest-index ties, then bitonic-sort (score desc, index asc).
__global__ void __launch_bounds__(kTopkThreads) topk_visible_kernel(TopkArgs a) {
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
  if (take > 0) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kTopkThreads) hist[i] = 0;
      __syncthreads();
      const std::uint32_t prefix = s_prefix, mask = s_mask;
      for (std::int64_t i = tid; i < visible; i += kTopkThreads) {
        const std::uint32_t key = order_key(row[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
      }
      __syncthreads();
      if (tid == 0) {
        int cum = 0;
        for (int d = 255; d >= 0; --d) {
          if (cum + hist[d] >= s_remaining) {
            s_remaining -= cum;
            s_prefix = prefix | (static_cast<std::uint32_t>(d) << shift);
            s_mask = mask | (255u << shift);
            break;
          }
          cum += hist[d];
        }
      }
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
    __syncthreads();
    // Bitonic sort, descending.
    for (int size = 2; size <= a.pow2; size <<= 1) {
      for (int stride = size / 2; stride > 0; stride >>= 1) {
        for (int i = tid; i < a.pow2; i += kTopkThreads) {
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
  sparse_attention_kernel<<<grid, kAttnThreads, smem, stream>>>(args);
  if (args.splits > 1)
    attention_combine_kernel<<<static_cast<unsigned>(tokens * args.heads), 256, 0, stream>>>(args);
}

std::size_t indexer_smem_bytes(int heads, int d) {
  return static_cast<std::size_t>(heads * d + d * 65 + 4 * 64) * sizeof(float);
}

void launch_indexer_scores(const IndexerArgs& args, std::int64_t tokens, cudaStream_t stream) {
  if (tokens == 0 || args.width == 0) return;
  const std::size_t smem = indexer_smem_bytes(args.heads, args.d);
  cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((args.width + 63) / 64), static_cast<unsigned>(tokens));
  indexer_scores_kernel<<<grid, 256, smem, stream>>>(args);
}

void launch_candidate_mask(const CandidateArgs& args, std::int64_t rows, cudaStream_t stream) {
  if (rows == 0 || args.n == 0) return;
  candidate_block_max_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(args);
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
  candidate_fill_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(args);
}

void launch_topk_visible(const TopkArgs& args, std::int64_t rows, cudaStream_t stream) {
  if (rows == 0 || args.k == 0) return;
  const std::size_t smem = static_cast<std::size_t>(args.pow2) * sizeof(unsigned long long);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(topk_visible_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  topk_visible_kernel<<<static_cast<unsigned>(rows), kTopkThreads, smem, stream>>>(args);
}

}  // namespace deepinfer::ops::cuda
