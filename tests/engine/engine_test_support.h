// Shared helpers for engine tests: an engine over the fake model, a run-to-completion driver that
// checks the scheduler's invariants every step, a toy detokenizer, and the oracle: generation by
// a plain loop over the fake model's cache-free reference logits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/fake_model_runner.h"
#include "engine/philox.h"

namespace deepinfer::engine::testing {

// Token v decodes to one letter; every fifth token adds a space. Tokens >= 60 are "partial
// bytes": their text is held until the next token, as a UTF-8 decoder holds a split character.
class ToyDetokenizer final : public Detokenizer {
 public:
  static std::string piece(std::int32_t token) {
    std::string s(1, static_cast<char>('a' + token % 26));
    if (token % 5 == 0) s += ' ';
    return s;
  }
  class Stream final : public DetokenizerStream {
   public:
    std::string push(std::int32_t token) override {
      held_ += piece(token);
      if (token >= 60) return {};
      std::string out;
      out.swap(held_);
      return out;
    }
    std::string finish() override {
      std::string out;
      out.swap(held_);
      return out;
    }

   private:
    std::string held_;
  };
  std::unique_ptr<DetokenizerStream> open(std::span<const std::int32_t>, bool) const override {
    return std::make_unique<Stream>();
  }
};

// A toy structured-output constraint: only multiples of `mod` (schema "mod:<k>"), and after
// `length` tokens only EOS (0), which completes it.
class ModuloConstraint final : public TokenConstraint {
 public:
  ModuloConstraint(std::int32_t mod, std::int32_t length, std::int32_t vocab) : mod_(mod), length_(length), vocab_(vocab) {}
  bool allows(std::int32_t t) const {
    if (!accepted_.empty() && accepted_.back() == 0) return false;
    if (static_cast<std::int32_t>(accepted_.size()) >= length_) return t == 0;
    return t >= 0 && t < vocab_ && t % mod_ == 0;
  }
  void fill_next_token_bitmask(std::span<std::uint32_t> bitmask) override {
    std::fill(bitmask.begin(), bitmask.end(), 0u);
    for (std::int32_t t = 0; t < vocab_; ++t) {
      if (allows(t)) bitmask[static_cast<std::size_t>(t) / 32] |= 1u << (t % 32);
    }
  }
  bool accept_token(std::int32_t token) override {
    if (!allows(token)) return false;
    accepted_.push_back(token);
    return true;
  }
  void rollback(int n) override { accepted_.resize(accepted_.size() - static_cast<std::size_t>(n)); }
  bool is_terminated() const override { return !accepted_.empty() && accepted_.back() == 0; }

 private:
  std::int32_t mod_, length_, vocab_;
  std::vector<std::int32_t> accepted_;
};

class ModuloConstraintFactory final : public TokenConstraintFactory {
 public:
  explicit ModuloConstraintFactory(std::int32_t vocab) : vocab_(vocab) {}
  std::unique_ptr<TokenConstraint> create(const StructuredOutputArgs& args) const override {
    if (args.schema.rfind("mod:", 0) != 0) throw Error("unsupported toy schema '" + args.schema + "'");
    return std::make_unique<ModuloConstraint>(std::stoi(args.schema.substr(4)), 6, vocab_);
  }

 private:
  std::int32_t vocab_;
};

// The fake model failing on its third forward ("device lost"); with the default launch/collect pair
// the failure surfaces inside collect().
class FailingRunner final : public ModelRunner {
 public:
  cache::CacheSpec cache_spec() const override { return inner_.cache_spec(); }
  std::int32_t vocab_size() const override { return inner_.vocab_size(); }
  void allocate_cache(const cache::CacheLayout& layout) override { inner_.allocate_cache(layout); }
  void forward(const ForwardBatch& batch, std::span<float> logits) override {
    if (++calls_ == 3) throw Error("device lost");
    inner_.forward(batch, logits);
  }

 private:
  FakeModelRunner inner_;
  int calls_ = 0;
};

struct Generated {
  std::vector<std::int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::vector<SampleResult> logprobs;
};

inline EngineConfig small_config(std::int32_t num_pages = 64, std::int32_t page_size = 8) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 16;
  config.scheduler.max_num_batched_tokens = 64;
  config.scheduler.max_model_len = 256;
  config.cache.page_size = page_size;
  config.cache.num_pages = num_pages;
  config.cache.num_snapshot_slots = 32;
  config.eos_token_ids = {0};
  return config;
}

