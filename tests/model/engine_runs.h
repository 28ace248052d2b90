// Helpers of the model-through-engine tests (paged_runner_test, model_v41_test): run requests to
// completion, greedy parameters, and the two-turn prefix-cache comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace deepinfer::test {

struct Result {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;  // the sampled tokens' log-probabilities (when asked for)
};

// Runs the engine until every request has finished; results by request id.
inline std::map<std::string, Result> run(engine::Engine& engine) {
  std::map<std::string, Result> out;
  while (engine.has_unfinished()) {
    for (const engine::RequestOutput& r : engine.step()) {
      for (const engine::CompletionOutput& c : r.completions) {
        EXPECT_NE(c.finish_reason, engine::FinishReason::kError) << r.request_id;
        Result& res = out[r.request_id];
        res.tokens.insert(res.tokens.end(), c.token_ids.begin(), c.token_ids.end());
        for (const engine::SampleResult& s : c.logprobs) res.logprobs.push_back(s.logprob);
      }
    }
  }
  return out;
}

inline engine::SamplingParams greedy(std::int32_t max_tokens, bool logprobs = false) {
  engine::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  if (logprobs) p.logprobs = 0;
  return p;
}

// Two turns on one engine made by make_engine(prefix_caching): `first` generates first_tokens, then
// `second` (a continuation of it) second_tokens. With the cache on, the second turn must hit at
// least min_hit_tokens and give the same tokens and logprobs as without it.
inline void expect_prefix_reuse_equals_no_reuse(
    const std::function<std::unique_ptr<engine::Engine>(bool)>& make_engine, const std::vector<std::int32_t>& first,
    const std::vector<std::int32_t>& second, std::int32_t first_tokens, std::int32_t second_tokens,
    std::int64_t min_hit_tokens) {
  auto results = [&](bool caching) {
    auto engine = make_engine(caching);
    engine->add_request("first", first, greedy(first_tokens, true));
    auto out = run(*engine);
    engine->add_request("second", second, greedy(second_tokens, true));
    out["second"] = run(*engine)["second"];
    const auto* prefix = engine->scheduler().prefix_cache();
    return std::pair{out, prefix ? prefix->stats().hit_tokens : 0};
  };
  const auto [cached, hit_tokens] = results(true);
  const auto [plain, no_hits] = results(false);
  EXPECT_GE(hit_tokens, min_hit_tokens);
  EXPECT_EQ(no_hits, 0);
  for (const char* id : {"first", "second"}) {
    EXPECT_EQ(cached.at(id).tokens, plain.at(id).tokens) << id;
    ASSERT_EQ(cached.at(id).logprobs.size(), plain.at(id).tokens.size()) << id;
    EXPECT_EQ(cached.at(id).logprobs, plain.at(id).logprobs) << id;
  }
}

}  // namespace deepinfer::test
