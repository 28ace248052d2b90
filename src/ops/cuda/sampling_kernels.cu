// Sampling on the device: one thread-block cluster per logits row (each block a contiguous slice
// of the vocabulary, reductions combined over distributed shared memory in rank order) makes
// engine::Sampler's whole decision (raw bans, logprob statistics, mask, bias, bans, penalties,
// temperature, top-k / min-p / top-p, Philox-seeded Gumbel-max) with the arithmetic of
// ops/sampling_math.h, so it picks the same token bit for bit. Filters are selects over order keys
// instead of sorts: top-p's cut by three histogram levels of fixed-point masses (12 + 12 + 8 key
// bits; exp once per id), top-k by levels of counts (k <= 1024: one level, then a sort of the
// gathered top bins on one block, unless ties at the k-th key overflow it). The Gumbel race takes its floor from each
// thread's best logit and skips tokens whose noise bound cannot win. Small batches use large
// clusters (up to 16 blocks a row): a row walked by one block is latency-bound.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <mutex>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/sampling_cluster.cuh"
#include "ops/cuda/sampling_launch.h"
#include "ops/sampling.h"
#include "ops/sampling_math.h"

namespace deepinfer::ops::cuda {
namespace {

namespace sm = ::deepinfer::ops::sampling;
using namespace row_cluster;  // NOLINT(google-build-using-namespace): the kernel's own building blocks

// Slices are whole multiples of this many ids: log-sum-exp chunks and Philox blocks of 4 ids never
// straddle two blocks.
constexpr int kSliceAlign = sm::kLseChunk;
// Gumbel bounds per run of 2^20 bit patterns, widened far beyond the own log's error (as the host
// sampler's table): a token is skipped only if even its bound cannot reach the best lower bound.
constexpr int kBucketShift = 20;
constexpr int kBuckets = 4096;
constexpr double kBoundMargin = 1e-9;
// Groups of 4 ids (one Philox block) a thread loads at once in the race.
constexpr int kRaceGroups = 2;

__device__ double g_bucket_lo[kBuckets];
__device__ double g_bucket_hi[kBuckets];

__global__ void init_buckets_kernel() {
  enter_dependent_kernel();
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= kBuckets) return;
  const auto first = static_cast<std::uint32_t>(static_cast<u64>(k) << kBucketShift);
  const auto last = static_cast<std::uint32_t>(((static_cast<u64>(k) + 1) << kBucketShift) - 1);
  g_bucket_lo[k] = sm::gumbel_from_bits(first) - kBoundMargin;
  g_bucket_hi[k] = sm::gumbel_from_bits(last) + kBoundMargin;
}

__device__ __forceinline__ bool valid_id(int id, int vocab) { return id >= 0 && id < vocab; }
__device__ __forceinline__ bool mine(int id, const Ctx& c) { return id >= c.begin && id < c.end; }

// Raw logprob statistics before any processing: lse (chunked sums, rank 0 adds them in order),
// the top list (on rank 0).
__device__ void raw_statistics(const float* w, int vocab, double* chunk_sums, const SampleRow& p, Shared& sh, Ctx& c) {
  float mx = -INFINITY;
  for (int v = c.begin + static_cast<int>(threadIdx.x); v < c.end; v += kThreads) mx = fmaxf(mx, w[v]);
  const float max_value = cluster_fmax(mx, sh, c);
  // Chunks of kLseChunk ids summed sequentially, the chunk sums sequentially in chunk order.
  const int first_chunk = c.begin / sm::kLseChunk;
  const int chunks = (c.end - c.begin + sm::kLseChunk - 1) / sm::kLseChunk;
  for (int i = threadIdx.x; i < chunks; i += kThreads) {
    const int ch = first_chunk + i;
    double part = 0.0;
    for (int v = ch * sm::kLseChunk; v < min(c.end, (ch + 1) * sm::kLseChunk); ++v)
      part = sm::dadd(part, sm::exp(sm::dsub(static_cast<double>(w[v]), static_cast<double>(max_value))));
    chunk_sums[ch] = part;
  }
  const int n = min(p.num_top_logprobs, kMaxSampleTop);
  if (c.rank == 0 && threadIdx.x == 0) sh.top_count = 0;
  c.cluster.sync();  // chunk sums (global) and the top count are in place
  if (c.rank == 0 && threadIdx.x == 0) {
    double total = 0.0;
    const int all = (vocab + sm::kLseChunk - 1) / sm::kLseChunk;
    for (int i = 0; i < all; ++i) total = sm::dadd(total, chunk_sums[i]);
    sh.lse = sm::dadd(static_cast<double>(max_value), sm::log(total));
  }
  // Top list: the n best non-NaN ids by (value desc, id asc).
  int taken = 0;
  if (n > 0) {
    const auto in = [&](int v) { return w[v] == w[v]; };
    const auto key = [&](int v) { return sm::order_key(w[v]); };
    u64 cnt = 0;
    for (int v = c.begin + static_cast<int>(threadIdx.x); v < c.end; v += kThreads) cnt += in(v) ? 1 : 0;
    const u64 total_in = cluster_sum(cnt, sh, c);
    const u64 want = min(static_cast<u64>(n), total_in);
    if (want > 0) {
      u64 above = 0;
      const std::uint32_t kth = radix_select<true>(in, key, [](int) { return 1ull; }, [&](u64 x) { return x >= want; },
                                                   above, sh, c);
      const int cut = nth_match(static_cast<long long>(want - above), [&](int v) { return in(v) && key(v) == kth; }, sh, c);
      int* count0 = remote(c, &sh.top_count, 0);
      int* ids0 = remote(c, sh.top_ids, 0);
      float* vals0 = remote(c, sh.top_vals, 0);
      for (int v = c.begin + static_cast<int>(threadIdx.x); v < c.end; v += kThreads) {
        if (!in(v)) continue;
        const std::uint32_t k = key(v);
        if (k > kth || (k == kth && v <= cut)) {
          const int slot = atomicAdd(count0, 1);
          ids0[slot] = v;
          vals0[slot] = w[v];
        }
      }
      taken = static_cast<int>(want);
    }
  }
  c.cluster.sync();  // the top list is complete on rank 0
  if (c.rank == 0 && threadIdx.x == 0) {
    // Insertion sort of at most kMaxSampleTop entries.
    for (int i = 1; i < taken; ++i) {
      const int id = sh.top_ids[i];
      const float val = sh.top_vals[i];
      int j = i - 1;
      while (j >= 0 && (sh.top_vals[j] < val || (sh.top_vals[j] == val && sh.top_ids[j] > id))) {
        sh.top_ids[j + 1] = sh.top_ids[j];
        sh.top_vals[j + 1] = sh.top_vals[j];
        --j;
      }
      sh.top_ids[j + 1] = id;
      sh.top_vals[j + 1] = val;
    }
    for (int i = taken; i < kMaxSampleTop; ++i) sh.top_ids[i] = -1;
  }
  __syncthreads();
}

// Mask, bias, bans, penalties in the host order, each block on the ids of its slice; each list
// is a separate phase because one id may be in several.
__device__ void apply_processors(float* w, int vocab, const SampleRow& p, const SampleEntry* e, int num_entries,
                                 const std::uint32_t* mask, const Ctx& c) {
  if (mask != nullptr) {
    for (int v = c.begin + static_cast<int>(threadIdx.x); v < c.end; v += kThreads)
      if (((mask[v >> 5] >> (v & 31)) & 1u) == 0) w[v] = -INFINITY;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // in order: a bias list may name an id twice
    for (int i = max(p.bias_begin, 0); i < min(p.bias_end, num_entries); ++i)
      if (valid_id(e[i].id, vocab) && mine(e[i].id, c)) w[e[i].id] = sm::fadd(w[e[i].id], e[i].value);
  }
  __syncthreads();
  for (int i = max(p.ban_begin, 0) + threadIdx.x; i < min(p.ban_end, num_entries); i += kThreads)
    if (valid_id(e[i].id, vocab) && mine(e[i].id, c)) w[e[i].id] = -INFINITY;
  __syncthreads();
  for (int i = max(p.seen_begin, 0) + threadIdx.x; i < min(p.seen_end, num_entries); i += kThreads) {
    if (!valid_id(e[i].id, vocab) || !mine(e[i].id, c)) continue;
    const float x = w[e[i].id];
    w[e[i].id] = x > 0.0f ? sm::fdiv(x, p.repetition_penalty) : sm::fmul(x, p.repetition_penalty);
  }
  __syncthreads();
  for (int i = max(p.count_begin, 0) + threadIdx.x; i < min(p.count_end, num_entries); i += kThreads) {
    if (!valid_id(e[i].id, vocab) || !mine(e[i].id, c)) continue;
    w[e[i].id] = sm::fsub(w[e[i].id], sm::fadd(sm::fmul(p.frequency_penalty, e[i].value), p.presence_penalty));
  }
  __syncthreads();
}

// Gumbel-max over the ids with cand(v, w[v]). The floor is the best lower bound of the scores of the
// hint ids that are candidates (each thread's best scaled logit: the row's best is among them and
// survives every filter), so a token whose upper bound stays below it can neither win nor tie;
// one pass then computes exact scores only where the upper bound reaches the floor. Any floor at
// or below the best candidate's score gives the same argmax. 4 consecutive ids per thread share
// one Philox block.
template <typename Cand>
__device__ int gumbel_race(const float* w, const SampleRow& p, Cand cand, int hint, Shared& sh, Ctx& c) {
  const std::uint64_t seed = (static_cast<std::uint64_t>(p.seed_hi) << 32) | p.seed_lo;
  double floor_local = -INFINITY;
  if (hint >= 0 && cand(hint, w[hint])) {
    const sm::Philox4 bits = sm::token_noise_block(seed, p.position, static_cast<std::uint32_t>(hint) >> 2);
    floor_local = sm::dadd(static_cast<double>(w[hint]), g_bucket_lo[bits.v[hint & 3] >> kBucketShift]);
  }
  double floor_value = 0.0;
  if (cluster_best(floor_local, floor_local > -INFINITY ? 0 : -1, sh, c, &floor_value) < 0) floor_value = -INFINITY;
  double best_score = -INFINITY;
  int best = -1;
  // kRaceGroups groups of 4 ids per thread and step, all loaded before any is used (see for_slice).
  for (int base = c.begin + 4 * static_cast<int>(threadIdx.x); base < c.end; base += 4 * kThreads * kRaceGroups) {
    float x[kRaceGroups][4];
#pragma unroll
    for (int g = 0; g < kRaceGroups; ++g) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int v = base + g * 4 * kThreads + j;
        x[g][j] = v < c.end ? w[v] : 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < kRaceGroups; ++g) {
      const int v0 = base + g * 4 * kThreads;
      bool in[4];
      bool any = false;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        in[j] = v0 + j < c.end && cand(v0 + j, x[g][j]);
        any = any || (in[j] && sm::dadd(static_cast<double>(x[g][j]), 22.9) >= floor_value);
      }
      if (!any) continue;
      const sm::Philox4 bits = sm::token_noise_block(seed, p.position, static_cast<std::uint32_t>(v0) >> 2);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!in[j]) continue;
        const double s = static_cast<double>(x[g][j]);
        if (sm::dadd(s, g_bucket_hi[bits.v[j] >> kBucketShift]) < floor_value) continue;
        const double score = sm::dadd(s, sm::gumbel_from_bits(bits.v[j]));
        if (better(score, v0 + j, best_score, best)) {
          best_score = score;
          best = v0 + j;
        }
      }
    }
  }
  return cluster_best(best_score, best, sh, c);
}

