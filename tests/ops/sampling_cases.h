// Random sampling batches for the sampling-op tests: logits with and without ties and -inf, every
// parameter combination (greedy, temperature, top-k / min-p / top-p, penalties, bias, bans, masks,
// logprobs), packed as Backend::sample_tokens takes them, plus the prompt / output tokens behind
// each row's penalty lists so the engine Sampler can be given the same decision.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "ops/sampling.h"
#include "tensor/tensor.h"

namespace deepinfer::ops::test {

struct SamplingBatch {
  std::int32_t vocab = 0;
  std::int32_t max_top = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<SampleRow> rows;
  std::vector<SampleEntry> entries;
  std::vector<std::uint32_t> masks;  // [num_masks, words]
  std::int32_t num_masks = 0;
  std::vector<std::vector<std::int32_t>> prompt, outputs;  // per row, behind seen / counts
  std::vector<std::vector<std::pair<std::int32_t, float>>> bias;  // per row, in order
  std::vector<std::vector<std::int32_t>> bans;                    // per row

  std::int32_t words() const { return (vocab + 31) / 32; }
  std::int64_t num_rows() const { return static_cast<std::int64_t>(rows.size()); }
  Tensor logits_tensor() { return Tensor::view_of(logits.data(), Shape{num_rows(), vocab}, DType::kF32, nullptr); }
  Tensor rows_tensor() { return Tensor::view_of(rows.data(), Shape{num_rows(), kSampleRowWords}, DType::kI32, nullptr); }
  Tensor entries_tensor() {
    return Tensor::view_of(entries.data(), Shape{static_cast<std::int64_t>(entries.size()), 2}, DType::kI32, nullptr);
  }
  Tensor masks_tensor() { return Tensor::view_of(masks.data(), Shape{num_masks, words()}, DType::kI32, nullptr); }
};

// `kind` of logits: 0 smooth, 1 bf16-rounded (many ties), 2 a handful of distinct values (heavy
// ties), 3 peaked with -inf holes, 4 a language model's shape (a few ids far above a long tail whose
// nucleus masses truncate to 0, some of the head tied).
inline void fill_logits(std::mt19937_64& rng, int kind, float* row, std::int32_t vocab) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(0, 4);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (std::int32_t v = 0; v < vocab; ++v) {
    float x = normal(rng);
    if (kind == 1) {
      std::uint32_t b;
      std::memcpy(&b, &x, sizeof b);
      b &= 0xFFFF0000u;
      std::memcpy(&x, &b, sizeof b);
    } else if (kind == 2) {
      x = static_cast<float>(small(rng)) * 0.75f;
    } else if (kind == 3) {
      if (unit(rng) < 0.2f) x = -std::numeric_limits<float>::infinity();
      if (v % 97 == 5) x += 12.0f;
    } else if (kind == 4) {
      x = x * 0.7f - 12.0f;
      if (v % 1009 == 3) x = 28.0f + static_cast<float>(small(rng)) * 0.5f;
    }
    if (unit(rng) < 0.01f) x = -0.0f;  // -0 and +0 must compare equal everywhere
    row[v] = x;
  }
}

