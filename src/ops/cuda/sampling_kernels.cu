// Sampling on the device: one thread block per logits row makes engine::Sampler's whole decision
// (raw bans, logprob statistics, mask, bias, bans, penalties, temperature, top-k / min-p / top-p,
// Philox-seeded Gumbel-max) with the arithmetic of ops/sampling_math.h, so it picks the same
// token bit for bit. Filters are radix selects over order keys (counts for top-k, fixed-point
// masses for top-p) instead of sorts; the Gumbel race skips tokens whose noise bound cannot win.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <mutex>

#include "ops/cuda/sampling_launch.h"
#include "ops/sampling.h"
#include "ops/sampling_math.h"

namespace deepinfer::ops::cuda {
namespace {

namespace sm = ::deepinfer::ops::sampling;
using u64 = unsigned long long;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
// Gumbel bounds per run of 2^20 bit patterns, widened far beyond the own log's error (as the host
// sampler's table): a token is skipped only if even its bound cannot reach the best lower bound.
constexpr int kBucketShift = 20;
constexpr int kBuckets = 4096;
constexpr double kBoundMargin = 1e-9;

__device__ double g_bucket_lo[kBuckets];
__device__ double g_bucket_hi[kBuckets];

__global__ void init_buckets_kernel() {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= kBuckets) return;
  const auto first = static_cast<std::uint32_t>(static_cast<u64>(k) << kBucketShift);
  const auto last = static_cast<std::uint32_t>(((static_cast<u64>(k) + 1) << kBucketShift) - 1);
  g_bucket_lo[k] = sm::gumbel_from_bits(first) - kBoundMargin;
  g_bucket_hi[k] = sm::gumbel_from_bits(last) + kBoundMargin;
}

struct Shared {
  double red_d[kWarps];
  int red_i[kWarps];
  u64 red_u[kWarps];
  u64 hist[256];
  double chunk[kThreads];
  int top_ids[kMaxSampleTop];
  float top_vals[kMaxSampleTop];
  int scalar_i;
  int sel_digit;
  u64 sel_above;
  double lse;
};

__device__ __forceinline__ float key_value(std::uint32_t key) {
  const std::uint32_t b = (key & 0x80000000u) != 0 ? (key & 0x7FFFFFFFu) : ~key;
  return __uint_as_float(b);
}

// ---- block reductions (every thread calls; all get the result) ------------------------------------
__device__ u64 block_sum(u64 x, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFull, x, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.red_u[threadIdx.x / 32] = x;
  __syncthreads();
  u64 t = 0;
  for (int i = 0; i < kWarps; ++i) t += sh.red_u[i];
  return t;
}

// Max of finite-or-inf floats (NaN ignored, as std::max with the running value first).
__device__ float block_fmax(float x, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.red_d[threadIdx.x / 32] = x;
  __syncthreads();
  float m = -INFINITY;
  for (int i = 0; i < kWarps; ++i) m = fmaxf(m, static_cast<float>(sh.red_d[i]));
  return m;
}

// Best (score, id): higher score, then lower id; id < 0 is empty.
__device__ __forceinline__ bool better(double s, int i, double bs, int bi) {
  return i >= 0 && (bi < 0 || s > bs || (s == bs && i < bi));
}

__device__ int block_best(double s, int i, Shared& sh, double* best_score = nullptr) {
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
  double bs = sh.red_d[0];
  int bi = sh.red_i[0];
  for (int w = 1; w < kWarps; ++w) {
    if (better(sh.red_d[w], sh.red_i[w], bs, bi)) {
      bs = sh.red_d[w];
      bi = sh.red_i[w];
    }
  }
  if (best_score != nullptr) *best_score = bs;
  return bi;
}

// Argmax of x over [0, n) with the host's rule (strict >, so the lowest id wins ties, NaN and -inf
// never win; -1 when nothing beats -inf).
__device__ int block_argmax(const float* x, int n, Shared& sh) {
  float bv = -INFINITY;
  int bi = -1;
  for (int v = threadIdx.x; v < n; v += kThreads) {
    if (x[v] > bv) {
      bv = x[v];
      bi = v;
    }
  }
  return block_best(bi >= 0 ? static_cast<double>(bv) : -INFINITY, bi, sh);
}

// The id of the n-th (1-based) id in ascending order with pred(id), or INT_MAX when fewer match.
// Each thread owns a contiguous run of ids, so one scan of the run counts suffices.
template <typename Pred>
__device__ int nth_match(int vocab, long long n, Pred pred, Shared& sh) {
  const int per = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, static_cast<int>(threadIdx.x) * per), end = min(vocab, begin + per);
  int count = 0;
  for (int v = begin; v < end; ++v) count += pred(v) ? 1 : 0;
  // Exclusive scan of the counts in thread order.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = count;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == 31) sh.red_i[warp] = incl;
  if (threadIdx.x == 0) sh.scalar_i = INT_MAX;
  __syncthreads();
  long long before = incl - count;
  for (int w = 0; w < warp; ++w) before += sh.red_i[w];
  if (before < n && before + count >= n) {
    long long k = before;
    for (int v = begin; v < end; ++v) {
      if (pred(v) && ++k == n) {
        sh.scalar_i = v;
        break;
      }
    }
  }
  __syncthreads();
  const int found = sh.scalar_i;
  __syncthreads();  // everyone has read it before the slot is reused
  return found;
}

