// The engine on the V4 model on a GPU (skips without one): the loop that launches each step before
// the previous step's tokens reach the host (ids resolved on the device, penalty histories completed
// on the device) gives token for token, logprob for logprob what the loop that collects first and
// the synchronous loop with host sampling give, on dummy weights of the real V4-Flash geometry.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/philox.h"
#include "io/model_config.h"
#include "model/deepseek_v4/dummy_weights.h"
#include "model/deepseek_v4/paged_runner.h"
#include "ops/cuda/cuda_backend.h"
#include "support/gpu_test.h"

namespace deepinfer::engine {
namespace {

struct Loop {
  const char* name;
  EngineConfig::Overlap overlap;
  bool device_sampling;
  bool launch_ahead;
};

struct LoopRun {
  std::map<std::string, std::vector<std::int32_t>> tokens;
  std::map<std::string, std::vector<SampleResult>> logprobs;
  EngineStats stats;
};

// Requests that never finish early (ignore_eos, max_tokens): every loop runs the same batches, so
// the device's (batch-dependent) kernels see the same rows in each. A fresh model (same seed) per
// loop: its decode graphs are keyed by the addresses of the runner's state, which a new runner may reuse.
LoopRun run_loop(const Loop& loop) {
  const io::ModelConfig model_config = model::v4::dummy_model_config(
      io::load_model_config(std::string(DEEPINFER_SOURCE_DIR) + "/tests/io/fixtures/v4_flash.release.json"), 2);
  std::unique_ptr<ops::Backend> backend = ops::make_cuda_backend(0);
  std::unique_ptr<model::SequenceModel> model =
      model::v4::load_dummy_model(model_config, 3, *backend, model::v4::NumericMode::kReferenceQat);
  EngineConfig config;
  config.scheduler.max_num_seqs = 8;
  config.scheduler.max_num_batched_tokens = 512;
  config.scheduler.max_model_len = 256;
  config.cache.page_size = 128;
  config.cache.num_pages = 64;
  config.cache.num_snapshot_slots = 8;
  config.eos_token_ids = {1};
  config.overlap = loop.overlap;
  config.device_sampling = loop.device_sampling;
  config.launch_ahead = loop.launch_ahead;
  Engine engine(config, std::make_unique<model::v4::PagedModelRunner>(*model));
  for (int i = 0; i < 6; ++i) {
    SamplingParams p;
    p.seq_seed = 500 + static_cast<std::uint64_t>(i);
    p.max_tokens = 10 + 2 * i;
    p.ignore_eos = true;
    p.temperature = i % 3 == 0 ? 0.0f : 0.8f;
    if (i % 3 == 1) p.top_k = 50;
    if (i % 2 == 1) p.top_p = 0.9f;
    if (i == 4) p.min_p = 0.05f;
    if (i % 2 == 0) p.repetition_penalty = 1.2f;
    if (i == 2 || i == 5) {
      p.frequency_penalty = 0.5f;
      p.presence_penalty = 0.25f;
    }
    if (i % 2 == 1) p.logprobs = 3;
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(20 + 9 * i));
    for (std::size_t t = 0; t < prompt.size(); ++t) {
      prompt[t] = 2 + static_cast<std::int32_t>(philox_bits(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(t),
                                                            RandomPurpose::kDraftSample, 0) %
                                                100000u);
    }
    engine.add_request("r" + std::to_string(i), prompt, p);
  }
  LoopRun run;
  for (int step = 0; engine.has_unfinished() || engine.has_in_flight(); ++step) {
    if (step > 500) throw Error("engine_cuda_test: the engine did not finish");
    for (const RequestOutput& out : engine.step()) {
      for (const CompletionOutput& c : out.completions) {
        auto& t = run.tokens[out.request_id];
        t.insert(t.end(), c.token_ids.begin(), c.token_ids.end());
        auto& l = run.logprobs[out.request_id];
        l.insert(l.end(), c.logprobs.begin(), c.logprobs.end());
      }
    }
  }
  run.stats = engine.stats();
  return run;
}

TEST(EngineCuda, LaunchingAheadGivesTheTokensOfTheLoopsThatWaitForTheHost) {
  DEEPINFER_REQUIRE_GPU();
  const LoopRun want = run_loop({"synchronous, host sampling", EngineConfig::Overlap::kOff, false, false});
  for (const Loop& loop : {Loop{"overlapped, collected first", EngineConfig::Overlap::kOn, true, false},
                           Loop{"overlapped, launched ahead", EngineConfig::Overlap::kOn, true, true}}) {
    const LoopRun got = run_loop(loop);
    SCOPED_TRACE(loop.name);
    EXPECT_EQ(got.tokens, want.tokens);
    for (const auto& [id, results] : want.logprobs) {
      const auto& other = got.logprobs.at(id);
      ASSERT_EQ(other.size(), results.size()) << id;
      for (std::size_t t = 0; t < results.size(); ++t) {
        EXPECT_EQ(other[t].token, results[t].token) << id << " token " << t;
        EXPECT_EQ(other[t].rank, results[t].rank) << id << " token " << t;
        EXPECT_EQ(other[t].logprob, results[t].logprob) << id << " token " << t;
        EXPECT_EQ(other[t].top, results[t].top) << id << " token " << t;
      }
    }
    if (loop.launch_ahead) {
      EXPECT_GE(got.stats.steps_launched_ahead, got.stats.steps - 4);
      EXPECT_EQ(got.stats.wasted_rows, 0);
    } else {
      EXPECT_EQ(got.stats.steps_launched_ahead, 0);
    }
  }
}

}  // namespace
}  // namespace deepinfer::engine
