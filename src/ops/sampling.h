// The inputs and outputs of Backend::sample_tokens, packed as 32-bit words so a step's sampling
// parameters reach the device in one copy and its results come back in one: per logits row a
// SampleRow, per-row sparse lists (logit bias, banned ids, penalty history) as SampleEntry ranges
// of one shared array. C++17 (seen by nvcc).
#pragma once

#include <cstdint>

namespace deepinfer::ops {

// One logits row's sampling decision (engine/sampler.h has the semantics). Ranges index the
// entries tensor; [begin, end) empty = none.
struct SampleRow {
  float temperature = 1.0f;          // 0: greedy
  float top_p = 1.0f;                // 1: off
  float min_p = 0.0f;                // 0: off
  std::int32_t top_k = -1;           // <= 0: off
  float repetition_penalty = 1.0f;   // 1: off
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::uint32_t seed_lo = 0, seed_hi = 0;
  std::uint32_t position = 0;        // position of the token being sampled (Philox counter)
  std::int32_t num_top_logprobs = -1;  // < 0: no logprobs; else the sampled token's and this many top
  std::int32_t mask_row = -1;        // row of the structured-output mask tensor, -1: unconstrained
  // Ids forced to -inf in the raw logits before anything else (the engine's unsampleable ids),
  // so they count in neither the logprobs nor the draw. Ids must be distinct.
  std::int32_t raw_ban_begin = 0, raw_ban_end = 0;
  std::int32_t bias_begin = 0, bias_end = 0;    // (id, bias), applied in order
  std::int32_t ban_begin = 0, ban_end = 0;      // ids set to -inf after the bias (min_tokens)
  std::int32_t seen_begin = 0, seen_end = 0;    // distinct ids the repetition penalty scales
  std::int32_t count_begin = 0, count_end = 0;  // (distinct id, float(count)) for frequency/presence
};
inline constexpr int kSampleRowWords = static_cast<int>(sizeof(SampleRow) / 4);
static_assert(sizeof(SampleRow) == 22 * 4, "SampleRow is packed 32-bit words");

struct SampleEntry {
  std::int32_t id = 0;
  float value = 0.0f;
};
static_assert(sizeof(SampleEntry) == 8, "SampleEntry is two 32-bit words");

// One output row, i32 [kSampleOutFixed + 2 · max_top]: the token; then, for rows that asked for
// logprobs, the token's rank (1 + number of higher raw logits) and raw log-softmax (f32 bits),
// then max_top top ids (best first, -1 past num_top_logprobs) and their log-softmax (f32 bits).
inline constexpr int kSampleOutToken = 0;
inline constexpr int kSampleOutRank = 1;
inline constexpr int kSampleOutLogprob = 2;
inline constexpr int kSampleOutFixed = 3;
inline constexpr int sample_out_words(int max_top) { return kSampleOutFixed + 2 * max_top; }

}  // namespace deepinfer::ops
