// Building blocks of the device sampler (sampling_kernels.cu): a logits row split over a
// thread-block cluster, each block a contiguous slice of the vocabulary; block reductions combined
// over distributed shared memory in rank order (the same result whatever the split), the n-th
// matching id, the MSB-first radix select over float order keys (8 bits a pass) and the wide
// histogram select (12 bits a pass, 32 in three). Included by one .cu only.
#pragma once

#include <cooperative_groups.h>

#include <climits>
#include <cstdint>

#include "ops/cuda/sampling_launch.h"
#include "ops/sampling_math.h"

namespace deepinfer::ops::cuda::row_cluster {

namespace cg = cooperative_groups;
namespace sm = ::deepinfer::ops::sampling;
using u64 = unsigned long long;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
// top-k up to this many ids: the k survivors are gathered on rank 0, which finishes the row alone
// (min-p, top-p over the sorted survivors, an exact Gumbel race) without further passes over the row.
constexpr int kCompact = 1024;
// The histogram select's bins (its first two levels; the last takes 8 bits), in segments of 256
// so that a cluster merges 16 segment sums, then the 256 bins of one segment, not all 4096.
constexpr int kHistBits = 12;
constexpr int kHistBins = 1 << kHistBits;
constexpr int kSegBins = 256;
constexpr int kSegs = kHistBins / kSegBins;
// Dynamic shared memory: two histograms (a ring, as the radix passes').
constexpr int kDynamicShared = 2 * kHistBins * static_cast<int>(sizeof(u64));
extern __shared__ u64 row_cluster_hist[];

struct Shared {
  // Per-warp partials of a block reduction, then the block's value in a ring of two cluster
  // slots (a slot is rewritten two reductions later, after every block passed the barrier of the
  // reduction in between, so no block still reads it).
  double red_d[kWarps];
  int red_i[kWarps];
  u64 red_u[kWarps];
  double slot_d[2];
  int slot_i[2];
  u64 slot_u[2];
  u64 hist[2][256];  // radix passes alternate, for the same reason
  u64 total[256];    // the cluster's histogram of the current pass
  int top_ids[kMaxSampleTop];  // rank 0 collects the top list
  float top_vals[kMaxSampleTop];
  int top_count;
  int found[2];  // nth_match's result (rank 0's copy is the cluster's)
  // The top-k survivors on rank 0: (order key << 32 | ~id), sorted best first, and their masses.
  u64 cand[kCompact];
  u64 cand_mass[kCompact];
  int cand_count;
  int cand_cut;
  int sel_digit;
  u64 sel_above;
  u64 seg[2][kSegs];  // this block's segment sums of the histogram select (ring of two)
  u64 seg_total[kSegs];
  int sel_seg;
  u64 sel_seg_above;
  u64 sel_total;
  double lse;
};

// Where this block works: the cluster of its row, its slice [begin, end) of the vocabulary.
struct Ctx {
  cg::cluster_group cluster;
  unsigned rank;
  unsigned size;
  int begin;
  int end;
  int phase;       // cluster reductions so far (every thread of the cluster runs the same sequence)
  int hist_phase;  // histogram selects so far
  int hist_fill;   // how hist_select fills its histogram (SampleLaunch::histogram_fill)
};

// f(v, x[v]) for every id v of this block's slice, thread t taking ids begin + t + i · kThreads in
// ascending order, kBatch loads in flight before any is used: a pass over a row is bound by load
// latency (with one load in flight per thread, or a load waiting behind the previous id's store, a
// block walking 129,280 ids waits 252 latencies per thread).
constexpr int kBatch = 8;
template <typename F>
__device__ __forceinline__ void for_slice(const float* x, const Ctx& c, F f) {
  for (int base = c.begin + static_cast<int>(threadIdx.x); base < c.end; base += kBatch * kThreads) {
    float vals[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int v = base + j * kThreads;
      vals[j] = v < c.end ? x[v] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int v = base + j * kThreads;
      if (v < c.end) f(v, vals[j]);
    }
  }
}

__device__ __forceinline__ float key_value(std::uint32_t key) {
  const std::uint32_t b = (key & 0x80000000u) != 0 ? (key & 0x7FFFFFFFu) : ~key;
  return __uint_as_float(b);
}

template <typename T>
__device__ __forceinline__ T* remote(Ctx& c, T* local, unsigned rank) {
  return c.cluster.map_shared_rank(local, rank);
}

// fold(value at `local` on rank r) for the ranks of the cluster in order, 4 loads issued before any
// is used: a merge waits 1 DSMEM latency per 4 ranks instead of 1 per rank.
template <typename T, typename Fold>
__device__ __forceinline__ void for_ranks(Ctx& c, T* local, Fold fold) {
  const int size = static_cast<int>(c.size);
  for (int r0 = 0; r0 < size; r0 += 4) {
    T v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (r0 + j < size) v[j] = *remote(c, local, static_cast<unsigned>(r0 + j));
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (r0 + j < size) fold(v[j]);
    }
  }
}
__device__ __forceinline__ u64 rank_sum(Ctx& c, u64* local) {
  u64 t = 0;
  for_ranks(c, local, [&](u64 x) { t += x; });
  return t;
}

