// Host sampler: processors, filters, seeded Gumbel-max, log-probabilities.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "engine/philox.h"

namespace deepinfer::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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
  for (const auto& [id, bias] : p.logit_bias) logits[static_cast<std::size_t>(id)] += bias;
  for (std::int32_t id : ctx.banned) logits[static_cast<std::size_t>(id)] = kNegInf;
  if (ctx.history == nullptr) return;
  if (p.repetition_penalty != 1.0f) {
    for (std::int32_t id : ctx.history->seen()) {
      float& x = logits[static_cast<std::size_t>(id)];
      x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [id, count] : ctx.history->output_counts()) {
      logits[static_cast<std::size_t>(id)] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
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
  float max_value = kNegInf;
  for (std::size_t v = 0; v < scaled.size(); ++v) {
    if (std::isfinite(scaled[v])) {
      cand.push_back(static_cast<std::int32_t>(v));
      max_value = std::max(max_value, scaled[v]);
    }
  }
  if (cand.empty()) return cand;
  const RanksBefore before{scaled};
  if (top_k > 0 && static_cast<std::size_t>(top_k) < cand.size()) {
    std::nth_element(cand.begin(), cand.begin() + (top_k - 1), cand.end(), before);
    cand.resize(static_cast<std::size_t>(top_k));
    std::sort(cand.begin(), cand.end());
  }
  if (min_p > 0.0f) {
    // p_v / p_max = exp(scaled_v - max); the best token always survives (min_p <= 1).
    std::erase_if(cand, [&](std::int32_t v) {
      return std::exp(static_cast<double>(scaled[static_cast<std::size_t>(v)]) - max_value) < min_p;
    });
  }
  if (top_p < 1.0f && cand.size() > 1) {
    // Normaliser summed in ascending id order so it does not depend on the sort below.
    double z = 0.0;
    for (std::int32_t v : cand) z += std::exp(static_cast<double>(scaled[static_cast<std::size_t>(v)]) - max_value);
    const double target = static_cast<double>(top_p) * z;
    std::vector<std::int32_t> order = cand;
    // Sort only as much of the ranking as the nucleus needs; the prefix order is the same for
    // every m because the order is total.
    std::size_t m = std::min<std::size_t>(64, order.size());
    std::size_t keep = order.size();
    while (true) {
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m), order.end(), before);
      double cum = 0.0;
      std::size_t i = 0;
      for (; i < m && cum < target; ++i) cum += std::exp(static_cast<double>(scaled[static_cast<std::size_t>(order[i])]) - max_value);
      if (cum >= target || m == order.size()) {
        keep = i;
        break;
      }
      m = std::min(order.size(), m * 4);
    }
    order.resize(keep);
    std::sort(order.begin(), order.end());
    cand = std::move(order);
  }
  return cand;
}

std::int32_t Sampler::gumbel_argmax(std::span<const float> scaled, std::span<const std::int32_t> candidates,
                                    std::uint64_t seed, std::uint32_t position) {
  static const double kGumbelMin = gumbel_from_bits(0u);
  static const double kGumbelMax = gumbel_from_bits(~0u);
  float max_value = kNegInf;
  for (std::int32_t v : candidates) max_value = std::max(max_value, scaled[static_cast<std::size_t>(v)]);
  // A token whose best possible score is below the worst possible score of the top token can
  // never win: skipping it changes nothing (rounded addition is monotone), and saves its noise.
  const double bound = static_cast<double>(max_value) + kGumbelMin;
  std::int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  std::uint32_t block = ~0u;
  PhiloxCounter words{};
  for (std::int32_t v : candidates) {
    const double s = scaled[static_cast<std::size_t>(v)];
    if (s + kGumbelMax < bound) continue;
    const auto id = static_cast<std::uint32_t>(v);
    if ((id >> 2) != block) {
      block = id >> 2;
      words = philox_block(seed, position, RandomPurpose::kTokenSample, block);
    }
    const double score = s + gumbel_from_bits(words[id & 3u]);
    if (score > best_score) {
      best_score = score;
      best = v;
    }
  }
  return best;
}

void Sampler::fill_logprobs(std::span<const float> raw, std::int32_t num_top, SampleResult& result) const {
  float max_value = kNegInf;
  for (float x : raw) max_value = std::max(max_value, x);
  double sum = 0.0;
  for (float x : raw) sum += std::exp(static_cast<double>(x) - max_value);
  const double lse = static_cast<double>(max_value) + std::log(sum);
  const float chosen = raw[static_cast<std::size_t>(result.token)];
  result.logprob = static_cast<float>(static_cast<double>(chosen) - lse);
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
    result.top.push_back({v, static_cast<float>(static_cast<double>(raw[static_cast<std::size_t>(v)]) - lse)});
  }
}

SampleResult Sampler::sample(std::span<const float> logits, const SampleContext& ctx) {
  DI_CHECK(static_cast<std::int32_t>(logits.size()) == vocab_size_, "sampler: logits row has {} entries, vocab is {}",
           logits.size(), vocab_size_);
  const SamplingParams& p = *ctx.params;
  work_.assign(logits.begin(), logits.end());
  apply_processors(work_, ctx);
  SampleResult result;
  if (p.is_greedy()) {
    result.token = argmax(work_);
  } else {
    for (float& x : work_) x /= p.temperature;
    const std::vector<std::int32_t> cand = filter(work_, p.top_k, p.min_p, p.top_p);
    result.token = gumbel_argmax(work_, cand, ctx.seed, ctx.position);
  }
  // Every logit masked or NaN (a broken model row): fall back to the raw argmax, then token 0,
  // rather than fail the whole batch on the hot path.
  if (result.token < 0) result.token = std::max(argmax(logits), 0);
  if (p.logprobs) fill_logprobs(logits, *p.logprobs, result);
  return result;
}

}  // namespace deepinfer::engine