inline SamplingBatch make_sampling_batch(std::uint64_t seed, std::int32_t vocab, std::int32_t num_rows,
                                         std::int32_t max_top = 8) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 17);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const auto pick = [&](std::int32_t n) { return static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n)); };
  SamplingBatch b;
  b.vocab = vocab;
  b.max_top = max_top;
  b.logits.resize(static_cast<std::size_t>(num_rows) * static_cast<std::size_t>(vocab));
  // Shared raw bans: the top few ids, as the engine's padded-vocabulary ids.
  const std::int32_t raw_bans = vocab > 8 ? std::min<std::int32_t>(5, vocab / 8) : 0;
  for (std::int32_t i = 0; i < raw_bans; ++i) b.entries.push_back({vocab - 1 - i, 0.0f});
  const auto add = [&](const std::vector<SampleEntry>& list) {
    const auto begin = static_cast<std::int32_t>(b.entries.size());
    b.entries.insert(b.entries.end(), list.begin(), list.end());
    return std::pair{begin, static_cast<std::int32_t>(b.entries.size())};
  };
  for (std::int32_t r = 0; r < num_rows; ++r) {
    fill_logits(rng, pick(4), b.logits.data() + static_cast<std::size_t>(r) * vocab, vocab);
    SampleRow row;
    row.temperature = unit(rng) < 0.2f ? 0.0f : 0.3f + 1.2f * unit(rng);
    row.top_k = unit(rng) < 0.5f ? -1 : (unit(rng) < 0.1f ? vocab + 3 : 1 + pick(std::min(vocab, 50)));
    row.top_p = unit(rng) < 0.5f ? 1.0f : 0.5f + 0.49f * unit(rng);
    row.min_p = unit(rng) < 0.6f ? 0.0f : 0.01f + 0.2f * unit(rng);
    row.repetition_penalty = unit(rng) < 0.5f ? 1.0f : 0.8f + 0.7f * unit(rng);
    row.frequency_penalty = unit(rng) < 0.5f ? 0.0f : 2.0f * unit(rng) - 1.0f;
    row.presence_penalty = unit(rng) < 0.5f ? 0.0f : 2.0f * unit(rng) - 1.0f;
    const std::uint64_t s = rng();
    row.seed_lo = static_cast<std::uint32_t>(s);
    row.seed_hi = static_cast<std::uint32_t>(s >> 32);
    row.position = static_cast<std::uint32_t>(rng());
    row.num_top_logprobs = unit(rng) < 0.4f ? pick(max_top + 1) : -1;
    row.raw_ban_begin = 0;
    row.raw_ban_end = raw_bans;
    std::vector<std::int32_t> prompt, outputs;
    for (std::int32_t i = pick(20); i > 0; --i) prompt.push_back(pick(vocab));
    for (std::int32_t i = pick(10); i > 0; --i) outputs.push_back(pick(std::min(vocab, 16)));
    std::vector<std::pair<std::int32_t, float>> bias;
    std::vector<SampleEntry> list;
    for (std::int32_t i = pick(4); i > 0; --i) {
      bias.push_back({pick(vocab), 10.0f * unit(rng) - 5.0f});
      list.push_back({bias.back().first, bias.back().second});
    }
    if (!bias.empty() && unit(rng) < 0.3f) {  // the same id twice: applied in order
      bias.push_back({bias.front().first, 1.5f});
      list.push_back({bias.back().first, 1.5f});
    }
    std::tie(row.bias_begin, row.bias_end) = add(list);
    std::vector<std::int32_t> bans;
    list.clear();
    for (std::int32_t i = pick(3); i > 0; --i) {
      bans.push_back(pick(vocab));
      list.push_back({bans.back(), 0.0f});
    }
    std::tie(row.ban_begin, row.ban_end) = add(list);
    if (row.repetition_penalty != 1.0f) {
      std::set<std::int32_t> seen(prompt.begin(), prompt.end());
      seen.insert(outputs.begin(), outputs.end());
      list.clear();
      for (std::int32_t id : seen) list.push_back({id, 0.0f});
      std::tie(row.seen_begin, row.seen_end) = add(list);
    }
    if (row.frequency_penalty != 0.0f || row.presence_penalty != 0.0f) {
      std::map<std::int32_t, std::int32_t> counts;
      for (std::int32_t id : outputs) ++counts[id];
      list.clear();
      for (const auto& [id, count] : counts) list.push_back({id, static_cast<float>(count)});
      std::tie(row.count_begin, row.count_end) = add(list);
    }
    if (unit(rng) < 0.3f || r % 11 == 10) {
      // Every 11th row allows nothing: the decision falls back to the raw argmax.
      row.mask_row = b.num_masks++;
      for (std::int32_t w = 0; w < b.words(); ++w) b.masks.push_back(r % 11 == 10 ? 0u : static_cast<std::uint32_t>(rng()));
    }
    if (r % 13 == 12) {  // the narrowest filters
      row.temperature = 0.5f;
      row.top_k = 1;
      row.top_p = 0.01f;
    }
    b.rows.push_back(row);
    b.prompt.push_back(std::move(prompt));
    b.outputs.push_back(std::move(outputs));
    b.bias.push_back(std::move(bias));
    b.bans.push_back(std::move(bans));
  }
  return b;
}

// A batch aimed at the top-p cut: every logits kind, top_p from tiny to the float just below 1,
// alone and with top-k (on both sides of the 1024 of the gathered path), min-p and penalties; every
// fifth row greedy, so sampled and greedy rows share a batch; every third row with nothing but raw
// bans (and maybe a mask) before the temperature.
inline SamplingBatch make_top_p_batch(std::uint64_t seed, std::int32_t vocab, std::int32_t num_rows,
                                      std::int32_t max_top = 8) {
  SamplingBatch b = make_sampling_batch(seed, vocab, num_rows, max_top);
  std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ull + 5);
  const float top_ps[] = {1e-6f, 0.01f, 0.3f, 0.8f, 0.95f, 0.999f, 0.99999994f};
  for (std::int32_t r = 0; r < num_rows; ++r) {
    SampleRow& row = b.rows[static_cast<std::size_t>(r)];
    float* logits = b.logits.data() + static_cast<std::size_t>(r) * vocab;
    fill_logits(rng, static_cast<int>(rng() % 5), logits, vocab);
    float& some = logits[rng() % static_cast<std::uint64_t>(vocab)];
    if (!std::isfinite(some)) some = 1.0f;  // a raw logit row of only -inf has NaN logprobs
    row.temperature = r % 5 == 4 ? 0.0f : 0.4f + 0.2f * static_cast<float>(rng() % 8);
    row.top_p = top_ps[rng() % 7];
    const std::int32_t ks[] = {-1, -1, 20, 1024, 1500};
    row.top_k = ks[rng() % 5];
    row.min_p = rng() % 4 == 0 ? 0.02f : 0.0f;
    row.mask_row = r % 7 == 6 || r % 11 == 10 ? row.mask_row : -1;  // random masks; all masked (r % 11 == 10)
    if (r % 3 == 0) {  // no bias, bans, penalties or logprobs: the device's path without the row copy
      row.bias_begin = row.bias_end = row.ban_begin = row.ban_end = 0;
      row.seen_begin = row.seen_end = row.count_begin = row.count_end = 0;
      row.repetition_penalty = 1.0f;
      row.frequency_penalty = row.presence_penalty = 0.0f;
      row.num_top_logprobs = -1;
      b.bias[static_cast<std::size_t>(r)].clear();
      b.bans[static_cast<std::size_t>(r)].clear();
    }
  }
  return b;
}

}  // namespace deepinfer::ops::test