inline std::unique_ptr<Engine> make_engine(const EngineConfig& config, FakeModelConfig model = {},
                                           bool with_detokenizer = false) {
  auto runner = std::make_unique<FakeModelRunner>(model);
  std::shared_ptr<const Detokenizer> detok;
  if (with_detokenizer) detok = std::make_shared<ToyDetokenizer>();
  return std::make_unique<Engine>(config, std::move(runner), detok);
}

// Steps until every request finished; returns request id -> completions. Checks the scheduler's
// reference counts after every step without a step in flight, and that the engine does not stall.
inline std::map<std::string, std::vector<Generated>> run_to_completion(Engine& engine, int max_steps = 100000) {
  std::map<std::string, std::vector<Generated>> out;
  for (int step = 0; engine.has_unfinished(); ++step) {
    if (step >= max_steps) throw Error("engine did not finish within the step limit");
    for (RequestOutput& r : engine.step()) {
      auto& completions = out[r.request_id];
      for (CompletionOutput& c : r.completions) {
        if (completions.size() <= static_cast<std::size_t>(c.index)) completions.resize(static_cast<std::size_t>(c.index) + 1);
        Generated& g = completions[static_cast<std::size_t>(c.index)];
        g.tokens.insert(g.tokens.end(), c.token_ids.begin(), c.token_ids.end());
        g.text += c.text;
        g.logprobs.insert(g.logprobs.end(), c.logprobs.begin(), c.logprobs.end());
        if (c.finish_reason != FinishReason::kNone) g.finish = c.finish_reason;
      }
    }
    // A step in flight (overlapped loop) holds pages for tokens not committed yet.
    if (!engine.has_in_flight()) engine.scheduler().check_invariants();
  }
  if (engine.has_in_flight()) {
    EXPECT_TRUE(engine.step().empty());  // only finished sequences were left in flight
    engine.scheduler().check_invariants();
  }
  return out;
}

// The oracle: what one completion must produce, by a plain loop over cache-free logits.
inline Generated reference_generate(const FakeModelRunner& model, std::vector<std::int32_t> history,
                                    const SamplingParams& params, std::uint64_t seed, const EngineConfig& config,
                                    TokenConstraint* constraint = nullptr) {
  Sampler sampler(model.vocab_size());
  PenaltyState penalties;
  penalties.reset(history);
  std::vector<std::int32_t> banned = params.stop_token_ids;
  if (!params.ignore_eos) banned.insert(banned.end(), config.eos_token_ids.begin(), config.eos_token_ids.end());
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  std::vector<std::uint32_t> mask((static_cast<std::size_t>(model.vocab_size()) + 31) / 32);
  Generated g;
  while (true) {
    model.reference_logits(history, logits);
    SampleContext ctx;
    if (constraint != nullptr) {
      constraint->fill_next_token_bitmask(mask);
      ctx.allowed = mask;
    }
    ctx.params = &params;
    ctx.seed = seed;
    ctx.position = static_cast<std::uint32_t>(history.size());
    ctx.history = &penalties;
    const auto n = static_cast<std::int32_t>(g.tokens.size());
    if (n < params.min_tokens) ctx.banned = banned;
    SampleResult r = sampler.sample(logits, ctx);
    history.push_back(r.token);
    penalties.add_output(r.token);
    g.tokens.push_back(r.token);
    if (params.logprobs) g.logprobs.push_back(r);
    if (constraint != nullptr && !constraint->accept_token(r.token)) {
      g.finish = FinishReason::kError;
      return g;
    }
    const bool may_stop = n + 1 >= params.min_tokens;
    const bool eos = !params.ignore_eos &&
                     std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), r.token) != config.eos_token_ids.end();
    const bool stop_id = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), r.token) != params.stop_token_ids.end();
    if ((may_stop && (eos || stop_id)) || (constraint != nullptr && constraint->is_terminated())) {
      g.finish = FinishReason::kStop;
      return g;
    }
    if ((params.max_tokens && n + 1 >= *params.max_tokens) ||
        static_cast<std::int32_t>(history.size()) >= config.scheduler.max_model_len) {
      g.finish = FinishReason::kLength;
      return g;
    }
  }
}

inline std::vector<std::int32_t> make_prompt(std::int32_t length, std::uint32_t salt, std::int32_t vocab) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(length));
  for (std::int32_t i = 0; i < length; ++i) {
    // Avoid the EOS id 0 in prompts to keep expectations simple.
    p[static_cast<std::size_t>(i)] = 1 + static_cast<std::int32_t>(philox_bits(salt, static_cast<std::uint32_t>(i),
                                                                                  RandomPurpose::kDraftSample, 0) %
                                                                      static_cast<std::uint32_t>(vocab - 1));
  }
  return p;
}

}  // namespace deepinfer::engine::testing
