// Token sampling on the host: logit bias, min_tokens masking, penalties, temperature, top-k /
// min-p / top-p filtering and a Gumbel-max draw whose noise is Philox(seed, position, vocab id),
// so a request's tokens are a pure function of its logits, seed and position — never of the
// rest of the batch. Also log-probabilities of the sampled token and the top candidates.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/sampling_params.h"

namespace deepinfer::engine {

// What the penalties need of a sequence's history, updated as tokens are committed.
class PenaltyState {
 public:
  void reset(std::span<const std::int32_t> prompt);
  void add_output(std::int32_t token);
  // Every distinct token of prompt and output (repetition penalty).
  const std::unordered_set<std::int32_t>& seen() const { return seen_; }
  // Output token -> count (frequency and presence penalties).
  const std::unordered_map<std::int32_t, std::int32_t>& output_counts() const { return output_counts_; }

 private:
  std::unordered_set<std::int32_t> seen_;
  std::unordered_map<std::int32_t, std::int32_t> output_counts_;
};

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampleResult {
  std::int32_t token = -1;
  // Filled only when the request asked for logprobs: log-softmax of the model's raw logits
  // (before bias, penalties, temperature and filtering; vLLM's "raw_logprobs").
  float logprob = 0.0f;
  std::int32_t rank = 0;             // 1 + number of tokens with a higher raw logit
  std::vector<TokenLogprob> top;     // the `logprobs` most likely tokens, best first
};

// One sampling decision's inputs besides the logits row.
struct SampleContext {
  const SamplingParams* params = nullptr;
  std::uint64_t seed = 0;            // the sequence's seed (request seed or engine-drawn)
  std::uint32_t position = 0;        // position of the token being sampled
  const PenaltyState* history = nullptr;  // required when a penalty is active
  // Token ids forced to -inf (min_tokens not reached yet: stop ids and EOS).
  std::span<const std::int32_t> banned;
  // Structured-output mask, ceil(vocab / 32) words (bit set = allowed); empty = unconstrained.
  std::span<const std::uint32_t> allowed;
};

class Sampler {
 public:
  explicit Sampler(std::int32_t vocab_size);

  std::int32_t vocab_size() const { return vocab_size_; }

  SampleResult sample(std::span<const float> logits, const SampleContext& ctx);

  // Mask, bias, bans and penalties applied in place (the steps before temperature), in this
  // order: structured-output mask, logit_bias, banned ids, repetition penalty, frequency and
  // presence penalties.
  static void apply_processors(std::span<float> logits, const SampleContext& ctx);
  // Ids kept by top-k, min-p and top-p over softmax(scaled) (scaled = processed logits divided
  // by the temperature), ascending. top_k <= 0 and min_p == 0 and top_p == 1 mean off. Ties are
  // broken towards the lower id. Never empty if any scaled logit is finite.
  static std::vector<std::int32_t> filter(std::span<const float> scaled, std::int32_t top_k, float min_p,
                                          float top_p);
  // Gumbel-max over `candidates` (ascending ids): argmax of scaled[v] + Gumbel(seed, position,
  // v), lowest id on ties. Tokens that cannot win given the noise bounds get no noise computed.
  std::int32_t gumbel_argmax(std::span<const float> scaled, std::span<const std::int32_t> candidates,
                             std::uint64_t seed, std::uint32_t position);
  // The same over every token with a finite scaled logit (no filter active).
  std::int32_t gumbel_argmax_all(std::span<const float> scaled, std::uint64_t seed, std::uint32_t position);
  // Highest logit, lowest id on ties (greedy).
  static std::int32_t argmax(std::span<const float> logits);

 private:
  std::int32_t choose(std::span<const float> logits, const SampleContext& ctx);
  void fill_logprobs(std::span<const float> raw, std::int32_t num_top, SampleResult& result) const;
  static std::vector<std::int32_t> top_k_ids(std::span<const float> scaled, std::span<const std::int32_t> cand,
                                             std::int32_t k);
  static std::vector<std::int32_t> nucleus(std::span<const float> scaled, std::vector<std::int32_t> cand,
                                           float max_value, float top_p);

  std::int32_t vocab_size_;
  std::vector<float> work_;          // processed / scaled logits of the current row
  std::vector<std::uint32_t> bits_;  // the random bits of the current row's candidates
};

}  // namespace deepinfer::engine
