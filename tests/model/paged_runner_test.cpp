// The V4 paged runner through the engine on the HF golden fixtures: greedy generation equals HF's
// greedy continuation alone, batched with other (sampled) requests, with chunked prefill and under
// preemption; prefix-cache hits give the same logits and tokens as runs without the cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/paged_runner.h"
#include "model/engine_runs.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using engine::Engine;
using engine::SamplingParams;

struct Fixture {
  fs::path model_dir;
  std::vector<std::int32_t> prompt, greedy;
};

Fixture load_fixture(const std::string& name) {
  const fs::path dir = fs::path(DEEPINFER_SOURCE_DIR) / "tests/golden/v4" / name;
  const auto meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
  return {dir / "model", meta.at("prompt_ids").get<std::vector<std::int32_t>>(),
          meta.at("greedy_ids").get<std::vector<std::int32_t>>()};
}

struct EngineOptions {
  std::int32_t max_num_batched_tokens = 4096;
  std::int32_t num_pages = 0;  // 0: plenty
  bool prefix_caching = true;
  std::int32_t page_multiple = 2;  // page size = this × the spec's minimum (at least 8 tokens)
  std::int32_t max_model_len = 512;
};

// The paged runner over a V4 model whose decode steps are padded to batch / context buckets, as on
// the GPU (where they are then replayed as CUDA graphs).
std::unique_ptr<engine::ModelRunner> bucketed_runner(const fs::path& dir) {
  std::unique_ptr<ops::Backend> backend = ops::make_cpu_backend();
  model::v4::LoadedModel loaded = model::v4::open_model(dir, model::v4::NumericMode::kExact, *backend);
  dynamic_cast<model::v4::Model&>(*loaded.model).set_bucketed(true);
  return std::make_unique<model::v4::OwningPagedRunner>(std::move(backend), std::move(loaded));
}

std::unique_ptr<Engine> make_engine(const Fixture& f, const EngineOptions& o, bool bucketed = false) {
  model::v4::OpenedRunner opened;
  if (bucketed) opened.runner = bucketed_runner(f.model_dir);
  else opened = model::v4::open_paged_runner(f.model_dir, model::v4::NumericMode::kExact);
  engine::EngineConfig config;
  config.scheduler.max_num_seqs = 8;
  config.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  config.scheduler.max_model_len = o.max_model_len;
  const std::int32_t multiple = opened.runner->cache_spec().page_size_multiple();
  config.cache.page_size = multiple * o.page_multiple;
  while (config.cache.page_size < 8) config.cache.page_size += multiple;
  config.cache.num_pages = o.num_pages > 0 ? o.num_pages : 256;
  config.cache.admission_watermark = 0.0;  // tiny pools: admit while any page is free
  config.cache.enable_prefix_caching = o.prefix_caching;
  return std::make_unique<Engine>(config, std::move(opened.runner));
}

using test::greedy;
using test::Result;
using test::run;

SamplingParams sampled(std::uint64_t seed, std::int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.seq_seed = seed;
  return p;
}

std::vector<std::int32_t> other_prompt(const Fixture& f, std::size_t len, std::int32_t shift) {
  std::vector<std::int32_t> p;
  for (std::size_t i = 0; i < len; ++i) p.push_back((f.prompt[i % f.prompt.size()] + shift) % 512);
  return p;
}

class PagedRunnerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedRunnerGolden, GreedyAloneMatchesHf) {
  const Fixture f = load_fixture(GetParam());
  auto engine = make_engine(f, {});
  engine->add_request("g", f.prompt, greedy(static_cast<std::int32_t>(f.greedy.size())));
  EXPECT_EQ(run(*engine)["g"].tokens, f.greedy);
}

TEST_P(PagedRunnerGolden, GreedyBatchedWithSampledRequestsMatchesHfAndSoloRuns) {
  const Fixture f = load_fixture(GetParam());
  const auto p1 = other_prompt(f, 37, 11), p2 = other_prompt(f, 70, 29);
  std::map<std::string, Result> solo;
  for (const auto& [id, prompt, seed] : {std::tuple{"s1", p1, 7ull}, std::tuple{"s2", p2, 9ull}}) {
    auto e = make_engine(f, {});
    e->add_request(id, prompt, sampled(seed, 12));
    solo[id] = run(*e)[id];
  }
  auto engine = make_engine(f, {});
  engine->add_request("s1", p1, sampled(7, 12));
  engine->add_request("g", f.prompt, greedy(static_cast<std::int32_t>(f.greedy.size())));
  engine->add_request("s2", p2, sampled(9, 12));
  auto out = run(*engine);
  EXPECT_EQ(out["g"].tokens, f.greedy);
  EXPECT_EQ(out["s1"].tokens, solo["s1"].tokens);
  EXPECT_EQ(out["s2"].tokens, solo["s2"].tokens);
}

