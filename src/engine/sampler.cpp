// Host sampler: processors, filters, seeded Gumbel-max, log-probabilities.
#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "engine/philox.h"
#include "ops/sampling_math.h"

namespace deepinfer::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
namespace sm = ops::sampling;

// Strict total order "a ranks before b": higher value first, lower id on ties.
struct RanksBefore {
  std::span<const float> values;
  bool operator()(std::int32_t a, std::int32_t b) const {
    const float va = values[static_cast<std::size_t>(a)], vb = values[static_cast<std::size_t>(b)];
    return va > vb || (va == vb && a < b);
  }
};

}  // namespace

void PenaltyState::reset(std::span<const std::int32_t> prompt) {
  seen_.clear();
  output_counts_.clear();
  seen_.insert(prompt.begin(), prompt.end());
}

void PenaltyState::add_output(std::int32_t token) {
  seen_.insert(token);
  ++output_counts_[token];
}

Sampler::Sampler(std::int32_t vocab_size) : vocab_size_(vocab_size) {
  DI_CHECK(vocab_size >= 1, "sampler: vocab_size {} must be >= 1", vocab_size);
}

void Sampler::apply_processors(std::span<float> logits, const SampleContext& ctx) {
  const SamplingParams& p = *ctx.params;
  if (!ctx.allowed.empty()) {
    for (std::size_t v = 0; v < logits.size(); ++v) {
      if (((ctx.allowed[v >> 5] >> (v & 31)) & 1u) == 0) logits[v] = kNegInf;
    }
  }
  for (const auto& [id, bias] : p.logit_bias) {
    logits[static_cast<std::size_t>(id)] = sm::fadd(logits[static_cast<std::size_t>(id)], bias);
  }
  for (std::int32_t id : ctx.banned) logits[static_cast<std::size_t>(id)] = kNegInf;
  if (ctx.history == nullptr) return;
  if (p.repetition_penalty != 1.0f) {
    for (std::int32_t id : ctx.history->seen()) {
      float& x = logits[static_cast<std::size_t>(id)];
      x = x > 0.0f ? sm::fdiv(x, p.repetition_penalty) : sm::fmul(x, p.repetition_penalty);
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [id, count] : ctx.history->output_counts()) {
      float& x = logits[static_cast<std::size_t>(id)];
      x = sm::fsub(x, sm::fadd(sm::fmul(p.frequency_penalty, static_cast<float>(count)), p.presence_penalty));
    }
  }
}

std::int32_t Sampler::argmax(std::span<const float> logits) {
  std::int32_t best = -1;
  float best_value = kNegInf;
  for (std::size_t v = 0; v < logits.size(); ++v) {
    if (logits[v] > best_value) {  // strict: the lowest id wins ties; NaN never wins
      best_value = logits[v];
      best = static_cast<std::int32_t>(v);
    }
  }
  return best;
}

std::vector<std::int32_t> Sampler::filter(std::span<const float> scaled, std::int32_t top_k, float min_p,
                                          float top_p) {
  std::vector<std::int32_t> cand;
  cand.reserve(scaled.size());
  float max_value = kNegInf;
  for (std::size_t v = 0; v < scaled.size(); ++v) {
    if (std::isfinite(scaled[v])) {
      cand.push_back(static_cast<std::int32_t>(v));
      max_value = std::max(max_value, scaled[v]);
    }
  }
  if (cand.empty()) return cand;
  if (top_k > 0 && static_cast<std::size_t>(top_k) < cand.size()) cand = top_k_ids(scaled, cand, top_k);
  if (min_p > 0.0f) {
    // p_v >= min_p * p_max  <=>  scaled_v >= max + log(min_p); the best token always survives.
    const double threshold = sm::min_p_threshold(max_value, min_p);
    std::erase_if(cand, [&](std::int32_t v) { return static_cast<double>(scaled[static_cast<std::size_t>(v)]) < threshold; });
  }
  if (top_p < 1.0f && cand.size() > 1) cand = nucleus(scaled, std::move(cand), max_value, top_p);
  return cand;
}

std::vector<std::int32_t> Sampler::top_k_ids(std::span<const float> scaled, std::span<const std::int32_t> cand,
                                             std::int32_t k) {
  // The k-th largest value by selection over plain floats (no indirection), then the ids above
  // it plus the lowest ids equal to it.
  std::vector<float> values(cand.size());
  for (std::size_t i = 0; i < cand.size(); ++i) values[i] = scaled[static_cast<std::size_t>(cand[i])];
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<float>());
  const float kth = values[static_cast<std::size_t>(k - 1)];
  std::int32_t ties = 1;  // how many tokens equal to kth fit
  for (std::int32_t i = 0; i < k - 1; ++i) ties += values[static_cast<std::size_t>(i)] == kth ? 1 : 0;
  std::vector<std::int32_t> out;
  out.reserve(static_cast<std::size_t>(k));
  for (std::int32_t v : cand) {
    const float x = scaled[static_cast<std::size_t>(v)];
    if (x > kth || (x == kth && ties-- > 0)) out.push_back(v);
  }
  return out;
}