// MSB-first radix select over the 32-bit order keys of the ids with in(v): the largest key K
// such that reached(weight of ids with key >= K). `above` gets the weight of the keys > K.
template <typename In, typename Key, typename Weight, typename Reached>
__device__ std::uint32_t radix_select(int vocab, In in, Key key, Weight weight, Reached reached, u64& above,
                                      Shared& sh) {
  std::uint32_t prefix = 0;
  above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    const std::uint32_t high = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
    // A row's logits share a few exponent bytes, so one atomic per id would pile onto the same
    // bins: the lanes of a warp with the same digit add their weights first, one atomic per group.
    const int lane = threadIdx.x % 32;
    for (int base = 0; base < vocab; base += kThreads) {
      const int v = base + static_cast<int>(threadIdx.x);
      std::uint32_t digit = 256;  // none
      u64 w = 0;
      if (v < vocab && in(v)) {
        const std::uint32_t k = key(v);
        if ((k & high) == (prefix & high)) {
          digit = (k >> shift) & 255u;
          w = weight(v);
        }
      }
      const unsigned peers = __match_any_sync(kFull, digit);
      u64 sum = 0;
      for (int j = 0; j < 32; ++j) {
        const u64 wj = __shfl_sync(kFull, w, j);
        if ((peers >> j) & 1u) sum += wj;
      }
      if (digit < 256 && __ffs(peers) - 1 == lane) atomicAdd(&sh.hist[digit], sum);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 cum = above;
      int d = 255;
      for (; d > 0; --d) {
        if (reached(cum + sh.hist[d])) break;
        cum += sh.hist[d];
      }
      sh.sel_digit = d;
      sh.sel_above = cum;
    }
    __syncthreads();
    prefix |= static_cast<std::uint32_t>(sh.sel_digit) << shift;
    above = sh.sel_above;
  }
  return prefix;
}

__device__ __forceinline__ bool valid_id(int id, int vocab) { return id >= 0 && id < vocab; }