// Decode steps padded to buckets (3 sequences in bucket 4, contexts to a power of two of pages)
// give the same tokens as unpadded ones, and the greedy one HF's.
TEST_P(PagedRunnerGolden, BucketedDecodeStepsGiveTheSameTokens) {
  const Fixture f = load_fixture(GetParam());
  const auto p1 = other_prompt(f, 37, 11), p2 = other_prompt(f, 70, 29);
  std::map<std::string, Result> out[2];
  for (int bucketed = 0; bucketed < 2; ++bucketed) {
    auto engine = make_engine(f, {}, bucketed == 1);
    engine->add_request("s1", p1, sampled(7, 12));
    engine->add_request("g", f.prompt, greedy(static_cast<std::int32_t>(f.greedy.size())));
    engine->add_request("s2", p2, sampled(9, 12));
    out[bucketed] = run(*engine);
  }
  EXPECT_EQ(out[1]["g"].tokens, f.greedy);
  for (const char* id : {"g", "s1", "s2"}) EXPECT_EQ(out[1][id].tokens, out[0][id].tokens) << id;
}

TEST_P(PagedRunnerGolden, GreedyWithChunkedPrefillMatchesHf) {
  const Fixture f = load_fixture(GetParam());
  auto engine = make_engine(f, {.max_num_batched_tokens = 13});
  engine->add_request("g", f.prompt, greedy(static_cast<std::int32_t>(f.greedy.size())));
  engine->add_request("s", other_prompt(f, 30, 5), sampled(3, 20));
  EXPECT_EQ(run(*engine)["g"].tokens, f.greedy);
}

TEST_P(PagedRunnerGolden, GreedyUnderPreemptionMatchesHf) {
  const Fixture f = load_fixture(GetParam());
  const auto total = static_cast<std::int32_t>(f.prompt.size() + f.greedy.size());
  const std::int32_t page = make_engine(f, {.page_multiple = 1})->scheduler().layout().page_size;
  const std::int32_t need = (total + page - 1) / page;
  // Three sequences that each grow to `need` pages share need + 2 pages: all are admitted (the
  // other two start with one page), then the newest are preempted and recomputed as they grow.
  auto engine =
      make_engine(f, {.num_pages = need + 2, .prefix_caching = false, .page_multiple = 1, .max_model_len = total});
  engine->add_request("g", f.prompt, greedy(static_cast<std::int32_t>(f.greedy.size())));
  engine->add_request("a", other_prompt(f, static_cast<std::size_t>(page), 3), greedy(total - page));
  engine->add_request("b", other_prompt(f, static_cast<std::size_t>(page), 17), greedy(total - page));
  auto out = run(*engine);
  EXPECT_EQ(out["g"].tokens, f.greedy);
  EXPECT_GT(engine->scheduler().stats().preemptions, 0);
  // The preempted requests' tokens equal their runs without memory pressure.
  auto roomy = make_engine(f, {.prefix_caching = false, .page_multiple = 1, .max_model_len = total});
  roomy->add_request("a", other_prompt(f, static_cast<std::size_t>(page), 3), greedy(total - page));
  roomy->add_request("b", other_prompt(f, static_cast<std::size_t>(page), 17), greedy(total - page));
  auto reference = run(*roomy);
  EXPECT_EQ(out["a"].tokens, reference["a"].tokens);
  EXPECT_EQ(out["b"].tokens, reference["b"].tokens);
}

INSTANTIATE_TEST_SUITE_P(Cases, PagedRunnerGolden,
                         ::testing::Values("swa_hash", "csa_topk2", "csa_hca_mix", "hca_pro_like", "flash_ratios"));

TEST(PagedRunner, PrefixCacheHitGivesSameLogitsAndTokensAsNoCache) {
  const Fixture f = load_fixture("csa_hca_mix");
  // Continues the fixture prompt (a second turn): its pages up to the prompt-end snapshot are reused.
  std::vector<std::int32_t> second = f.prompt;
  for (std::int32_t t : other_prompt(f, 23, 101)) second.push_back(t);
  test::expect_prefix_reuse_equals_no_reuse(
      [&](bool caching) { return make_engine(f, {.prefix_caching = caching, .page_multiple = 1}); }, f.prompt, second,
      10, 20, 64);
}

TEST(PagedRunner, ReportsPagedStoresAndFixedStateInItsCacheSpec) {
  const Fixture f = load_fixture("csa_hca_mix");
  auto opened = model::v4::open_paged_runner(f.model_dir, model::v4::NumericMode::kExact);
  const cache::CacheSpec spec = opened.runner->cache_spec();
  spec.validate();
  std::int32_t csa = 0, compressed = 0;
  for (const io::LayerSpec& l : opened.config->layers) {
    csa += l.has_indexer ? 1 : 0;
    compressed += l.owns_compressor ? 1 : 0;
  }
  EXPECT_EQ(static_cast<std::int32_t>(spec.paged.size()), csa + compressed);
  EXPECT_GE(spec.fixed.size(), opened.config->layers.size());
  EXPECT_EQ(spec.max_rollback_tokens, 0);
  EXPECT_NE(spec.model_identity.find("exact"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