// ---- cluster reductions (every thread of the cluster calls; all get the result) ---------------------
__device__ inline u64 cluster_sum(u64 x, Shared& sh, Ctx& c) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFull, x, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.red_u[threadIdx.x / 32] = x;
  __syncthreads();
  const int s = c.phase++ & 1;
  if (threadIdx.x == 0) {
    u64 t = 0;
    for (int i = 0; i < kWarps; ++i) t += sh.red_u[i];
    sh.slot_u[s] = t;
  }
  c.cluster.sync();
  return rank_sum(c, &sh.slot_u[s]);
}

// Rank 0's value (thread 0's) for every thread of the cluster.
__device__ inline int cluster_broadcast(int x, Shared& sh, Ctx& c) {
  const int s = c.phase++ & 1;
  if (c.rank == 0 && threadIdx.x == 0) sh.slot_i[s] = x;
  c.cluster.sync();
  return *remote(c, &sh.slot_i[s], 0);
}

// Max of finite-or-inf floats (NaN ignored, as std::max with the running value first).
__device__ inline float cluster_fmax(float x, Shared& sh, Ctx& c) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.red_d[threadIdx.x / 32] = x;
  __syncthreads();
  const int s = c.phase++ & 1;
  if (threadIdx.x == 0) {
    float m = -INFINITY;
    for (int i = 0; i < kWarps; ++i) m = fmaxf(m, static_cast<float>(sh.red_d[i]));
    sh.slot_d[s] = m;
  }
  c.cluster.sync();
  float m = -INFINITY;
  for (unsigned r = 0; r < c.size; ++r) m = fmaxf(m, static_cast<float>(*remote(c, &sh.slot_d[s], r)));
  return m;
}

// cluster_sum and cluster_fmax behind one cluster barrier.
__device__ inline void cluster_sum_fmax(u64 x, float m, u64& sum, float& max_value, Shared& sh, Ctx& c) {
  for (int o = 16; o > 0; o >>= 1) {
    x += __shfl_xor_sync(kFull, x, o);
    m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    sh.red_u[threadIdx.x / 32] = x;
    sh.red_d[threadIdx.x / 32] = m;
  }
  __syncthreads();
  const int s = c.phase++ & 1;
  if (threadIdx.x == 0) {
    u64 t = 0;
    float mm = -INFINITY;
    for (int i = 0; i < kWarps; ++i) {
      t += sh.red_u[i];
      mm = fmaxf(mm, static_cast<float>(sh.red_d[i]));
    }
    sh.slot_u[s] = t;
    sh.slot_d[s] = mm;
  }
  c.cluster.sync();
  sum = rank_sum(c, &sh.slot_u[s]);
  float mm = -INFINITY;
  for_ranks(c, &sh.slot_d[s], [&](double x) { mm = fmaxf(mm, static_cast<float>(x)); });
  max_value = mm;
}