std::vector<std::int32_t> Sampler::nucleus(std::span<const float> scaled, std::vector<std::int32_t> cand,
                                           float max_value, float top_p) {
  // Masses in fixed point (sm::nucleus_mass): integer sums are exact in any order, which is what
  // lets the device kernel, summing in parallel, cut the nucleus at the same token.
  std::uint64_t total = 0;
  for (std::int32_t v : cand) total += sm::nucleus_mass(scaled[static_cast<std::size_t>(v)], max_value);
  // Rank only as much as the nucleus needs: select the next chunk of best tokens (linear), sort
  // just that chunk, accumulate; the chunks grow 4x. The order is total, so the result is the
  // prefix of the full ranking whatever the chunk sizes. (value, id) pairs keep it cache-friendly.
  std::vector<std::pair<float, std::int32_t>> ranked(cand.size());
  for (std::size_t i = 0; i < cand.size(); ++i) ranked[i] = {scaled[static_cast<std::size_t>(cand[i])], cand[i]};
  const auto before = [](const std::pair<float, std::int32_t>& a, const std::pair<float, std::int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::size_t begin = 0, chunk = 64, keep = ranked.size();
  std::uint64_t cum = 0;
  bool reached = false;
  while (begin < ranked.size()) {
    const std::size_t end = std::min(ranked.size(), begin + chunk);
    const auto first = ranked.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto last = ranked.begin() + static_cast<std::ptrdiff_t>(end);
    if (end < ranked.size()) std::nth_element(first, last - 1, ranked.end(), before);
    std::sort(first, last, before);
    std::size_t i = begin;
    for (; i < end && !reached; ++i) {
      cum += sm::nucleus_mass(ranked[i].first, max_value);
      reached = sm::nucleus_reached(cum, total, top_p);
    }
    if (reached) {
      keep = i;
      break;
    }
    begin = end;
    chunk *= 4;
  }
  cand.resize(keep);
  for (std::size_t i = 0; i < keep; ++i) cand[i] = ranked[i].second;
  std::sort(cand.begin(), cand.end());
  return cand;
}

namespace {

// Bounds of the Gumbel value over each run of 2^20 consecutive bit patterns (the function is
// monotone in the bits), so a score interval costs a lookup instead of two logarithms.
constexpr int kBucketShift = 20;
struct GumbelBuckets {
  std::array<double, 4096> lo{}, hi{};
};
const GumbelBuckets& gumbel_buckets() {
  static const GumbelBuckets table = [] {
    GumbelBuckets t;
    for (std::uint64_t k = 0; k < t.lo.size(); ++k) {
      // Widened by far more than the own log's error, in case it is not exactly monotone.
      t.lo[k] = gumbel_from_bits(static_cast<std::uint32_t>(k << kBucketShift)) - 1e-9;
      t.hi[k] = gumbel_from_bits(static_cast<std::uint32_t>(((k + 1) << kBucketShift) - 1)) + 1e-9;
    }
    return t;
  }();
  return table;
}

// The Gumbel-max race over the ids `for_each` yields (ascending), in two passes. Pass 1 draws
// the bits and raises `floor` to the best lower bound of any score; pass 2 computes exact scores
// only for tokens whose upper bound reaches `floor` (strictly below can neither win nor tie).
// Rounded addition is monotone, so the result is the exact argmax, lowest id on ties.
template <typename ForEach>
std::int32_t gumbel_race(std::span<const float> scaled, std::uint64_t seed, std::uint32_t position,
                         std::vector<std::uint32_t>& bits, ForEach for_each) {
  static const double kGumbelMax = gumbel_from_bits(~0u) + 1e-9;
  const GumbelBuckets& buckets = gumbel_buckets();
  double floor = -std::numeric_limits<double>::infinity();
  std::uint32_t block = ~0u;
  PhiloxCounter words{};
  bits.clear();
  for_each([&](std::int32_t v) {
    const double s = scaled[static_cast<std::size_t>(v)];
    if (s + kGumbelMax < floor) {
      bits.push_back(0);  // never read: pass 2 skips it too (floor only rises)
      return;
    }
    const auto id = static_cast<std::uint32_t>(v);
    if ((id >> 2) != block) {
      block = id >> 2;
      words = philox_block(seed, position, RandomPurpose::kTokenSample, block);
    }
    bits.push_back(words[id & 3u]);
    floor = std::max(floor, s + buckets.lo[bits.back() >> kBucketShift]);
  });
  std::int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  std::size_t j = 0;
  for_each([&](std::int32_t v) {
    const std::uint32_t b = bits[j++];
    const double s = scaled[static_cast<std::size_t>(v)];
    if (s + kGumbelMax < floor || s + buckets.hi[b >> kBucketShift] < floor) return;
    const double score = sm::dadd(s, gumbel_from_bits(b));
    if (score > best_score || (score == best_score && v < best)) {
      best_score = score;
      best = v;
    }
  });
  return best;
}

}  // namespace

std::int32_t Sampler::gumbel_argmax(std::span<const float> scaled, std::span<const std::int32_t> candidates,
                                    std::uint64_t seed, std::uint32_t position) {
  return gumbel_race(scaled, seed, position, bits_, [&](auto&& visit) {
    for (std::int32_t v : candidates) visit(v);
  });
}

std::int32_t Sampler::gumbel_argmax_all(std::span<const float> scaled, std::uint64_t seed, std::uint32_t position) {
  return gumbel_race(scaled, seed, position, bits_, [&](auto&& visit) {
    for (std::size_t v = 0; v < scaled.size(); ++v) {
      if (std::isfinite(scaled[v])) visit(static_cast<std::int32_t>(v));
    }
  });
}

void Sampler::fill_logprobs(std::span<const float> raw, std::int32_t num_top, SampleResult& result) const {
  float max_value = kNegInf;
  for (float x : raw) max_value = std::max(max_value, x);
  // Chunked sequential sums (sm::kLseChunk): the order a device thread block can follow too.
  double sum = 0.0;
  for (std::size_t c = 0; c < raw.size(); c += sm::kLseChunk) {
    double part = 0.0;
    for (std::size_t v = c; v < std::min(raw.size(), c + sm::kLseChunk); ++v) {
      part = sm::dadd(part, sm::exp(sm::dsub(static_cast<double>(raw[v]), static_cast<double>(max_value))));
    }
    sum = sm::dadd(sum, part);
  }
  const double lse = sm::dadd(static_cast<double>(max_value), sm::log(sum));
  const float chosen = raw[static_cast<std::size_t>(result.token)];
  result.logprob = static_cast<float>(sm::dsub(static_cast<double>(chosen), lse));
  result.rank = 1;
  for (float x : raw) result.rank += x > chosen ? 1 : 0;
  result.top.clear();
  if (num_top <= 0) return;
  // A short sorted list beats sorting the vocabulary: num_top is at most max_logprobs (20).
  const RanksBefore before{raw};
  std::vector<std::int32_t> top;
  for (std::int32_t v = 0; v < vocab_size_; ++v) {
    if (static_cast<std::int32_t>(top.size()) == num_top && !before(v, top.back())) continue;
    top.insert(std::upper_bound(top.begin(), top.end(), v, before), v);
    if (static_cast<std::int32_t>(top.size()) > num_top) top.pop_back();
  }
  for (std::int32_t v : top) {
    result.top.push_back({v, static_cast<float>(sm::dsub(static_cast<double>(raw[static_cast<std::size_t>(v)]), lse))});
  }
}

std::int32_t Sampler::choose(std::span<const float> logits, const SampleContext& ctx) {
  const SamplingParams& p = *ctx.params;
  const bool penalties = ctx.history != nullptr && (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
                                                    p.presence_penalty != 0.0f);
  const bool processed = penalties || !p.logit_bias.empty() || !ctx.banned.empty() || !ctx.allowed.empty();
  if (!processed && p.is_greedy()) return argmax(logits);  // nothing to change: no copy of the row
  work_.assign(logits.begin(), logits.end());
  apply_processors(work_, ctx);
  if (p.is_greedy()) return argmax(work_);
  for (float& x : work_) x = sm::fdiv(x, p.temperature);
  const bool filtered = (p.top_k > 0 && p.top_k < vocab_size_) || p.min_p > 0.0f || p.top_p < 1.0f;
  if (!filtered) return gumbel_argmax_all(work_, ctx.seed, ctx.position);
  const std::vector<std::int32_t> cand = filter(work_, p.top_k, p.min_p, p.top_p);
  return gumbel_argmax(work_, cand, ctx.seed, ctx.position);
}

SampleResult Sampler::sample(std::span<const float> logits, const SampleContext& ctx) {
  DI_CHECK(static_cast<std::int32_t>(logits.size()) == vocab_size_, "sampler: logits row has {} entries, vocab is {}",
           logits.size(), vocab_size_);
  SampleResult result;
  result.token = choose(logits, ctx);
  // Every logit masked or NaN (a broken model row): fall back to the raw argmax, then token 0,
  // rather than fail the whole batch on the hot path.
  if (result.token < 0) result.token = std::max(argmax(logits), 0);
  if (ctx.params->logprobs) fill_logprobs(logits, *ctx.params->logprobs, result);
  return result;
}

}  // namespace deepinfer::engine