// Raw logprob statistics before any processing: lse (chunked sums), the top list.
__device__ void raw_statistics(const float* w, int vocab, const SampleRow& p, Shared& sh) {
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < vocab; v += kThreads) mx = fmaxf(mx, w[v]);
  const float max_value = block_fmax(mx, sh);
  // Chunks of kLseChunk ids summed sequentially, the chunk sums sequentially in chunk order.
  const int chunks = (vocab + sm::kLseChunk - 1) / sm::kLseChunk;
  double total = 0.0;
  for (int base = 0; base < chunks; base += kThreads) {
    const int c = base + static_cast<int>(threadIdx.x);
    if (c < chunks) {
      double part = 0.0;
      for (int v = c * sm::kLseChunk; v < min(vocab, (c + 1) * sm::kLseChunk); ++v)
        part = sm::dadd(part, sm::exp(sm::dsub(static_cast<double>(w[v]), static_cast<double>(max_value))));
      sh.chunk[threadIdx.x] = part;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int i = 0; i < min(kThreads, chunks - base); ++i) total = sm::dadd(total, sh.chunk[i]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) sh.lse = sm::dadd(static_cast<double>(max_value), sm::log(total));
  // Top list: the n best non-NaN ids by (value desc, id asc).
  const int n = min(p.num_top_logprobs, kMaxSampleTop);
  if (n > 0) {
    const auto in = [&](int v) { return w[v] == w[v]; };
    const auto key = [&](int v) { return sm::order_key(w[v]); };
    const u64 total_in = block_sum([&] {
      u64 c = 0;
      for (int v = threadIdx.x; v < vocab; v += kThreads) c += in(v) ? 1 : 0;
      return c;
    }(), sh);
    const u64 want = min(static_cast<u64>(n), total_in);
    int taken = 0;
    if (want > 0) {
      u64 above = 0;
      const std::uint32_t kth = radix_select(
          vocab, in, key, [](int) { return 1ull; }, [&](u64 c) { return c >= want; }, above, sh);
      const int cut = nth_match(vocab, static_cast<long long>(want - above), [&](int v) { return in(v) && key(v) == kth; }, sh);
      if (threadIdx.x == 0) sh.scalar_i = 0;
      __syncthreads();
      for (int v = threadIdx.x; v < vocab; v += kThreads) {
        if (!in(v)) continue;
        const std::uint32_t k = key(v);
        if (k > kth || (k == kth && v <= cut)) {
          const int slot = atomicAdd(&sh.scalar_i, 1);
          sh.top_ids[slot] = v;
          sh.top_vals[slot] = w[v];
        }
      }
      __syncthreads();
      taken = static_cast<int>(want);
    }
    if (threadIdx.x == 0) {
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
  } else if (threadIdx.x == 0) {
    for (int i = 0; i < kMaxSampleTop; ++i) sh.top_ids[i] = -1;
  }
  __syncthreads();
}

// Mask, bias, bans, penalties in the host order; each list is a separate phase because one id
// may be in several.
__device__ void apply_processors(float* w, int vocab, const SampleRow& p, const SampleEntry* e, int num_entries,
                                 const std::uint32_t* mask) {
  if (mask != nullptr) {
    for (int v = threadIdx.x; v < vocab; v += kThreads)
      if (((mask[v >> 5] >> (v & 31)) & 1u) == 0) w[v] = -INFINITY;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // in order: a bias list may name an id twice
    for (int i = max(p.bias_begin, 0); i < min(p.bias_end, num_entries); ++i)
      if (valid_id(e[i].id, vocab)) w[e[i].id] = sm::fadd(w[e[i].id], e[i].value);
  }
  __syncthreads();
  for (int i = max(p.ban_begin, 0) + threadIdx.x; i < min(p.ban_end, num_entries); i += kThreads)
    if (valid_id(e[i].id, vocab)) w[e[i].id] = -INFINITY;
  __syncthreads();
  for (int i = max(p.seen_begin, 0) + threadIdx.x; i < min(p.seen_end, num_entries); i += kThreads) {
    if (!valid_id(e[i].id, vocab)) continue;
    const float x = w[e[i].id];
    w[e[i].id] = x > 0.0f ? sm::fdiv(x, p.repetition_penalty) : sm::fmul(x, p.repetition_penalty);
  }
  __syncthreads();
  for (int i = max(p.count_begin, 0) + threadIdx.x; i < min(p.count_end, num_entries); i += kThreads) {
    if (!valid_id(e[i].id, vocab)) continue;
    w[e[i].id] = sm::fsub(w[e[i].id], sm::fadd(sm::fmul(p.frequency_penalty, e[i].value), p.presence_penalty));
  }
  __syncthreads();
}

// Gumbel-max over the ids with cand(v): pass 1 takes the best lower bound of any score, pass 2
// computes exact scores only where the upper bound reaches it. 4 consecutive ids per thread share
// one Philox block.
template <typename Cand>
__device__ int gumbel_race(const float* w, int vocab, const SampleRow& p, Cand cand, Shared& sh) {
  const std::uint64_t seed = (static_cast<std::uint64_t>(p.seed_hi) << 32) | p.seed_lo;
  double floor_local = -INFINITY;
  for (int v0 = 4 * threadIdx.x; v0 < vocab; v0 += 4 * kThreads) {
    bool any = false;
    for (int j = 0; j < 4 && v0 + j < vocab; ++j) any = any || cand(v0 + j);
    if (!any) continue;
    const sm::Philox4 bits = sm::token_noise_block(seed, p.position, static_cast<std::uint32_t>(v0) >> 2);
    for (int j = 0; j < 4 && v0 + j < vocab; ++j) {
      if (!cand(v0 + j)) continue;
      const double lo = sm::dadd(static_cast<double>(w[v0 + j]), g_bucket_lo[bits.v[j] >> kBucketShift]);
      floor_local = fmax(floor_local, lo);
    }
  }
  double floor_value = 0.0;
  block_best(floor_local, floor_local > -INFINITY ? 0 : -1, sh, &floor_value);
  double best_score = -INFINITY;
  int best = -1;
  for (int v0 = 4 * threadIdx.x; v0 < vocab; v0 += 4 * kThreads) {
    bool any = false;
    for (int j = 0; j < 4 && v0 + j < vocab; ++j) {
      const int v = v0 + j;
      any = any || (cand(v) && sm::dadd(static_cast<double>(w[v]), 22.9) >= floor_value);
    }
    if (!any) continue;
    const sm::Philox4 bits = sm::token_noise_block(seed, p.position, static_cast<std::uint32_t>(v0) >> 2);
    for (int j = 0; j < 4 && v0 + j < vocab; ++j) {
      const int v = v0 + j;
      if (!cand(v)) continue;
      const double s = static_cast<double>(w[v]);
      if (sm::dadd(s, g_bucket_hi[bits.v[j] >> kBucketShift]) < floor_value) continue;
      const double score = sm::dadd(s, sm::gumbel_from_bits(bits.v[j]));
      if (better(score, v, best_score, best)) {
        best_score = score;
        best = v;
      }
    }
  }
  return block_best(best_score, best, sh);
}

// top-k, min-p and top-p over the finite scaled logits, then the race (Sampler::filter's rules).
__device__ int filtered_draw(const float* w, int vocab, const SampleRow& p, Shared& sh) {
  const auto finite = [&](int v) { return sm::is_finite(w[v]); };
  const auto key = [&](int v) { return sm::order_key(w[v]); };
  u64 count = 0;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < vocab; v += kThreads) {
    if (finite(v)) {
      ++count;
      mx = fmaxf(mx, w[v]);
    }
  }
  const u64 num_finite = block_sum(count, sh);
  if (num_finite == 0) return -1;
  const float max_value = block_fmax(mx, sh);
  // top-k: keys above the k-th, plus the lowest ids equal to it.
  std::uint32_t k_key = 0;
  int k_cut = INT_MAX;
  const bool top_k = p.top_k > 0 && static_cast<u64>(p.top_k) < num_finite;
  if (top_k) {
    u64 above = 0;
    const u64 k = static_cast<u64>(p.top_k);
    k_key = radix_select(
        vocab, finite, key, [](int) { return 1ull; }, [&](u64 c) { return c >= k; }, above, sh);
    k_cut = nth_match(vocab, static_cast<long long>(k - above), [&](int v) { return finite(v) && key(v) == k_key; }, sh);
  }
  const bool min_p = p.min_p > 0.0f;
  const double threshold = min_p ? sm::min_p_threshold(max_value, p.min_p) : 0.0;
  const auto kept = [&](int v) {
    if (!finite(v)) return false;
    if (top_k) {
      const std::uint32_t kv = key(v);
      if (kv < k_key || (kv == k_key && v > k_cut)) return false;
    }
    return !min_p || static_cast<double>(w[v]) >= threshold;
  };
  std::uint32_t p_key = 0;
  int p_cut = INT_MAX;
  bool top_p = false;
  if (p.top_p < 1.0f) {
    u64 kept_count = 0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) kept_count += kept(v) ? 1 : 0;
    top_p = block_sum(kept_count, sh) > 1;
  }
  if (top_p) {
    const auto mass = [&](int v) { return static_cast<u64>(sm::nucleus_mass(w[v], max_value)); };
    u64 z = 0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) z += kept(v) ? mass(v) : 0;
    const u64 total = block_sum(z, sh);
    const auto reached = [&](u64 cum) { return sm::nucleus_reached(cum, total, p.top_p); };
    u64 above = 0;
    p_key = radix_select(vocab, kept, key, mass, reached, above, sh);
    // Every id with key p_key has the same mass: the smallest count j of them that completes it.
    const u64 q = static_cast<u64>(sm::nucleus_mass(key_value(p_key), max_value));
    u64 ties = 0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) ties += kept(v) && key(v) == p_key ? 1 : 0;
    ties = block_sum(ties, sh);
    u64 lo = 1, hi = ties;
    while (lo < hi) {
      const u64 mid = lo + (hi - lo) / 2;
      if (reached(above + mid * q)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    p_cut = nth_match(vocab, static_cast<long long>(lo), [&](int v) { return kept(v) && key(v) == p_key; }, sh);
  }
  const auto cand = [&](int v) {
    if (!kept(v)) return false;
    if (!top_p) return true;
    const std::uint32_t kv = key(v);
    return kv > p_key || (kv == p_key && v <= p_cut);
  };
  return gumbel_race(w, vocab, p, cand, sh);
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleLaunch a) {
  __shared__ Shared sh;
  const int r = blockIdx.x;
  const SampleRow p = a.row_params[r];
  const float* logits = a.logits + static_cast<std::int64_t>(r) * a.logits_stride;
  float* w = a.work + static_cast<std::int64_t>(r) * a.vocab;
  const int vocab = a.vocab;
  const SampleEntry* e = a.entries;
  // Raw logits with the raw bans.
  for (int v = threadIdx.x; v < vocab; v += kThreads) w[v] = logits[v];
  __syncthreads();
  for (int i = max(p.raw_ban_begin, 0) + threadIdx.x; i < min(p.raw_ban_end, a.num_entries); i += kThreads)
    if (valid_id(e[i].id, vocab)) w[e[i].id] = -INFINITY;
  __syncthreads();
  const int raw_best = block_argmax(w, vocab, sh);
  const bool logprobs = p.num_top_logprobs >= 0;
  if (logprobs) raw_statistics(w, vocab, p, sh);
  const std::uint32_t* mask = nullptr;
  if (p.mask_row >= 0 && p.mask_row < a.num_masks) mask = a.masks + static_cast<std::int64_t>(p.mask_row) * ((vocab + 31) / 32);
  apply_processors(w, vocab, p, e, a.num_entries, mask);
  int token = -1;
  if (p.temperature == 0.0f) {
    token = block_argmax(w, vocab, sh);
  } else {
    for (int v = threadIdx.x; v < vocab; v += kThreads) w[v] = sm::fdiv(w[v], p.temperature);
    __syncthreads();
    const bool filtered = (p.top_k > 0 && p.top_k < vocab) || p.min_p > 0.0f || p.top_p < 1.0f;
    if (filtered) {
      token = filtered_draw(w, vocab, p, sh);
    } else {
      token = gumbel_race(w, vocab, p, [&](int v) { return sm::is_finite(w[v]); }, sh);
    }
  }
  if (token < 0) token = max(raw_best, 0);  // every logit masked or NaN
  std::int32_t* out = a.out + static_cast<std::int64_t>(r) * sample_out_words(a.max_top);
  if (!logprobs) {
    if (threadIdx.x == 0) {
      out[kSampleOutToken] = token;
      out[kSampleOutRank] = 0;
      out[kSampleOutLogprob] = 0;
      for (int i = 0; i < a.max_top; ++i) {
        out[kSampleOutFixed + i] = -1;
        out[kSampleOutFixed + a.max_top + i] = 0;
      }
    }
    return;
  }
  // Rank over the raw logits with the raw bans (banned ids are -inf there: never above).
  bool chosen_banned = false;
  for (int i = max(p.raw_ban_begin, 0); i < min(p.raw_ban_end, a.num_entries); ++i) chosen_banned |= e[i].id == token;
  const float chosen = chosen_banned ? -INFINITY : logits[token];
  u64 above = 0;
  for (int v = threadIdx.x; v < vocab; v += kThreads) above += logits[v] > chosen ? 1 : 0;
  for (int i = max(p.raw_ban_begin, 0) + threadIdx.x; i < min(p.raw_ban_end, a.num_entries); i += kThreads)
    if (valid_id(e[i].id, vocab) && logits[e[i].id] > chosen) --above;
  above = block_sum(above, sh);
  if (threadIdx.x == 0) {
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
}

}  // namespace

void launch_sample_tokens(const SampleLaunch& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  // The bound tables are a pure function of the bits: computed once per device.
  static std::mutex mutex;
  static bool ready[256] = {};
  int device = 0;
  cudaGetDevice(&device);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (device >= 0 && device < 256 && !ready[device]) {
      init_buckets_kernel<<<kBuckets / 256, 256, 0, stream>>>();
      ready[device] = true;
    }
  }
  sample_kernel<<<static_cast<unsigned>(args.rows), kThreads, 0, stream>>>(args);
}

}  // namespace deepinfer::ops::cuda
