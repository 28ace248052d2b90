// The engine end to end over the fake model: every output equals the cache-free oracle, whatever
// the batch, arrival order, prefix reuse, preemption, n > 1 forks or speculative drafts.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine_test_support.h"

namespace deepinfer::engine {
namespace {

using testing::Generated;
using testing::make_engine;
using testing::make_prompt;
using testing::reference_generate;
using testing::run_to_completion;
using testing::small_config;

struct Case {
  std::string id;
  std::vector<std::int32_t> prompt;
  SamplingParams params;
};

// A mix of 16 requests: greedy, seeded with filters and penalties, different lengths.
std::vector<Case> mixed_cases(std::int32_t vocab) {
  std::vector<Case> cases;
  for (std::int32_t i = 0; i < 16; ++i) {
    Case c;
    c.id = "r" + std::to_string(i);
    c.prompt = make_prompt(3 + (i * 7) % 40, 100 + static_cast<std::uint32_t>(i), vocab);
    c.params.max_tokens = 5 + (i * 3) % 17;
    c.params.seq_seed = 1000 + static_cast<std::uint64_t>(i);
    switch (i % 4) {
      case 0: c.params.temperature = 0.0f; break;
      case 1: c.params.temperature = 0.8f; c.params.top_k = 10; break;
      case 2: c.params.temperature = 1.2f; c.params.top_p = 0.9f; c.params.min_p = 0.05f; break;
      default:
        c.params.temperature = 1.0f;
        c.params.repetition_penalty = 1.3f;
        c.params.frequency_penalty = 0.5f;
        c.params.presence_penalty = -0.3f;
        c.params.logit_bias = {{5, 2.0f}};
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::map<std::string, std::vector<Generated>> run_cases(const EngineConfig& config, const std::vector<Case>& cases,
                                                         FakeModelConfig model = {}) {
  auto engine = make_engine(config, model);
  for (const Case& c : cases) engine->add_request(c.id, c.prompt, c.params);
  return run_to_completion(*engine);
}

void expect_matches_reference(const std::map<std::string, std::vector<Generated>>& got, const std::vector<Case>& cases,
                              const EngineConfig& config, FakeModelConfig model = {}) {
  const FakeModelRunner oracle(model);
  for (const Case& c : cases) {
    ASSERT_EQ(got.count(c.id), 1u) << c.id;
    const auto& completions = got.at(c.id);
    ASSERT_EQ(completions.size(), static_cast<std::size_t>(c.params.n)) << c.id;
    for (std::int32_t i = 0; i < c.params.n; ++i) {
      const Generated want = reference_generate(oracle, c.prompt, c.params,
                                                derive_seed(*c.params.seq_seed, static_cast<std::uint32_t>(i)), config);
      EXPECT_EQ(completions[static_cast<std::size_t>(i)].tokens, want.tokens) << c.id << " completion " << i;
      EXPECT_EQ(completions[static_cast<std::size_t>(i)].finish, want.finish) << c.id << " completion " << i;
    }
  }
}

TEST(Engine, OutputsEqualTheCacheFreeReference) {
  for (std::int32_t workers : {0, 3}) {
    EngineConfig config = small_config();
    config.worker_threads = workers;  // sampling split over worker threads gives the same tokens
    const std::vector<Case> cases = mixed_cases(64);
    expect_matches_reference(run_cases(config, cases), cases, config);
  }
}

TEST(Engine, SeededRequestGivesTheSameTokensAloneBatchedAndReordered) {
  const EngineConfig config = small_config();
  std::vector<Case> cases = mixed_cases(64);
  const Case probe = cases[5];  // seeded, temperature 0.8, top-k
  const auto alone = run_cases(config, {probe}).at(probe.id);
  const auto batched = run_cases(config, cases).at(probe.id);
  std::reverse(cases.begin(), cases.end());
  EngineConfig tight = config;
  tight.scheduler.max_num_batched_tokens = 16;  // different chunking and batch shapes too
  const auto reordered = run_cases(tight, cases).at(probe.id);
  ASSERT_FALSE(alone[0].tokens.empty());
  EXPECT_EQ(alone[0].tokens, batched[0].tokens);
  EXPECT_EQ(alone[0].tokens, reordered[0].tokens);
}

TEST(Engine, PrefixReuseGivesIdenticalOutputsAndSavesCompute) {
  const std::vector<std::int32_t> shared = make_prompt(50, 7, 64);
  std::vector<Case> cases;
  for (std::int32_t i = 0; i < 6; ++i) {
    Case c;
    c.id = "p" + std::to_string(i);
    c.prompt = shared;
    const std::vector<std::int32_t> tail = make_prompt(1 + i * 3, 900 + static_cast<std::uint32_t>(i), 64);
    c.prompt.insert(c.prompt.end(), tail.begin(), tail.end());
    c.params.max_tokens = 12;
    c.params.temperature = i % 2 == 0 ? 0.0f : 0.9f;
    c.params.seq_seed = 77 + static_cast<std::uint64_t>(i);
    cases.push_back(c);
  }
  for (bool fixed_state : {true, false}) {
    FakeModelConfig model;
    model.fixed_state = fixed_state;
    EngineConfig with_cache = small_config();
    with_cache.scheduler.max_num_seqs = 2;  // later requests run after earlier ones filled the cache
    with_cache.scheduler.max_num_batched_tokens = 32;
    EngineConfig without_cache = with_cache;
    without_cache.cache.enable_prefix_caching = false;

    auto engine = make_engine(with_cache, model);
    for (const Case& c : cases) engine->add_request(c.id, c.prompt, c.params);
    const auto cached = run_to_completion(*engine);
    const auto uncached = run_cases(without_cache, cases, model);
    for (const Case& c : cases) EXPECT_EQ(cached.at(c.id)[0].tokens, uncached.at(c.id)[0].tokens) << c.id;
    expect_matches_reference(cached, cases, with_cache, model);

    const cache::PrefixCacheStats& stats = engine->scheduler().prefix_cache()->stats();
    EXPECT_GE(stats.hits, 4) << "fixed_state " << fixed_state;
    EXPECT_GE(stats.hit_tokens, 4 * 48);  // six full pages of 8 tokens shared
    EXPECT_LT(engine->stats().prefill_tokens, 6 * 50);
  }
}

TEST(Engine, MultiTurnContinuationResumesFromADecodeSnapshot) {
  EngineConfig config = small_config();
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 30;
  auto engine = make_engine(config);
  const std::vector<std::int32_t> prompt = make_prompt(13, 3, 64);
  engine->add_request("turn1", prompt, params);
  const Generated first = run_to_completion(*engine).at("turn1")[0];
  ASSERT_EQ(first.tokens.size(), 30u);
  // The next turn's prompt is the whole first conversation plus a new message.
  std::vector<std::int32_t> next = prompt;
  next.insert(next.end(), first.tokens.begin(), first.tokens.end());
  const std::vector<std::int32_t> message = make_prompt(5, 4, 64);
  next.insert(next.end(), message.begin(), message.end());
  const std::int64_t before = engine->stats().prefill_tokens;
  engine->add_request("turn2", next, params);
  const Generated second = run_to_completion(*engine).at("turn2")[0];
  // 13 + 30 = 43 tokens were absorbed in turn 1; the decode snapshot at 40 lets turn 2 skip 40.
  EXPECT_EQ(engine->stats().prefill_tokens - before, static_cast<std::int64_t>(next.size()) - 40);
  const FakeModelRunner oracle;
  EXPECT_EQ(second.tokens, reference_generate(oracle, next, params, 0, config).tokens);
}

TEST(Engine, PreemptionByRecomputeGivesIdenticalOutputs) {
  for (bool caching : {true, false}) {
    EngineConfig config = small_config(/*num_pages=*/34, /*page_size=*/8);
    config.scheduler.max_model_len = 200;
    config.cache.admission_watermark = 0.0;
    config.cache.enable_prefix_caching = caching;
    std::vector<Case> cases = mixed_cases(64);
    for (Case& c : cases) c.params.max_tokens = 60;  // long outputs: the cache cannot hold them all
    auto engine = make_engine(config);
    for (const Case& c : cases) engine->add_request(c.id, c.prompt, c.params);
    const auto got = run_to_completion(*engine);
    EXPECT_GT(engine->scheduler().stats().preemptions, 0) << "caching " << caching;
    expect_matches_reference(got, cases, config);
  }
}

TEST(Engine, NCompletionsShareThePromptPagesAndFollowDerivedSeeds) {
  EngineConfig config = small_config();
  for (bool fixed_state : {true, false}) {
    for (bool caching : {true, false}) {
      config.cache.enable_prefix_caching = caching;
      FakeModelConfig model;
      model.fixed_state = fixed_state;
      Case c;
      c.id = "n4";
      c.prompt = make_prompt(37, 11, 64);
      c.params.n = 4;
      c.params.temperature = 1.0f;
      c.params.max_tokens = 9;
      c.params.seq_seed = 5;
      auto engine = make_engine(config, model);
      engine->add_request(c.id, c.prompt, c.params);
      const auto got = run_to_completion(*engine);
      EXPECT_EQ(engine->scheduler().stats().forks, 3) << "caching " << caching << " fixed " << fixed_state;
      // The leader computes the prompt; each sibling only its tail after the 32-token boundary.
      EXPECT_EQ(engine->stats().prefill_tokens, 37 + 3 * (37 - 32));
      expect_matches_reference(got, {c}, config, model);
      EXPECT_NE(got.at("n4")[0].tokens, got.at("n4")[1].tokens);
    }
  }
}

TEST(Engine, AbortFreesPagesAndReportsAbort) {
  EngineConfig config = small_config();
  config.cache.enable_prefix_caching = false;
  auto engine = make_engine(config);
  SamplingParams params;
  params.max_tokens = 100;
  engine->add_request("a", make_prompt(20, 1, 64), params);
  engine->add_request("b", make_prompt(20, 2, 64), params);
  engine->step();
  engine->step();
  EXPECT_GT(engine->scheduler().page_pool().num_in_use(), 0);
  engine->abort("a");
  engine->abort("unknown");  // ignored
  const std::vector<RequestOutput> out = engine->step();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].request_id, "a");
  EXPECT_TRUE(out[0].finished);
  EXPECT_EQ(out[0].completions.at(0).finish_reason, FinishReason::kAbort);
  engine->abort("b");
  engine->step();
  EXPECT_FALSE(engine->has_unfinished());
  EXPECT_EQ(engine->scheduler().page_pool().num_in_use(), 0);
  engine->scheduler().check_invariants();
}

TEST(Engine, FinishReasonsFollowEosStopIdsMinAndMaxTokens) {
  const EngineConfig config = small_config();
  std::vector<Case> cases;
  for (std::int32_t i = 0; i < 24; ++i) {
    Case c;
    c.id = "f" + std::to_string(i);
    c.prompt = make_prompt(4, 300 + static_cast<std::uint32_t>(i), 64);
    c.params.temperature = 1.5f;
    c.params.seq_seed = static_cast<std::uint64_t>(i);
    c.params.max_tokens = 40;
    c.params.logit_bias = {{0, 3.0f}, {7, 2.0f}};  // make EOS (0) and token 7 likely
    if (i % 3 == 0) c.params.stop_token_ids = {7};
    if (i % 3 == 1) c.params.min_tokens = 6;
    if (i % 4 == 2) c.params.ignore_eos = true;
    cases.push_back(c);
  }
  const auto got = run_cases(config, cases);
  expect_matches_reference(got, cases, config);
  int stops = 0;
  for (const Case& c : cases) {
    const Generated& g = got.at(c.id)[0];
    if (g.finish == FinishReason::kStop) ++stops;
    EXPECT_GE(static_cast<std::int32_t>(g.tokens.size()), std::min(c.params.min_tokens + 1, 40));
    if (c.params.ignore_eos && c.params.stop_token_ids.empty()) {
      EXPECT_EQ(g.finish, FinishReason::kLength);
    }
  }
  EXPECT_GT(stops, 5);
}

TEST(Engine, StopStringsCutTheTextAndHoldBackPartialMatches) {
  const EngineConfig config = small_config();
  auto engine = make_engine(config, {}, /*with_detokenizer=*/true);
  SamplingParams free_run;
  free_run.temperature = 0.0f;
  free_run.max_tokens = 20;
  const std::vector<std::int32_t> prompt = make_prompt(6, 21, 64);
  engine->add_request("free", prompt, free_run);
  const Generated full = run_to_completion(*engine).at("free")[0];
  ASSERT_GE(full.text.size(), 8u);
  // Stop at a 3-character piece from the middle of the free-running text.
  const std::string stop = full.text.substr(4, 3);
  SamplingParams stopped = free_run;
  stopped.stop = {stop};
  engine->add_request("stopped", prompt, stopped);
  SamplingParams included = stopped;
  included.include_stop_str_in_output = true;
  engine->add_request("included", prompt, included);
  const auto got = run_to_completion(*engine);
  const std::size_t at = full.text.find(stop);
  EXPECT_EQ(got.at("stopped")[0].text, full.text.substr(0, at));
  EXPECT_EQ(got.at("stopped")[0].finish, FinishReason::kStop);
  EXPECT_EQ(got.at("included")[0].text, full.text.substr(0, at + stop.size()));
  EXPECT_LT(got.at("stopped")[0].tokens.size(), full.tokens.size());
}

TEST(Engine, BadRequestsFailAloneWithClearErrors) {
  const EngineConfig config = small_config();
  auto engine = make_engine(config);
  SamplingParams ok;
  ok.max_tokens = 5;
  engine->add_request("good", make_prompt(5, 1, 64), ok);
  auto expect_error = [&](const std::string& id, std::vector<std::int32_t> prompt, SamplingParams p,
                          const std::string& needle) {
    try {
      engine->add_request(id, std::move(prompt), p);
      ADD_FAILURE() << id << ": no error";
    } catch (const deepinfer::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SamplingParams p = ok;
  p.top_p = 1.5f;
  expect_error("bad-top-p", make_prompt(5, 1, 64), p, "top_p 1.5");
  p = ok;
  p.max_tokens = -3;
  expect_error("bad-max", make_prompt(5, 1, 64), p, "max_tokens -3");
  expect_error("bad-id", {1, 2, 64}, ok, "prompt token 64 at index 2");
  expect_error("too-long", std::vector<std::int32_t>(256, 1), ok, "max_model_len");
  expect_error("good", make_prompt(5, 1, 64), ok, "already running");
  p = ok;
  p.stop = {"x"};
  expect_error("no-tokenizer", make_prompt(5, 1, 64), p, "stop strings need a tokenizer");
  const auto got = run_to_completion(*engine);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(got.at("good")[0].tokens.size(), 5u);
}

TEST(Engine, LogprobsAreTheRawLogSoftmax) {
  const EngineConfig config = small_config();
  Case c;
  c.id = "lp";
  c.prompt = make_prompt(9, 8, 64);
  c.params.max_tokens = 6;
  c.params.temperature = 0.7f;
  c.params.seq_seed = 3;
  c.params.logprobs = 3;
  const auto got = run_cases(config, {c}).at("lp")[0];
  const Generated want = reference_generate(FakeModelRunner(), c.prompt, c.params, 3, config);
  ASSERT_EQ(got.logprobs.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(got.logprobs[i].token, got.tokens[i]);
    EXPECT_FLOAT_EQ(got.logprobs[i].logprob, want.logprobs[i].logprob);
    EXPECT_EQ(got.logprobs[i].top, want.logprobs[i].top);
    ASSERT_EQ(got.logprobs[i].top.size(), 3u);
  }
}

// Proposes the oracle's own continuation, wrong on every third guess.
class OracleDrafter final : public DraftProposer {
 public:
  std::vector<std::int32_t> propose(SeqId seq, std::span<const std::int32_t> tokens, std::int32_t max_tokens) override {
    ++calls_;
    std::vector<std::int32_t> history(tokens.begin(), tokens.end());
    std::vector<std::int32_t> drafts;
    Sampler sampler(oracle_.vocab_size());
    std::vector<float> logits(static_cast<std::size_t>(oracle_.vocab_size()));
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    for (std::int32_t i = 0; i < max_tokens; ++i) {
      oracle_.reference_logits(history, logits);
      SampleContext ctx;
      ctx.params = &greedy;
      std::int32_t t = sampler.sample(logits, ctx).token;
      if ((calls_ + i + static_cast<std::int32_t>(seq)) % 3 == 2) t = (t + 1) % oracle_.vocab_size();
      drafts.push_back(t);
      history.push_back(t);
    }
    return drafts;
  }

 private:
  FakeModelRunner oracle_;
  std::int32_t calls_ = 0;
};

TEST(Engine, SpeculativeDraftsAreVerifiedExactlyAndRolledBack) {
  EngineConfig config = small_config();
  config.scheduler.max_draft_tokens = 4;
  std::vector<Case> cases = mixed_cases(64);
  for (Case& c : cases) c.params.max_tokens = 25;
  auto engine = make_engine(config);
  engine->set_draft_proposer(std::make_shared<OracleDrafter>());
  for (const Case& c : cases) engine->add_request(c.id, c.prompt, c.params);
  const auto got = run_to_completion(*engine);
  expect_matches_reference(got, cases, config);
  EXPECT_GT(engine->stats().accepted_draft_tokens, 50);
  EXPECT_LT(engine->stats().accepted_draft_tokens, engine->stats().draft_tokens);  // some were rolled back
}

TEST(Engine, DataParallelRanksRunSideBySideWithTheirOwnSeeds) {
  EngineConfig rank0 = small_config(), rank1 = small_config();
  rank1.dp_rank = 1;
  auto e0 = make_engine(rank0), e1 = make_engine(rank1), e0b = make_engine(rank0);
  SamplingParams unseeded;
  unseeded.temperature = 1.0f;
  unseeded.max_tokens = 16;
  const std::vector<std::int32_t> prompt = make_prompt(10, 9, 64);
  for (Engine* e : {e0.get(), e1.get(), e0b.get()}) e->add_request("x", prompt, unseeded);
  // Interleave the steps: nothing is shared between engines.
  while (e0->has_unfinished() || e1->has_unfinished() || e0b->has_unfinished()) {
    for (Engine* e : {e0.get(), e1.get(), e0b.get()}) {
      if (e->has_unfinished()) e->step();
    }
  }
  auto tokens_of = [&](Engine& e) {
    e.add_request("y", prompt, unseeded);
    return run_to_completion(e).at("y")[0].tokens;
  };
  const auto t0 = tokens_of(*e0), t1 = tokens_of(*e1), t0b = tokens_of(*e0b);
  EXPECT_EQ(t0, t0b);  // same rank and seed: the same stream of request seeds
  EXPECT_NE(t0, t1);
}

// With worker threads, a step that only prefills (a long prompt chunked by the token budget) has
// no sequence to sample; it must not split zero sampling jobs over the workers.
TEST(Engine, WorkerThreadsHandleStepsWithNothingToSample) {
  EngineConfig config = small_config();
  config.worker_threads = 2;
  config.scheduler.max_num_batched_tokens = 16;
  Case c;
  c.id = "long";
  c.prompt = make_prompt(60, 77, 64);
  c.params.max_tokens = 4;
  c.params.temperature = 0.9f;
  c.params.seq_seed = 9;
  const auto got = run_cases(config, {c});
  expect_matches_reference(got, {c}, config);
}

// A vocabulary padded past the tokenizer's: the padded ids must never be sampled, not even when a
// logit bias makes them the most likely tokens, greedy or sampled, with logprobs asked for.
TEST(Engine, UnsampleableIdsAreNeverSampled) {
  EngineConfig config = small_config();
  std::vector<std::int32_t> padded;
  for (std::int32_t id = 48; id < 64; ++id) padded.push_back(id);
  std::vector<Case> cases;
  for (std::int32_t i = 0; i < 12; ++i) {
    Case c;
    c.id = "p" + std::to_string(i);
    c.prompt = make_prompt(5 + i, 700 + static_cast<std::uint32_t>(i), 64);
    c.params.max_tokens = 24;
    c.params.ignore_eos = true;
    c.params.seq_seed = static_cast<std::uint64_t>(i);
    c.params.temperature = i % 3 == 0 ? 0.0f : 2.0f;
    c.params.logit_bias = {{50, 100.0f}, {63, 50.0f}};
    if (i % 2 == 1) c.params.logprobs = 5;
    cases.push_back(std::move(c));
  }
  // Without the mask the biased padded ids win almost every draw (so the test can fail).
  const auto unmasked = run_cases(config, cases);
  std::size_t picked = 0;
  for (const auto& [id, completions] : unmasked)
    for (std::int32_t t : completions[0].tokens) picked += t >= 48 ? 1 : 0;
  ASSERT_GT(picked, 100u);

  config.unsampleable_token_ids = padded;
  for (const auto& [id, completions] : run_cases(config, cases)) {
    ASSERT_EQ(completions[0].tokens.size(), 24u) << id;
    for (std::int32_t t : completions[0].tokens) EXPECT_LT(t, 48) << id;
    for (const SampleResult& lp : completions[0].logprobs)
      for (const TokenLogprob& top : lp.top) EXPECT_LT(top.token, 48) << id;
  }
  config.unsampleable_token_ids = {64};
  EXPECT_THROW(make_engine(config), deepinfer::Error);
}

}  // namespace
}  // namespace deepinfer::engine
