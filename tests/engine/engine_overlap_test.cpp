// The overlapped step loop and device sampling against the synchronous host loop: the same
// tokens, text, finish reasons and logprobs for every request, whatever the loop and wherever the
// sampling runs; aborts and stop strings that land while a step is in flight lose nothing.
#include <gtest/gtest.h>

#include <functional>

#include "engine/engine_test_support.h"

namespace deepinfer::engine {
namespace {

using testing::Generated;
using testing::make_engine;
using testing::make_prompt;
using testing::run_to_completion;
using testing::small_config;

// Proposes the last token twice: often wrong, sometimes right, so verification runs both ways.
class RepeatLastDrafter final : public DraftProposer {
 public:
  std::vector<std::int32_t> propose(SeqId, std::span<const std::int32_t> tokens, std::int32_t max_tokens) override {
    std::vector<std::int32_t> out(static_cast<std::size_t>(std::min(max_tokens, 2)), tokens.back());
    return out;
  }
};

struct LoopSetup {
  EngineConfig::Overlap overlap = EngineConfig::Overlap::kOff;
  bool device = false;  // fake logits on a CPU ops backend: sampled by Backend::sample_tokens
  bool drafts = false;
  bool ahead = true;  // EngineConfig::launch_ahead (used with overlap and device sampling)
};

std::unique_ptr<Engine> make_loop_engine(const LoopSetup& setup) {
  EngineConfig config = small_config(256);
  config.overlap = setup.overlap;
  config.unsampleable_token_ids = {61, 62};
  config.scheduler.max_draft_tokens = setup.drafts ? 2 : 0;
  config.launch_ahead = setup.ahead;
  FakeModelConfig model;
  model.device_logits = setup.device;
  auto engine = make_engine(config, model, /*with_detokenizer=*/true);
  if (setup.drafts) engine->set_draft_proposer(std::make_shared<RepeatLastDrafter>());
  return engine;
}

// A mixed workload: greedy and seeded sampling with every filter, penalties, bias, min_tokens,
// stop strings and stop ids, n = 2, logprobs.
void add_workload(Engine& engine) {
  for (int i = 0; i < 24; ++i) {
    SamplingParams p;
    p.seq_seed = 1000 + static_cast<std::uint64_t>(i);
    p.max_tokens = 6 + (i * 7) % 30;
    p.temperature = i % 5 == 0 ? 0.0f : 0.7f + 0.1f * static_cast<float>(i % 4);
    if (i % 3 == 1) p.top_k = 5 + i % 7;
    if (i % 4 == 2) p.top_p = 0.8f;
    if (i % 6 == 3) p.min_p = 0.05f;
    if (i % 5 == 1) p.repetition_penalty = 1.3f;
    if (i % 7 == 2) {
      p.frequency_penalty = 0.5f;
      p.presence_penalty = -0.25f;
    }
    if (i % 4 == 3) p.logit_bias = {{3, 2.5f}, {7, -4.0f}};
    if (i % 6 == 4) p.min_tokens = 4;
    if (i % 3 == 2) p.stop = {"e", "ab"};
    if (i % 8 == 5) p.stop_token_ids = {9, 11};
    if (i % 9 == 4) p.n = 2;
    if (i % 4 == 1) p.logprobs = 3;
    engine.add_request("r" + std::to_string(i), make_prompt(5 + i % 11, static_cast<std::uint32_t>(i), 60), p);
  }
}

void expect_same_outputs(const std::map<std::string, std::vector<Generated>>& want,
                         const std::map<std::string, std::vector<Generated>>& got, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [id, completions] : want) {
    const auto it = got.find(id);
    ASSERT_NE(it, got.end()) << what << ": " << id;
    ASSERT_EQ(it->second.size(), completions.size()) << what << ": " << id;
    for (std::size_t c = 0; c < completions.size(); ++c) {
      const Generated& a = completions[c];
      const Generated& b = it->second[c];
      SCOPED_TRACE(::testing::Message() << what << ": " << id << " completion " << c);
      EXPECT_EQ(b.tokens, a.tokens);
      EXPECT_EQ(b.text, a.text);
      EXPECT_EQ(b.finish, a.finish);
      ASSERT_EQ(b.logprobs.size(), a.logprobs.size());
      for (std::size_t t = 0; t < a.logprobs.size(); ++t) {
        EXPECT_EQ(b.logprobs[t].token, a.logprobs[t].token);
        EXPECT_EQ(b.logprobs[t].logprob, a.logprobs[t].logprob);
        EXPECT_EQ(b.logprobs[t].rank, a.logprobs[t].rank);
        EXPECT_EQ(b.logprobs[t].top, a.logprobs[t].top);
      }
    }
  }
}

std::map<std::string, std::vector<Generated>> run_workload(const LoopSetup& setup, Engine** keep = nullptr) {
  static std::unique_ptr<Engine> last;
  last = make_loop_engine(setup);
  add_workload(*last);
  if (keep != nullptr) *keep = last.get();
  return run_to_completion(*last);
}

// Runs the requests `add` queues on a fresh engine of `setup`; the engine stays alive in *keep.
std::map<std::string, std::vector<Generated>> run_requests(const LoopSetup& setup,
                                                           const std::function<void(Engine&)>& add,
                                                           Engine** keep = nullptr) {
  static std::unique_ptr<Engine> last;
  last = make_loop_engine(setup);
  add(*last);
  if (keep != nullptr) *keep = last.get();
  return run_to_completion(*last);
}

TEST(EngineOverlap, EveryLoopAndSamplingPlaceGivesTheSynchronousHostOutputs) {
  for (const bool drafts : {false, true}) {
    const auto want = run_workload({EngineConfig::Overlap::kOff, false, drafts});
    Engine* engine = nullptr;
    expect_same_outputs(want, run_workload({EngineConfig::Overlap::kOn, false, drafts}, &engine), "overlapped host");
    EXPECT_TRUE(engine->overlapped());
    expect_same_outputs(want, run_workload({EngineConfig::Overlap::kOff, true, drafts}, &engine), "sync device");
    EXPECT_GT(engine->stats().device_sampled_rows, 0);
    expect_same_outputs(want, run_workload({EngineConfig::Overlap::kAuto, true, drafts}, &engine), "overlapped device");
    EXPECT_TRUE(engine->overlapped());  // kAuto: on, since the logits live on a (CPU ops) backend
    if (drafts) {
      EXPECT_GT(engine->stats().accepted_draft_tokens, 0);
      EXPECT_FALSE(engine->launches_ahead());  // a step's drafts come from the previous step's tokens
      EXPECT_EQ(engine->stats().steps_launched_ahead, 0);
    } else {
      EXPECT_TRUE(engine->launches_ahead());
      EXPECT_GT(engine->stats().steps_launched_ahead, 10);
      expect_same_outputs(want, run_workload({EngineConfig::Overlap::kOn, true, drafts, false}, &engine),
                          "overlapped device, collected before each launch");
      EXPECT_EQ(engine->stats().steps_launched_ahead, 0);
    }
  }
}

TEST(EngineOverlap, OverlappedLoopKeepsAStepInFlightBetweenCalls) {
  auto engine = make_loop_engine({EngineConfig::Overlap::kOn, true, false});
  add_workload(*engine);
  engine->step();  // launches the first batch, reports nothing of it yet
  EXPECT_TRUE(engine->has_in_flight());
  run_to_completion(*engine);
  EXPECT_FALSE(engine->has_unfinished());
}

TEST(EngineOverlap, AbortWhileAStepIsInFlightLosesNothing) {
  const auto want = run_workload({EngineConfig::Overlap::kOff, false, false});
  auto engine = make_loop_engine({EngineConfig::Overlap::kOn, true, false});
  add_workload(*engine);
  std::map<std::string, std::vector<Generated>> got;
  int aborted_reports = 0;
  for (int step = 0; engine->has_unfinished(); ++step) {
    ASSERT_LT(step, 10000);
    if (step == 4) {
      ASSERT_TRUE(engine->has_in_flight());
      engine->abort("r7");
      engine->abort("r4");  // n = 2
    }
    for (RequestOutput& r : engine->step()) {
      auto& completions = got[r.request_id];
      for (CompletionOutput& c : r.completions) {
        if (completions.size() <= static_cast<std::size_t>(c.index)) completions.resize(static_cast<std::size_t>(c.index) + 1);
        Generated& g = completions[static_cast<std::size_t>(c.index)];
        g.tokens.insert(g.tokens.end(), c.token_ids.begin(), c.token_ids.end());
        g.text += c.text;
        if (c.finish_reason == FinishReason::kAbort) ++aborted_reports;
        if (c.finish_reason != FinishReason::kNone) g.finish = c.finish_reason;
      }
    }
    if (!engine->has_in_flight()) engine->scheduler().check_invariants();
  }
  EXPECT_EQ(aborted_reports, 3);  // r7, and both completions of r4
  for (const auto& [id, completions] : want) {
    for (std::size_t c = 0; c < completions.size(); ++c) {
      const Generated& a = completions[c];
      const Generated& b = got.at(id).at(c);
      if (id == "r7" || id == "r4") {
        // What was reported before the abort is exactly the start of the full generation.
        EXPECT_EQ(b.finish, FinishReason::kAbort) << id;
        ASSERT_LE(b.tokens.size(), a.tokens.size()) << id;
        EXPECT_TRUE(std::equal(b.tokens.begin(), b.tokens.end(), a.tokens.begin())) << id;
        continue;
      }
      EXPECT_EQ(b.tokens, a.tokens) << id;
      EXPECT_EQ(b.text, a.text) << id;
      EXPECT_EQ(b.finish, a.finish) << id;
    }
  }
}

TEST(EngineOverlap, StopStringFoundAfterTheNextStepLaunchedEndsTheRequestOnce) {
  // Greedy requests whose stop string completes mid-generation: the overlapped loop has already
  // launched the next step for them when the text shows the stop; that token is dropped.
  const auto run = [](EngineConfig::Overlap overlap) {
    auto engine = make_loop_engine({overlap, true, false});
    for (int i = 0; i < 6; ++i) {
      SamplingParams p;
      p.temperature = 0.0f;
      p.max_tokens = 40;
      p.stop = {"e", "c", "a"};
      engine->add_request("s" + std::to_string(i), make_prompt(7 + i, 50u + static_cast<std::uint32_t>(i), 60), p);
    }
    std::map<std::string, int> finished;
    std::map<std::string, std::vector<Generated>> out;
    while (engine->has_unfinished()) {
      for (RequestOutput& r : engine->step()) {
        if (r.finished) ++finished[r.request_id];
        for (CompletionOutput& c : r.completions) {
          auto& g = out[r.request_id];
          g.resize(1);
          g[0].tokens.insert(g[0].tokens.end(), c.token_ids.begin(), c.token_ids.end());
          g[0].text += c.text;
          if (c.finish_reason != FinishReason::kNone) g[0].finish = c.finish_reason;
        }
      }
      if (!engine->has_in_flight()) engine->scheduler().check_invariants();
    }
    for (const auto& [id, n] : finished) EXPECT_EQ(n, 1) << id;
    return out;
  };
  const auto want = run(EngineConfig::Overlap::kOff);
  int stopped = 0;
  for (const auto& [id, g] : want) stopped += g[0].finish == FinishReason::kStop ? 1 : 0;
  EXPECT_GT(stopped, 0);
  expect_same_outputs(want, run(EngineConfig::Overlap::kOn), "overlapped");
}

TEST(EngineOverlap, StructuredOutputMasksGiveTheSameOutputsOnTheDeviceAndOverlapped) {
  // Masks fill on the workers while the forward runs; on the device path they are uploaded when
  // ready and the sampling is queued after them.
  const auto run = [](EngineConfig::Overlap overlap, bool device) {
    EngineConfig config = small_config(256);
    config.overlap = overlap;
    config.worker_threads = 2;
    FakeModelConfig model;
    model.device_logits = device;
    auto engine = make_engine(config, model);
    engine->set_constraint_factory(std::make_shared<testing::ModuloConstraintFactory>(64));
    for (int i = 0; i < 10; ++i) {
      SamplingParams p;
      p.temperature = i % 3 == 0 ? 0.0f : 0.9f;
      p.seq_seed = 70 + static_cast<std::uint64_t>(i);
      p.max_tokens = 20;
      p.logprobs = i % 2 == 0 ? std::optional<std::int32_t>(2) : std::nullopt;
      if (i % 4 != 3) p.so_args = StructuredOutputArgs{"regex", "mod:" + std::to_string(2 + i % 3)};
      engine->add_request("c" + std::to_string(i), make_prompt(6 + i, 90u + static_cast<std::uint32_t>(i), 60), p);
    }
    return run_to_completion(*engine);
  };
  const auto want = run(EngineConfig::Overlap::kOff, false);
  int completed = 0;  // constraints that reached their end (6 allowed tokens, then EOS)
  for (const auto& [id, g] : want) completed += g[0].finish == FinishReason::kStop && g[0].tokens.size() == 7 ? 1 : 0;
  EXPECT_GE(completed, 5);
  expect_same_outputs(want, run(EngineConfig::Overlap::kOff, true), "sync device");
  expect_same_outputs(want, run(EngineConfig::Overlap::kOn, false), "overlapped host");
  expect_same_outputs(want, run(EngineConfig::Overlap::kOn, true), "overlapped device");
}

TEST(EngineOverlap, AModelErrorWhileOverlappedEndsThatBatchsRequestsAndTheEngineGoesOn) {
  EngineConfig config = small_config();
  config.overlap = EngineConfig::Overlap::kOn;
  config.worker_threads = 2;
  Engine engine(config, std::make_unique<testing::FailingRunner>());
  SamplingParams p;
  p.max_tokens = 10;
  engine.add_request("a", make_prompt(6, 1, 64), p);
  engine.add_request("b", make_prompt(6, 2, 64), p);
  int threw_at = -1;
  for (int step = 0; step < 6 && threw_at < 0; ++step) {
    try {
      engine.step();
    } catch (const Error&) {
      threw_at = step;
    }
  }
  ASSERT_GE(threw_at, 0);
  EXPECT_FALSE(engine.has_in_flight());
  const std::vector<RequestOutput> out = engine.step();
  ASSERT_EQ(out.size(), 2u);
  for (const RequestOutput& r : out) {
    EXPECT_TRUE(r.finished);
    EXPECT_EQ(r.completions.at(0).finish_reason, FinishReason::kError);
  }
  EXPECT_EQ(engine.scheduler().page_pool().num_in_use(), 0);
  p.ignore_eos = true;  // exactly max_tokens, whatever the seed the engine draws for it
  engine.add_request("c", make_prompt(6, 3, 64), p);
  const auto got = run_to_completion(engine);
  EXPECT_EQ(got.at("c")[0].tokens.size(), 10u);
  EXPECT_EQ(got.at("c")[0].finish, FinishReason::kLength);
}

// Requests without penalties or constraints: every decode step after the first is launched before
// the previous step's tokens are on the host. Requests finishing (EOS, stop ids, max_tokens, stop
// strings) leave a wasted row in the step launched ahead of their end, never a wrong token.
TEST(EngineOverlap, LaunchingAheadKeepsOutputsAndWastesOnlyRowsOfFinishedSequences) {
  const auto run = [](EngineConfig::Overlap overlap, bool device, Engine** keep) {
    return run_requests({overlap, device, false}, [](Engine& engine) {
      for (int i = 0; i < 12; ++i) {
        SamplingParams p;
        p.seq_seed = 300 + static_cast<std::uint64_t>(i);
        p.max_tokens = 5 + i * 3;
        p.temperature = i % 4 == 0 ? 0.0f : 1.0f;
        if (i % 3 == 1) p.top_k = 8;
        if (i % 3 == 2) p.top_p = 0.9f;
        if (i % 5 == 3) p.min_p = 0.02f;
        if (i % 4 == 1) p.stop_token_ids = {5};
        if (i % 6 == 2) p.stop = {"d"};
        if (i % 5 == 4) p.min_tokens = 3;
        if (i % 2 == 1) p.logprobs = 2;
        engine.add_request("a" + std::to_string(i), make_prompt(4 + i, 700u + static_cast<std::uint32_t>(i), 60), p);
      }
    }, keep);
  };
  const auto want = run(EngineConfig::Overlap::kOff, false, nullptr);
  Engine* engine = nullptr;
  const auto got = run(EngineConfig::Overlap::kOn, true, &engine);
  expect_same_outputs(want, got, "launched ahead");
  const EngineStats& st = engine->stats();
  EXPECT_GT(st.steps_launched_ahead, 20);
  EXPECT_GE(st.steps_launched_ahead, st.steps - 4);  // all but the first steps and the drain
  EXPECT_GT(st.wasted_rows, 0);
  EXPECT_LE(st.wasted_rows, 12);  // at most one per completion
  EXPECT_EQ(engine->scheduler().page_pool().num_in_use(), 0);
}

// A token that reaches max_tokens is the last whatever it is: its sequence leaves the scheduler
// when that step is committed ahead, so no step computes a row for it in vain.
TEST(EngineOverlap, LengthLimitedSequencesLeaveBeforeTheStepLaunchedAhead) {
  const auto run = [](EngineConfig::Overlap overlap, bool device, Engine** keep) {
    return run_requests({overlap, device, false}, [](Engine& engine) {
      // First, and longer than a step's token budget (64): the first steps are prefill chunks
      // without logits, and the steps after them have no placeholders to resolve.
      SamplingParams first;
      first.seq_seed = 49;
      first.max_tokens = 20;
      first.ignore_eos = true;
      engine.add_request("long", make_prompt(150, 999u, 60), first);
      for (int i = 0; i < 8; ++i) {
        SamplingParams p;
        p.seq_seed = 40 + static_cast<std::uint64_t>(i);
        p.max_tokens = 3 + 4 * i;
        p.ignore_eos = true;
        p.top_k = 20;
        p.top_p = 0.95f;
        engine.add_request("l" + std::to_string(i), make_prompt(5 + i, 900u + static_cast<std::uint32_t>(i), 60), p);
      }
    }, keep);
  };
  const auto want = run(EngineConfig::Overlap::kOff, false, nullptr);
  Engine* engine = nullptr;
  expect_same_outputs(want, run(EngineConfig::Overlap::kOn, true, &engine), "length limits");
  EXPECT_EQ(engine->stats().wasted_rows, 0);
  EXPECT_GT(engine->stats().steps_launched_ahead, 20);
}

// Penalised rows launched ahead: the previous step's token joins their history on the device
// (Backend::add_sampled_to_history), so the penalties see exactly what the host loop's see.
TEST(EngineOverlap, PenalisedRowsLaunchedAheadGetThePendingTokenInTheirHistory) {
  const auto run = [](EngineConfig::Overlap overlap, bool device, Engine** keep) {
    return run_requests({overlap, device, false}, [](Engine& engine) {
      for (int i = 0; i < 6; ++i) {
        SamplingParams p;
        p.seq_seed = 90 + static_cast<std::uint64_t>(i);
        p.max_tokens = 24;
        p.temperature = i % 3 == 0 ? 0.0f : 1.0f;
        p.repetition_penalty = i % 2 == 0 ? 1.4f : 1.0f;
        if (i % 3 != 2) {
          p.frequency_penalty = 0.6f;
          p.presence_penalty = i == 1 ? -0.3f : 0.4f;
        }
        engine.add_request("p" + std::to_string(i), make_prompt(6, 800u + static_cast<std::uint32_t>(i), 60), p);
      }
    }, keep);
  };
  const auto want = run(EngineConfig::Overlap::kOff, false, nullptr);
  Engine* engine = nullptr;
  expect_same_outputs(want, run(EngineConfig::Overlap::kOn, true, &engine), "penalties");
  EXPECT_GE(engine->stats().steps_launched_ahead, 20);
}

// The model fails while a step is launched ahead of another: both batches' requests end with
// kError, the other step is still collected, and the engine goes on.
TEST(EngineOverlap, AModelErrorWhileLaunchingAheadEndsTheRequestsAndTheEngineGoesOn) {
  EngineConfig config = small_config(256);
  config.overlap = EngineConfig::Overlap::kOn;
  FakeModelConfig model;
  model.device_logits = true;
  model.fail_at_forward = 4;
  auto engine = make_engine(config, model);
  SamplingParams p;
  p.max_tokens = 10;
  p.ignore_eos = true;
  engine->add_request("a", make_prompt(6, 1, 60), p);
  engine->add_request("b", make_prompt(6, 2, 60), p);
  std::map<std::string, FinishReason> finish;
  std::map<std::string, std::size_t> tokens;
  const auto take = [&](const std::vector<RequestOutput>& outputs) {
    for (const RequestOutput& r : outputs) {
      for (const CompletionOutput& c : r.completions) {
        tokens[r.request_id] += c.token_ids.size();
        if (c.finish_reason != FinishReason::kNone) finish[r.request_id] = c.finish_reason;
      }
    }
  };
  int threw = 0;
  for (int step = 0; step < 40 && engine->has_unfinished(); ++step) {
    try {
      take(engine->step());
    } catch (const Error&) {
      ++threw;
    }
  }
  take(engine->step());  // reports the ended requests
  EXPECT_EQ(threw, 1);
  EXPECT_EQ(finish.at("a"), FinishReason::kError);
  EXPECT_EQ(finish.at("b"), FinishReason::kError);
  EXPECT_LT(tokens["a"], 10u);
  while (engine->has_in_flight()) engine->step();
  EXPECT_EQ(engine->scheduler().page_pool().num_in_use(), 0);
  engine->add_request("c", make_prompt(6, 3, 60), p);
  const auto got = run_to_completion(*engine);
  EXPECT_EQ(got.at("c")[0].tokens.size(), 10u);
  EXPECT_EQ(got.at("c")[0].finish, FinishReason::kLength);
}

}  // namespace
}  // namespace deepinfer::engine
