// Engine overhead benchmark: the step loop over the fake model, or over a real checkpoint (--model),
// with the engine's own time per step (scheduling, sampling, stop checks, commit) measured apart
// from the model's forward.
// usage: engine_bench [--model DIR] [requests=256] [prompt=512] [output=128] [vocab=129280] [temperature=1]
//                     [max_num_seqs=256] [workers=0] [shared_prefix=0]
// With --model the engine is set up as deepinfer::LLM sets it up (open_engine).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/fake_model_runner.h"
#include "engine/philox.h"
#ifdef DEEPINFER_BENCH_REAL_MODEL
#include "model/deepseek_v4/paged_runner.h"
#include "model/open_engine.h"
#endif

using namespace deepinfer;
using namespace deepinfer::engine;

namespace {

std::unique_ptr<Engine> open_real_engine([[maybe_unused]] const char* model_dir, [[maybe_unused]] std::int32_t requests,
                                         [[maybe_unused]] std::int32_t max_len,
                                         [[maybe_unused]] std::int32_t max_num_seqs,
                                         [[maybe_unused]] std::int32_t workers) {
#ifdef DEEPINFER_BENCH_REAL_MODEL
  auto opened = model::v4::open_paged_runner(model_dir, std::nullopt);
  LLMOptions options;
  options.max_num_seqs = max_num_seqs;
  options.max_model_len = max_len;
  options.max_num_batched_tokens = 8192;
  options.num_pages = requests * (max_len / 64 + 2);
  options.worker_threads = workers;
  return open_engine(model_dir, std::move(opened.runner), *opened.config, options).engine;
#else
  std::fprintf(stderr, "engine_bench: built without the model library; --model is not available\n");
  std::exit(2);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const char* model_dir = nullptr;
  if (argc > 2 && std::strcmp(argv[1], "--model") == 0) {
    model_dir = argv[2];
    argv += 2;
    argc -= 2;
  }
  auto arg = [&](int i, long fallback) { return argc > i ? std::atol(argv[i]) : fallback; };
  const auto requests = static_cast<int>(arg(1, 256));
  const auto prompt_len = static_cast<std::int32_t>(arg(2, 512));
  const auto output_len = static_cast<std::int32_t>(arg(3, 128));
  const auto vocab = static_cast<std::int32_t>(arg(4, 129280));
  const float temperature = argc > 5 ? std::strtof(argv[5], nullptr) : 1.0f;
  const auto max_num_seqs = static_cast<std::int32_t>(arg(6, 256));
  const auto workers = static_cast<std::int32_t>(arg(7, 0));
  const auto shared_prefix = static_cast<std::int32_t>(arg(8, 0));

  EngineConfig config;
  config.scheduler.max_num_seqs = max_num_seqs;
  config.scheduler.max_num_batched_tokens = 8192;
  config.scheduler.max_model_len = prompt_len + output_len + 1;
  config.cache.page_size = 128;
  config.cache.num_pages = requests * ((prompt_len + output_len) / 128 + 2);
  config.worker_threads = workers;
  FakeModelConfig model;
  model.vocab_size = vocab;
  std::unique_ptr<Engine> owned =
      model_dir ? open_real_engine(model_dir, requests, prompt_len + output_len + 1, max_num_seqs, workers)
                : std::make_unique<Engine>(config, std::make_unique<FakeModelRunner>(model));
  Engine& engine = *owned;
  // Prompt ids below `vocab` and the model's vocabulary (any id is a valid prompt token).
  const std::int32_t id_range = std::min(vocab, engine.vocab_size());

  for (int r = 0; r < requests; ++r) {
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(prompt_len));
    for (std::int32_t i = 0; i < prompt_len; ++i) {
      const std::uint32_t salt = i < shared_prefix ? 0u : static_cast<std::uint32_t>(r + 1);
      prompt[static_cast<std::size_t>(i)] =
          static_cast<std::int32_t>(philox_bits(salt, static_cast<std::uint32_t>(i), RandomPurpose::kDraftSample, 0) %
                                    static_cast<std::uint32_t>(id_range));
    }
    SamplingParams params;
    params.temperature = temperature;
    params.max_tokens = output_len;
    params.ignore_eos = true;
    params.seq_seed = static_cast<std::uint64_t>(r);
    engine.add_request(std::to_string(r), std::move(prompt), params);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  while (engine.has_unfinished()) engine.step();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  const EngineStats& s = engine.stats();
  std::printf("model %s requests %d prompt %d output %d vocab %d temperature %.2f workers %d\n",
              model_dir ? model_dir : "fake", requests, prompt_len, output_len, engine.vocab_size(),
              static_cast<double>(temperature), workers);
  std::printf("steps %lld  prefill tokens %lld  decode tokens %lld  generated %lld  wall %.3f s\n",
              static_cast<long long>(s.steps), static_cast<long long>(s.prefill_tokens),
              static_cast<long long>(s.decode_tokens), static_cast<long long>(s.generated_tokens), wall);
  std::printf("engine %.3f ms/step (%.2f us/generated token)   model %.3f ms/step\n",
              1e3 * s.engine_seconds / static_cast<double>(s.steps),
              1e6 * s.engine_seconds / static_cast<double>(s.generated_tokens),
              1e3 * s.model_seconds / static_cast<double>(s.steps));
  // On a shared machine the step times above include waiting for a core; with one thread
  // (workers 0, DEEPINFER_NUM_THREADS=1) cpu / wall is the share of a core the run got.
  std::printf("process cpu %.3f s over wall %.3f s (%.0f%%)\n", cpu, wall, 100.0 * cpu / wall);
  if (const cache::PrefixCache* prefix = engine.scheduler().prefix_cache()) {
    std::printf("prefix cache: token hit rate %.3f\n", prefix->stats().token_hit_rate());
  }
  return 0;
}