// Rank 0 alone, over the `present` ids gathered in sh.cand (the top-k survivors and maybe some ids
// ranked below them): sorted best first (key desc, id asc), the first n are top-k's survivors; then
// min-p, top-p and the race, with the same decisions as the passes over the row. min-p drops a
// suffix, and the top-p cut is the first prefix whose mass reaches the target (the radix select and
// tie rule pick exactly that prefix); the race computes every survivor's exact score.
__device__ int finish_compact(const float* w, const SampleRow& p, int present, int n, float max_value, Shared& sh) {
  int size = 1;
  while (size < present) size <<= 1;
  for (int i = present + static_cast<int>(threadIdx.x); i < size; i += kThreads) sh.cand[i] = 0;  // sorts last
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {  // bitonic sort, descending
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int l = i ^ j;
        if (l > i) {
          const u64 a = sh.cand[i], b = sh.cand[l];
          if (((i & k) == 0) == (a < b)) {
            sh.cand[i] = b;
            sh.cand[l] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  const auto id_of = [&](int i) { return static_cast<int>(~static_cast<std::uint32_t>(sh.cand[i])); };
  // min-p keeps a prefix.
  int kept = n;
  if (p.min_p > 0.0f) {
    const double threshold = sm::min_p_threshold(max_value, p.min_p);
    if (threadIdx.x == 0) sh.cand_cut = n;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      if (static_cast<double>(w[id_of(i)]) < threshold && (i == 0 || static_cast<double>(w[id_of(i - 1)]) >= threshold))
        sh.cand_cut = i;
    }
    __syncthreads();
    kept = sh.cand_cut;
    __syncthreads();
  }
  int count = kept;
  if (p.top_p < 1.0f && kept > 1) {
    for (int i = threadIdx.x; i < kept; i += kThreads)
      sh.cand_mass[i] = static_cast<u64>(sm::nucleus_mass(w[id_of(i)], max_value));
    __syncthreads();
    // Inclusive prefix sums in place: each thread a contiguous run, runs scanned across the block.
    const int per = (kept + kThreads - 1) / kThreads;
    const int begin = min(kept, static_cast<int>(threadIdx.x) * per), end = min(kept, begin + per);
    u64 run = 0;
    for (int i = begin; i < end; ++i) run += sh.cand_mass[i];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    u64 incl = run;
    for (int o = 1; o < 32; o <<= 1) {
      const u64 y = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += y;
    }
    if (lane == 31) sh.red_u[warp] = incl;
    __syncthreads();
    u64 before = incl - run, total = 0;
    for (int w2 = 0; w2 < kWarps; ++w2) {
      if (w2 < warp) before += sh.red_u[w2];
      total += sh.red_u[w2];
    }
    if (threadIdx.x == 0) sh.cand_cut = kept - 1;
    __syncthreads();
    for (int i = begin; i < end; ++i) {
      before += sh.cand_mass[i];
      if (sm::nucleus_reached(before, total, p.top_p)) {
        atomicMin(&sh.cand_cut, i);
        break;
      }
    }
    __syncthreads();
    count = sh.cand_cut + 1;
  }
  const std::uint64_t seed = (static_cast<std::uint64_t>(p.seed_hi) << 32) | p.seed_lo;
  double best_score = -INFINITY;
  int best = -1;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const int v = id_of(i);
    const sm::Philox4 bits = sm::token_noise_block(seed, p.position, static_cast<std::uint32_t>(v) >> 2);
    const double score = sm::dadd(static_cast<double>(w[v]), sm::gumbel_from_bits(bits.v[v & 3]));
    if (better(score, v, best_score, best)) {
      best_score = score;
      best = v;
    }
  }
  block_best(best_score, best, sh);
  return best;
}

// Every id of this block's slice with pred(v, w[v]) joins rank 0's list as (order key << 32 | ~id).
template <typename Pred>
__device__ void gather_on_rank0(const float* w, Pred pred, Shared& sh, Ctx& c) {
  int* count0 = remote(c, &sh.cand_count, 0);
  u64* cand0 = remote(c, sh.cand, 0);
  for_slice(w, c, [&](int v, float x) {
    if (!pred(v, x)) return;
    cand0[atomicAdd(count0, 1)] = (static_cast<u64>(sm::order_key(x)) << 32) | static_cast<u64>(~static_cast<std::uint32_t>(v));
  });
  c.cluster.sync();
}

// A cut of the ranking (key desc, id asc): the ids with a key above `key`, and those equal to it
// with ids up to `id`.
struct RankCut {
  std::uint32_t key = 0;
  int id = INT_MAX;
};

// The top-p cut over the ids with kept(v) (Sampler::nucleus: the shortest prefix of the ranking
// whose fixed-point mass reaches top_p of the kept ids' total), by three histogram levels of 12, 12
// and 8 key bits weighted by the masses — exp is evaluated for every kept id once, and only for the
// ids of the picked bin after that. Every id with the final key has the same mass, so the number of
// them that completes the target follows from the bin's weight; the lowest ids of those are taken
// (nth_match only when not all of them are). False when no prefix reaches the target (keep all).
template <typename Kept>
__device__ bool nucleus_cut(Kept kept, const float* w, float max_value, float top_p, RankCut& cut, Shared& sh, Ctx& c) {
  // exp(d) · 2^44 < 1 for d < -31 (e^-31 < 2^-44 by far more than exp's error): mass 0 without exp.
  const auto mass = [&](int, float x) {
    const double d = sm::dsub(static_cast<double>(x), static_cast<double>(max_value));
    return d < -31.0 ? 0ull : static_cast<u64>(sm::nucleus_mass(x, max_value));
  };
  const HistPick l1 = hist_select(
      w, kept, mass, [&](u64 cum, u64 all) { return sm::nucleus_reached(cum, all, top_p); }, 0u, 0, kHistBits, 0, sh, c);
  if (!l1.found) return false;
  const u64 total = l1.total;
  const auto reached = [&](u64 cum, u64) { return sm::nucleus_reached(cum, total, top_p); };
  // The picked bin holds the cut and reaches the target: so do the levels below it.
  const HistPick l2 = hist_select(w, kept, mass, reached, l1.prefix, kHistBits, kHistBits, l1.above, sh, c);
  if (!l2.found) return false;
  const HistPick l3 = hist_select(w, kept, mass, reached, l2.prefix, 2 * kHistBits, 32 - 2 * kHistBits, l2.above, sh, c);
  if (!l3.found) return false;
  cut.key = l3.prefix;
  const u64 q = static_cast<u64>(sm::nucleus_mass(key_value(cut.key), max_value));
  const u64 ties = q > 0 ? l3.bin / q : 1;  // the picked bin has weight > 0, so q > 0
  u64 lo = 1, hi = ties;
  while (lo < hi) {
    const u64 mid = lo + (hi - lo) / 2;
    if (reached(l3.above + mid * q, 0)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  cut.id = INT_MAX;
  if (lo < ties) {
    const std::uint32_t k = cut.key;
    cut.id = nth_match(static_cast<long long>(lo), [&](int v) { return kept(v, w[v]) && sm::order_key(w[v]) == k; }, sh, c);
  }
  return true;
}

// Counts over the finite ids, for the top-k selects.
constexpr auto kFiniteId = [](int, float x) { return sm::is_finite(x); };
constexpr auto kUnitWeight = [](int, float) { return 1ull; };

// The top-k cut below the first histogram level's pick l1 (the bin of the k-th key): two more levels
// give the k-th key; `above` ids rank above it, so the first k - above of its ties (lowest ids)
// survive — all of them without nth_match when that is every tie.
__device__ RankCut top_k_cut(const float* w, u64 k, const HistPick& l1, Shared& sh, Ctx& c) {
  const auto reached = [&](u64 cum, u64) { return cum >= k; };
  const HistPick l2 = hist_select(w, kFiniteId, kUnitWeight, reached, l1.prefix, kHistBits, kHistBits, l1.above, sh, c);
  const HistPick l3 =
      hist_select(w, kFiniteId, kUnitWeight, reached, l2.prefix, 2 * kHistBits, 32 - 2 * kHistBits, l2.above, sh, c);
  RankCut cut;
  cut.key = l3.prefix;
  const u64 n = k - l3.above;  // 1 .. l3.bin: the bin reaches k, the bins above it do not
  if (n < l3.bin) {
    const std::uint32_t key = cut.key;
    cut.id = nth_match(static_cast<long long>(n), [&](int v) { return sm::is_finite(w[v]) && sm::order_key(w[v]) == key; },
                       sh, c);
  }
  return cut;
}

// top-k, min-p and top-p over the finite scaled logits, then the race (Sampler::filter's rules).
// count / mx / hint: this thread's finite ids, their max and its id (from the temperature pass).
__device__ int filtered_draw(const float* w, const SampleRow& p, u64 count, float mx, int hint, Shared& sh, Ctx& c) {
  if (c.rank == 0 && threadIdx.x == 0) sh.cand_count = 0;  // ordered before use by the reductions below
  u64 num_finite = 0;
  float max_value = -INFINITY;
  cluster_sum_fmax(count, mx, num_finite, max_value, sh, c);
  if (num_finite == 0) return -1;
  // top-k: keys above the k-th, plus the lowest ids equal to it.
  RankCut k_cut;
  const bool top_k = p.top_k > 0 && static_cast<u64>(p.top_k) < num_finite;
  if (top_k) {
    const u64 k = static_cast<u64>(p.top_k);
    // The bin of the k-th key by one histogram level over counts. With k <= kCompact and the ids from
    // that bin up fitting, rank 0 gets them all and sorts them (the first k are the survivors).
    const HistPick l1 = hist_select(w, kFiniteId, kUnitWeight, [&](u64 cum, u64) { return cum >= k; }, 0u, 0,
                                    kHistBits, 0, sh, c);
    if (p.top_k <= kCompact && l1.found && l1.above + l1.bin <= static_cast<u64>(kCompact)) {
      gather_on_rank0(w, [&](int, float x) { return sm::is_finite(x) && sm::order_key(x) >= l1.prefix; }, sh, c);
      const int token = c.rank == 0 ? finish_compact(w, p, min(sh.cand_count, kCompact), p.top_k, max_value, sh) : -1;
      return cluster_broadcast(token, sh, c);
    }
    k_cut = top_k_cut(w, k, l1, sh, c);
    if (p.top_k <= kCompact) {  // ties at the k-th key overfilled the gather: gather exactly the k survivors
      const auto survives = [&](int v, float x) {
        if (!sm::is_finite(x)) return false;
        const std::uint32_t kv = sm::order_key(x);
        return kv > k_cut.key || (kv == k_cut.key && v <= k_cut.id);
      };
      gather_on_rank0(w, survives, sh, c);
      const int n = c.rank == 0 ? min(sh.cand_count, kCompact) : 0;
      const int token = c.rank == 0 ? finish_compact(w, p, n, n, max_value, sh) : -1;
      return cluster_broadcast(token, sh, c);
    }
  }
  const bool min_p = p.min_p > 0.0f;
  const double threshold = min_p ? sm::min_p_threshold(max_value, p.min_p) : 0.0;
  // kept(v, w[v]): the ids top-k and min-p leave.
  const auto kept = [&](int v, float x) {
    if (!sm::is_finite(x)) return false;
    if (top_k) {
      const std::uint32_t kv = sm::order_key(x);
      if (kv < k_cut.key || (kv == k_cut.key && v > k_cut.id)) return false;
    }
    return !min_p || static_cast<double>(x) >= threshold;
  };
  RankCut p_cut;
  const bool top_p = p.top_p < 1.0f && nucleus_cut(kept, w, max_value, p.top_p, p_cut, sh, c);
  const auto cand = [&](int v, float x) {
    if (!kept(v, x)) return false;
    if (!top_p) return true;
    const std::uint32_t kv = sm::order_key(x);
    return kv > p_cut.key || (kv == p_cut.key && v <= p_cut.id);
  };
  return gumbel_race(w, p, cand, hint, sh, c);
}

// The raw logits with the raw bans into this block's slice of w.
__device__ void load_raw(const SampleLaunch& a, const SampleRow& p, const float* logits, float* w, const Ctx& c) {
  const SampleEntry* e = a.entries;
  for_slice(logits, c, [&](int v, float x) { w[v] = x; });
  __syncthreads();
  for (int i = max(p.raw_ban_begin, 0) + threadIdx.x; i < min(p.raw_ban_end, a.num_entries); i += kThreads)
    if (valid_id(e[i].id, a.vocab) && mine(e[i].id, c)) w[e[i].id] = -INFINITY;
  __syncthreads();
}

// A plain row's processed logits are its raw logits with the raw bans and the mask: no logprobs (they
// need the raw row in w), no bias, bans or penalties; and this block's slice fits the ban bitmap.
// (Per block: both ways reach the selects through block barriers only.)
constexpr int kBitmapIds = kDynamicShared * 8;
__device__ bool plain_row(const SampleLaunch& a, const SampleRow& p, const Ctx& c) {
  const auto empty = [&](int begin, int end) { return max(begin, 0) >= min(end, a.num_entries); };
  return p.num_top_logprobs < 0 && empty(p.bias_begin, p.bias_end) && empty(p.ban_begin, p.ban_end) &&
         empty(p.seen_begin, p.seen_end) && empty(p.count_begin, p.count_end) && c.end - c.begin <= kBitmapIds;
}

// f(v, processed logit) over a plain row's slice straight from the logits, without the copy into
// w: the raw bans as a bitmap of the slice in the histograms' shared memory (unused until the
// selects), the mask from its words. The same values as load_raw + apply_processors.
template <typename F>
__device__ void for_plain_row(const SampleLaunch& a, const SampleRow& p, const float* logits, const std::uint32_t* mask,
                              const Ctx& c, F f) {
  auto* banned = reinterpret_cast<std::uint32_t*>(row_cluster_hist);
  const int words = (c.end - c.begin + 31) / 32;
  for (int i = threadIdx.x; i < words; i += kThreads) banned[i] = 0;
  __syncthreads();
  const SampleEntry* e = a.entries;
  for (int i = max(p.raw_ban_begin, 0) + threadIdx.x; i < min(p.raw_ban_end, a.num_entries); i += kThreads) {
    const int id = e[i].id;
    if (valid_id(id, a.vocab) && mine(id, c)) atomicOr(&banned[(id - c.begin) >> 5], 1u << ((id - c.begin) & 31));
  }
  __syncthreads();
  for_slice(logits, c, [&](int v, float x) {
    const int o = v - c.begin;
    const bool off = ((banned[o >> 5] >> (o & 31)) & 1u) != 0 || (mask != nullptr && ((mask[v >> 5] >> (v & 31)) & 1u) == 0);
    f(v, off ? -INFINITY : x);
  });
  __syncthreads();  // the bitmap's words are the histograms' next
}

// The sampled token of one row (every block of the cluster gets it); rank 0 also has the raw
// statistics when the row asked for logprobs.
__device__ int decide_row(const SampleLaunch& a, const SampleRow& p, const float* logits, float* w, double* chunk_sums,
                          Shared& sh, Ctx& c) {
  const int vocab = a.vocab;
  const std::uint32_t* mask = nullptr;
  if (p.mask_row >= 0 && p.mask_row < a.num_masks) mask = a.masks + static_cast<std::int64_t>(p.mask_row) * ((vocab + 31) / 32);
  const bool plain = plain_row(a, p, c);
  if (!plain) {
    load_raw(a, p, logits, w, c);
    if (p.num_top_logprobs >= 0) raw_statistics(w, vocab, chunk_sums, p, sh, c);
    apply_processors(w, vocab, p, a.entries, a.num_entries, mask, c);
  }
  // The first pass over the processed logits: from w, or from the logits of a plain row.
  const auto first_pass = [&](auto f) {
    if (plain) {
      for_plain_row(a, p, logits, mask, c, f);
    } else {
      for_slice(w, c, f);
    }
  };
  int token = -1;
  if (p.temperature == 0.0f) {
    // Strict >, ids ascending per thread: the lowest id wins ties; NaN and -inf never win.
    float bv = -INFINITY;
    int bi = -1;
    first_pass([&](int v, float x) {
      if (x > bv) {
        bv = x;
        bi = v;
      }
    });
    token = cluster_best(bi >= 0 ? static_cast<double>(bv) : -INFINITY, bi, sh, c);
  } else {
    // Temperature into w, and in the same pass this thread's finite count, max and the id of its max.
    u64 count = 0;
    float mx = -INFINITY;
    int hint = -1;
    first_pass([&](int v, float raw) {
      const float x = sm::fdiv(raw, p.temperature);
      w[v] = x;
      if (sm::is_finite(x)) {
        ++count;
        if (x > mx) {
          mx = x;
          hint = v;
        }
      }
    });
    __syncthreads();
    const bool filtered = (p.top_k > 0 && p.top_k < vocab) || p.min_p > 0.0f || p.top_p < 1.0f;
    if (filtered) {
      token = filtered_draw(w, p, count, mx, hint, sh, c);
    } else {
      token = gumbel_race(w, p, [](int, float x) { return sm::is_finite(x); }, hint, sh, c);
    }
  }
  if (token >= 0) return token;
  // Every logit masked or NaN (token is the same on every block): the raw best, else 0.
  load_raw(a, p, logits, w, c);
  return max(cluster_argmax(w, sh, c), 0);
}

__global__ void __launch_bounds__(kThreads, 1) sample_kernel(SampleLaunch a) {
  __shared__ Shared sh;
  Ctx c{cg::this_cluster(), 0, 1, 0, 0, 0, 0, a.histogram_fill};
  c.rank = c.cluster.block_rank();
  c.size = c.cluster.num_blocks();
  const int r = static_cast<int>(blockIdx.x / c.size);
  const int slice = (a.vocab + static_cast<int>(c.size) - 1) / static_cast<int>(c.size);
  const int aligned = (slice + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
  c.begin = min(a.vocab, static_cast<int>(c.rank) * aligned);
  c.end = min(a.vocab, c.begin + aligned);
  const SampleRow p = a.row_params[r];
  const float* logits = a.logits + static_cast<std::int64_t>(r) * a.logits_stride;
  float* w = a.work + static_cast<std::int64_t>(r) * a.vocab;
  double* chunk_sums = a.chunk_sums + static_cast<std::int64_t>(r) * a.chunks_per_row;
  const int token = decide_row(a, p, logits, w, chunk_sums, sh, c);
  const bool logprobs = p.num_top_logprobs >= 0;
  const SampleEntry* e = a.entries;
  std::int32_t* out = a.out + static_cast<std::int64_t>(r) * sample_out_words(a.max_top);
  if (!logprobs) {
    if (c.rank == 0 && threadIdx.x == 0) {
      out[kSampleOutToken] = token;
      out[kSampleOutRank] = 0;
      out[kSampleOutLogprob] = 0;
      for (int i = 0; i < a.max_top; ++i) {
        out[kSampleOutFixed + i] = -1;
        out[kSampleOutFixed + a.max_top + i] = 0;
      }
    }
    c.cluster.sync();  // no block leaves while another may still read its shared memory
    return;
  }
  // Rank over the raw logits with the raw bans (banned ids are -inf there: never above).
  bool chosen_banned = false;
  for (int i = max(p.raw_ban_begin, 0); i < min(p.raw_ban_end, a.num_entries); ++i) chosen_banned |= e[i].id == token;
  const float chosen = chosen_banned ? -INFINITY : logits[token];
  u64 above = 0;
  for (int v = c.begin + static_cast<int>(threadIdx.x); v < c.end; v += kThreads) above += logits[v] > chosen ? 1 : 0;
  for (int i = max(p.raw_ban_begin, 0) + threadIdx.x; i < min(p.raw_ban_end, a.num_entries); i += kThreads)
    if (valid_id(e[i].id, a.vocab) && mine(e[i].id, c) && logits[e[i].id] > chosen) --above;
  above = cluster_sum(above, sh, c);
  if (c.rank == 0 && threadIdx.x == 0) {
    const double lse = sh.lse;
    out[kSampleOutToken] = token;
    out[kSampleOutRank] = static_cast<std::int32_t>(1 + above);
    out[kSampleOutLogprob] = __float_as_int(static_cast<float>(sm::dsub(static_cast<double>(chosen), lse)));
    const int n = min(p.num_top_logprobs, min(a.max_top, kMaxSampleTop));
    for (int i = 0; i < a.max_top; ++i) {
      const bool has = i < n && sh.top_ids[i] >= 0;
      out[kSampleOutFixed + i] = has ? sh.top_ids[i] : -1;
      out[kSampleOutFixed + a.max_top + i] =
          has ? __float_as_int(static_cast<float>(sm::dsub(static_cast<double>(sh.top_vals[i]), lse))) : 0;
    }
  }
  c.cluster.sync();
}

// Blocks per row: as many as keep the whole batch in one wave (one 512-thread block per SM, and a
// cluster must fit in one GPC of ~16 SMs: H200 runs 8 clusters of 16, 16 of 8, 32 of 4 at once).
// 16 is beyond the portable cluster size; used only where the device reports it can run such.
int cluster_size(int rows, bool sixteen) {
  if (rows <= 8) return sixteen ? 16 : 8;
  if (rows <= 16) return 8;
  if (rows <= 32) return 4;
  if (rows <= 64) return 2;
  return 1;
}

bool can_run_sixteen() {
  if (cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(16);
  config.blockDim = dim3(kThreads);
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 16;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  config.dynamicSmemBytes = kDynamicShared;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, sample_kernel, &config) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return clusters > 0;
}

__global__ void resolve_sampled_ids_kernel(std::int32_t* ids, int n, const std::int32_t* sampled, int rows, int width) {
  enter_dependent_kernel();
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= n || ids[t] >= 0) return;
  const long long row = -1ll - ids[t];
  ids[t] = row < rows ? sampled[row * width] : 0;
}

__global__ void add_sampled_to_history_kernel(SampleRow* rows, int n, SampleEntry* entries, int num_entries,
                                              const std::int32_t* sources, const std::int32_t* sampled, int sampled_rows,
                                              int width) {
  enter_dependent_kernel();
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= n || sources[t] < 0 || sources[t] >= sampled_rows) return;
  sm::add_to_history(rows[t], entries, num_entries, sampled[static_cast<long long>(sources[t]) * width]);
}

}  // namespace

void launch_add_sampled_to_history(SampleRow* rows, int n, SampleEntry* entries, int num_entries,
                                   const std::int32_t* sources, const std::int32_t* sampled, int sampled_rows, int width,
                                   cudaStream_t stream) {
  if (n == 0) return;
  launch_chained(add_sampled_to_history_kernel, static_cast<unsigned>((n + 127) / 128), 128, 0, stream, rows, n,
                 entries, num_entries, sources, sampled, sampled_rows, width);
}

void launch_resolve_sampled_ids(std::int32_t* ids, int n, const std::int32_t* sampled, int rows, int width,
                                cudaStream_t stream) {
  if (n == 0) return;
  launch_chained(resolve_sampled_ids_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, ids, n, sampled,
                 rows, width);
}

std::int64_t sample_chunks_per_row(int vocab) { return (vocab + sm::kLseChunk - 1) / sm::kLseChunk; }

void launch_sample_tokens(const SampleLaunch& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  // The bound tables are a pure function of the bits: computed once per device, as is whether
  // 16-block clusters fit; the histograms' shared memory (past the 48 KB default) is allowed once.
  static std::mutex mutex;
  static bool ready[256] = {};
  static bool sixteen[256] = {};
  int device = 0;
  cudaGetDevice(&device);
  bool allow_sixteen = false;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (device >= 0 && device < 256) {
      if (!ready[device]) {
        cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kDynamicShared);
        launch_chained(init_buckets_kernel, kBuckets / 256, 256, 0, stream);
        sixteen[device] = can_run_sixteen();
        ready[device] = true;
      }
      allow_sixteen = sixteen[device];
    } else {
      cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kDynamicShared);
    }
  }
  const int size = cluster_size(args.rows, allow_sixteen);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(args.rows * size));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kDynamicShared;
  config.stream = stream;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(size);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  cudaLaunchKernelEx(&config, sample_kernel, args);
}

}  // namespace deepinfer::ops::cuda