// Best (score, id): higher score, then lower id; id < 0 is empty.
__device__ __forceinline__ bool better(double s, int i, double bs, int bi) {
  return i >= 0 && (bi < 0 || s > bs || (s == bs && i < bi));
}

// The block's best (score, id) into s and i of every thread.
__device__ inline void block_best(double& s, int& i, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const double os = __shfl_xor_sync(kFull, s, o);
    const int oi = __shfl_xor_sync(kFull, i, o);
    if (better(os, oi, s, i)) {
      s = os;
      i = oi;
    }
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    sh.red_d[threadIdx.x / 32] = s;
    sh.red_i[threadIdx.x / 32] = i;
  }
  __syncthreads();
  s = sh.red_d[0];
  i = sh.red_i[0];
  for (int w = 1; w < kWarps; ++w) {
    if (better(sh.red_d[w], sh.red_i[w], s, i)) {
      s = sh.red_d[w];
      i = sh.red_i[w];
    }
  }
}

__device__ inline int cluster_best(double s, int i, Shared& sh, Ctx& c, double* best_score = nullptr) {
  block_best(s, i, sh);
  const int slot = c.phase++ & 1;
  if (threadIdx.x == 0) {
    sh.slot_d[slot] = s;
    sh.slot_i[slot] = i;
  }
  c.cluster.sync();
  double bs = 0.0;
  int bi = -1;
  const int size = static_cast<int>(c.size);
  for (int r0 = 0; r0 < size; r0 += 4) {  // as for_ranks, over (score, id) pairs
    double rs[4];
    int ri[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (r0 + j < size) {
        rs[j] = *remote(c, &sh.slot_d[slot], static_cast<unsigned>(r0 + j));
        ri[j] = *remote(c, &sh.slot_i[slot], static_cast<unsigned>(r0 + j));
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (r0 + j < size && better(rs[j], ri[j], bs, bi)) {
        bs = rs[j];
        bi = ri[j];
      }
    }
  }
  if (best_score != nullptr) *best_score = bs;
  return bi;
}

// Argmax of x over the row with the host's rule (strict >, so the lowest id wins ties, NaN and
// -inf never win; -1 when nothing beats -inf).
__device__ inline int cluster_argmax(const float* x, Shared& sh, Ctx& c) {
  float bv = -INFINITY;
  int bi = -1;
  for_slice(x, c, [&](int v, float y) {
    if (y > bv) {
      bv = y;
      bi = v;
    }
  });
  return cluster_best(bi >= 0 ? static_cast<double>(bv) : -INFINITY, bi, sh, c);
}

// The id of the n-th (1-based) id in ascending order with pred(id), or INT_MAX when fewer match.
// Each thread owns a contiguous run of its block's slice: one scan of the run counts suffices.
template <typename Pred>
__device__ inline int nth_match(long long n, Pred pred, Shared& sh, Ctx& c) {
  const int per = (c.end - c.begin + kThreads - 1) / kThreads;
  const int begin = min(c.end, c.begin + static_cast<int>(threadIdx.x) * per), end = min(c.end, begin + per);
  int count = 0;
  for (int v = begin; v < end; ++v) count += pred(v) ? 1 : 0;
  const int fs = c.phase & 1;  // the result slot (the reduction below advances the phase)
  if (c.rank == 0 && threadIdx.x == 0) sh.found[fs] = INT_MAX;
  // Exclusive scan of the counts in (block, thread) order.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = count;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == 31) sh.red_i[warp] = incl;
  __syncthreads();
  long long before = incl - count;
  for (int w = 0; w < warp; ++w) before += sh.red_i[w];
  int block_total = 0;
  for (int w = 0; w < kWarps; ++w) block_total += sh.red_i[w];
  __syncthreads();
  const int s = c.phase++ & 1;
  if (threadIdx.x == 0) sh.slot_u[s] = static_cast<u64>(block_total);
  c.cluster.sync();  // also orders rank 0's reset of the result slot before any write to it
  for (unsigned r = 0; r < c.rank; ++r) before += static_cast<long long>(*remote(c, &sh.slot_u[s], r));
  if (before < n && before + count >= n) {
    long long k = before;
    for (int v = begin; v < end; ++v) {
      if (pred(v) && ++k == n) {
        *remote(c, &sh.found[fs], 0) = v;
        break;
      }
    }
  }
  c.cluster.sync();
  return *remote(c, &sh.found[fs], 0);
}

// The walks over 256 bins from the top: lane l of warp 0 takes bins 255 - 8l down to 248 - 8l and
// starts from the sum of the bins above its range (an exclusive scan over the lanes).
__device__ inline u64 lane_bins_above(const u64* bins, int lane) {
  u64 local = 0;
  for (int j = 0; j < 8; ++j) local += bins[255 - 8 * lane - j];
  u64 incl = local;
  for (int o = 1; o < 32; o <<= 1) {
    const u64 y = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += y;
  }
  return incl - local;
}

// MSB-first radix select over the 32-bit order keys of the ids with in(v): the largest key K
// such that reached(weight of ids with key >= K). `above` gets the weight of the keys > K.
// kUnit: every weight is 1 (a count), so a group's sum is its population.
template <bool kUnit, typename In, typename Key, typename Weight, typename Reached>
__device__ std::uint32_t radix_select(In in, Key key, Weight weight, Reached reached, u64& above, Shared& sh, Ctx& c) {
  std::uint32_t prefix = 0;
  above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const int h = (shift / 8) & 1;
    u64* hist = sh.hist[h];
    for (int i = threadIdx.x; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    const std::uint32_t high = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
    // A row's logits share a few exponent bytes, so one atomic per id would pile onto the same
    // bins: the lanes of a warp with the same digit add their weights first, one atomic per group.
    const int lane = threadIdx.x % 32;
    for (int base = c.begin; base < c.end; base += kThreads) {
      const int v = base + static_cast<int>(threadIdx.x);
      std::uint32_t digit = 256;  // none
      u64 w = 0;
      if (v < c.end && in(v)) {
        const std::uint32_t k = key(v);
        if ((k & high) == (prefix & high)) {
          digit = (k >> shift) & 255u;
          w = weight(v);
        }
      }
      const unsigned peers = __match_any_sync(kFull, digit);
      u64 sum = 0;
      if (kUnit) {
        sum = static_cast<u64>(__popc(peers));
      } else {
        for (int j = 0; j < 32; ++j) {
          const u64 wj = __shfl_sync(kFull, w, j);
          if ((peers >> j) & 1u) sum += wj;
        }
      }
      if (digit < 256 && __ffs(peers) - 1 == lane) atomicAdd(&hist[digit], sum);
    }
    c.cluster.sync();  // every block's histogram of this pass is complete
    for (int i = threadIdx.x; i < 256; i += kThreads) {
      u64 bin = 0;
      for (unsigned r = 0; r < c.size; ++r) bin += remote(c, hist, r)[i];
      sh.total[i] = bin;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // The first digit from the top (255 down to 1; else 0) whose bin completes the target, as
      // a sequential walk finds it: lane l walks digits 255 - 8l down to 248 - 8l, starting from
      // the exact sum of the bins above its range; the lowest lane with a hit has the answer.
      u64 cum = above + lane_bins_above(sh.total, lane);
      int hit = -1;
      u64 hit_cum = 0;
      for (int j = 0; j < 8; ++j) {
        const int d = 255 - 8 * lane - j;
        if (d == 0 || reached(cum + sh.total[d])) {
          hit = d;
          hit_cum = cum;
          break;
        }
        cum += sh.total[d];
      }
      const unsigned hits = __ballot_sync(kFull, hit >= 0);  // lane 31 hits at digit 0 at the latest
      if (lane == __ffs(hits) - 1) {
        sh.sel_digit = hit;
        sh.sel_above = hit_cum;
      }
    }
    __syncthreads();
    prefix |= static_cast<std::uint32_t>(sh.sel_digit) << shift;
    above = sh.sel_above;
    __syncthreads();  // sel_* are rewritten by the next pass
  }
  return prefix;
}

// A 64-bit shared atomicAdd is a compare-and-swap loop on sm_90 (SASS ATOMS.CAST.SPIN.64): the lanes
// and warps adding to one bin succeed one per ~60-cycle round trip. Rows with heavy ties (a few
// distinct logits, bf16-rounded values at the last level) put a block's whole slice on a few bins.
constexpr std::uint32_t kNoBin = 0xFFFFFFFFu;

// *bin += w by 32-bit shared atomics (native ATOMS.ADD: no compare-and-swap retries). The high word's
// add does not wait for the low word's; the low word's returns its old value and a wrap adds the
// carry, so once every add is done the two little-endian words hold the exact 64-bit sum (read only
// after a barrier).
__device__ __forceinline__ void hist_add_words(u64* bin, u64 w) {
  auto* word = reinterpret_cast<unsigned*>(bin);
  const auto lo = static_cast<unsigned>(w);
  const auto hi = static_cast<unsigned>(w >> 32);
  if (hi != 0) atomicAdd(&word[1], hi);
  if (lo != 0 && atomicAdd(&word[0], lo) > ~lo) atomicAdd(&word[1], 1u);  // old + lo >= 2^32
}

// hist_select's fill with few atomics: each thread sums the weights of consecutive ids of its own
// (for_slice's ids and load order) that fall in one bin in a register and adds that run when the
// bin changes, by 32-bit atomics; the last runs after the walk.
// A tied level (all of a block's ids in one bin) costs one add per thread instead of one contended
// compare-and-swap per id; no id waits on more shared-memory round trips than with the 64-bit add (one,
// plus a second only on a low-word wrap, against LDS + CAS) and none retries. (Runs summed per warp
// before the add measured slower: 234.7 vs 159.4 us for top-k + top-p at 32 rows.)
template <typename In, typename Weight>
__device__ void hist_fill_runs(const float* x, In in, Weight weight, std::uint32_t prefix, std::uint32_t high,
                               int shift, std::uint32_t bin_mask, u64* hist, const Ctx& c) {
  std::uint32_t run_bin = kNoBin;
  u64 run_w = 0;
  for (int base = c.begin; base < c.end; base += kBatch * kThreads) {  // block-uniform trip count
    float vals[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int v = base + static_cast<int>(threadIdx.x) + j * kThreads;
      vals[j] = v < c.end ? x[v] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int v = base + static_cast<int>(threadIdx.x) + j * kThreads;
      std::uint32_t bin = kNoBin;
      u64 wt = 0;
      if (v < c.end && in(v, vals[j])) {
        const std::uint32_t k = sm::order_key(vals[j]);
        if ((k & high) == (prefix & high)) {
          wt = weight(v, vals[j]);
          if (wt != 0) bin = (k >> shift) & bin_mask;
        }
      }
      const bool flush = bin != kNoBin && bin != run_bin && run_bin != kNoBin;
      if (flush) hist_add_words(&hist[run_bin], run_w);
      if (bin != kNoBin) {
        run_w = bin == run_bin ? run_w + wt : wt;
        run_bin = bin;
      }
    }
  }
  if (run_bin != kNoBin) hist_add_words(&hist[run_bin], run_w);
}

// The result of a histogram select: the key bits known so far (top-aligned), the weight of the ids
// ranked above the picked bin (the incoming `above` included), the picked bin's weight, and the
// incoming `above` plus the weight of every id with the incoming prefix (the level's total).
struct HistPick {
  bool found;
  std::uint32_t prefix;
  u64 above;
  u64 bin;
  u64 total;
};

// One level of a select over the order keys of x: among the ids with in(v, x[v]) whose key starts
// with the `known` top bits of `prefix`, the weights weight(v, x[v]) histogrammed by the next `bits`
// key bits (8 or 12); the pick is the first bin from the top with weight > 0 and reached(above +
// weights of the bins down to it, level total) — where a sequential walk over the ids ranked best
// first (reached being monotone in its first argument) first reaches the target. found is false
// when no bin does (then nothing is picked). Each block fills its own histogram (shared atomics;
// integer sums, any order) and its segment sums; the cluster merges the 16 segment sums, then the
// 256 bins of the picked segment.
template <typename In, typename Weight, typename Reached>
__device__ HistPick hist_select(const float* x, In in, Weight weight, Reached reached, std::uint32_t prefix, int known,
                                int bits, u64 above, Shared& sh, Ctx& c) {
  const int h = c.hist_phase++ & 1;
  u64* hist = row_cluster_hist + h * kHistBins;
  const int bins = 1 << bits;
  const int segs = bins / kSegBins;
  for (int i = threadIdx.x; i < bins; i += kThreads) hist[i] = 0;
  __syncthreads();
  const int shift = 32 - known - bits;
  const std::uint32_t high = known == 0 ? 0u : (0xFFFFFFFFu << (32 - known));
  if (c.hist_fill == 1) {
    hist_fill_runs(x, in, weight, prefix, high, shift, static_cast<std::uint32_t>(bins - 1), hist, c);
  } else {
    for_slice(x, c, [&](int v, float y) {
      if (!in(v, y)) return;
      const std::uint32_t k = sm::order_key(y);
      if ((k & high) != (prefix & high)) return;
      const u64 wt = weight(v, y);
      if (wt != 0) atomicAdd(&hist[(k >> shift) & static_cast<std::uint32_t>(bins - 1)], wt);
    });
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (warp < segs) {
    u64 s = 0;
    for (int i = lane; i < kSegBins; i += 32) s += hist[warp * kSegBins + i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kFull, s, o);
    if (lane == 0) sh.seg[h][warp] = s;
  }
  c.cluster.sync();  // every block's histogram and segment sums are complete
  if (static_cast<int>(threadIdx.x) < segs) {
    sh.seg_total[threadIdx.x] = rank_sum(c, &sh.seg[h][threadIdx.x]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 total = above;
    for (int s = 0; s < segs; ++s) total += sh.seg_total[s];
    u64 cum = above;
    int pick = -1;
    for (int s = segs - 1; s >= 0; --s) {
      // A segment holds the first reaching bin iff its last cumulative sum reaches (monotone).
      if (sh.seg_total[s] > 0 && reached(cum + sh.seg_total[s], total)) {
        pick = s;
        break;
      }
      cum += sh.seg_total[s];
    }
    sh.sel_seg = pick;
    sh.sel_seg_above = cum;
    sh.sel_total = total;
  }
  __syncthreads();
  const int seg = sh.sel_seg;
  HistPick out{false, prefix, above, 0, sh.sel_total};
  if (seg < 0) {
    __syncthreads();  // sel_* are rewritten by the next select
    return out;
  }
  if (threadIdx.x < kSegBins) {
    sh.total[threadIdx.x] = rank_sum(c, &hist[seg * kSegBins + static_cast<int>(threadIdx.x)]);
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    // As radix_select's walk: lane l takes bins 255 - 8l down to 248 - 8l from the exact sum of the
    // bins above its range; the lowest lane with a hit has the first reaching bin.
    const u64 total = sh.sel_total;
    u64 cum = sh.sel_seg_above + lane_bins_above(sh.total, lane);
    int hit = -1;
    u64 hit_cum = 0;
    for (int j = 0; j < 8; ++j) {
      const int d = 255 - 8 * lane - j;
      if (sh.total[d] > 0 && reached(cum + sh.total[d], total)) {
        hit = d;
        hit_cum = cum;
        break;
      }
      cum += sh.total[d];
    }
    const unsigned hits = __ballot_sync(kFull, hit >= 0);
    if (hits == 0 && lane == 0) sh.sel_digit = -1;
    if (hits != 0 && lane == __ffs(hits) - 1) {
      sh.sel_digit = hit;
      sh.sel_above = hit_cum;
    }
  }
  __syncthreads();
  const int d = sh.sel_digit;
  if (d >= 0) {
    out.found = true;
    out.prefix = prefix | (static_cast<std::uint32_t>(seg * kSegBins + d) << shift);
    out.above = sh.sel_above;
    out.bin = sh.total[d];
  }
  __syncthreads();  // sel_* and total are rewritten by the next select
  return out;
}

}  // namespace deepinfer::ops::cuda::row_cluster
