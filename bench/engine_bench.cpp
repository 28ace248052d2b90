// Engine overhead benchmark: the step loop over the fake model, a real checkpoint (--model), or
// dummy weights of a real geometry on a device (--dummy CONFIG --layers N --device cuda), with
// the engine's own time per step (scheduling, sampling, stop checks, commit) measured apart from
// the model's, and the host-side gap between collecting a step and launching the next (a floor of
// the GPU's idle time between steps; tools/gpu/run_engine_bench.sh adds the CUPTI busy time).
// usage: engine_bench [--model DIR | --dummy CONFIG [--layers N] [--device cuda]] [--overlap on|off|auto]
//                     [--host-sampling] [--ahead on|off] [--top-k K] [--top-p P] [--fake-device]
//                     [requests=256] [prompt=512] [output=128] [vocab=129280]
//                     [temperature=1] [max_num_seqs=256] [workers=0] [shared_prefix=0]
// With --model the engine is set up as deepinfer::LLM sets it up (open_engine).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/fake_model_runner.h"
#include "engine/philox.h"
#ifdef DEEPINFER_BENCH_REAL_MODEL
#include "model/deepseek_v4/paged_runner.h"
#include "model/open_engine.h"
#endif
#ifdef DEEPINFER_BENCH_DUMMY_MODEL
#include "io/model_config.h"
#include "model/deepseek_v4/dummy_weights.h"
#include "ops/cuda/cuda_backend.h"
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

using Clock = std::chrono::steady_clock;

// Wraps a runner and times, on the host, the gap from each collect() returning to the next
// launch() when nothing else is launched: the device has finished the step and waits for the host
// that whole time. A step launched ahead (before the previous one is collected) has no such gap.
class GapTimingRunner final : public ModelRunner {
 public:
  explicit GapTimingRunner(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  cache::CacheSpec cache_spec() const override { return inner_->cache_spec(); }
  std::int32_t vocab_size() const override { return inner_->vocab_size(); }
  void allocate_cache(const cache::CacheLayout& layout) override { inner_->allocate_cache(layout); }
  void forward(const ForwardBatch& batch, std::span<float> logits) override { inner_->forward(batch, logits); }
  void launch(const ForwardBatch& batch) override {
    if (collected_) gaps_.push_back(std::chrono::duration<double>(Clock::now() - *collected_).count());
    inner_->launch(batch);
    ++launched_;
  }
  void launch_ahead(const ForwardBatch& batch, const Tensor& sampled) override {
    if (collected_) gaps_.push_back(0.0);
    inner_->launch_ahead(batch, sampled);
    ++launched_;
  }
  void collect(std::span<float> logits) override {
    inner_->collect(logits);
    if (--launched_ == 0) {
      collected_ = Clock::now();
    } else {
      collected_.reset();
    }
  }
  ops::Backend* device_backend() override { return inner_->device_backend(); }
  const Tensor& device_logits() const override { return inner_->device_logits(); }
  bool can_launch_ahead() const override { return inner_->can_launch_ahead(); }
  // Mean of the last `n` gaps (the steady decode steps), seconds.
  double mean_gap(std::size_t n) const {
    n = std::min(n, gaps_.size());
    double sum = 0.0;
    for (std::size_t i = gaps_.size() - n; i < gaps_.size(); ++i) sum += gaps_[i];
    return n == 0 ? 0.0 : sum / static_cast<double>(n);
  }

 private:
  std::unique_ptr<ModelRunner> inner_;
  std::optional<Clock::time_point> collected_;  // when the last collect() left nothing launched
  std::vector<double> gaps_;
  int launched_ = 0;
};

#ifdef DEEPINFER_BENCH_DUMMY_MODEL
// Dummy weights of a real geometry (e.g. tests/io/fixtures/v4_flash.release.json) with `layers`
// layers on `device`, behind the paged runner; owns backend and model.
class DummyRunner final : public ModelRunner {
 public:
  DummyRunner(const char* config_path, int layers, const std::string& device)
      : backend_(device == "cuda" ? ops::make_cuda_backend(0) : ops::make_cpu_backend()),
        config_(model::v4::dummy_model_config(io::load_model_config(config_path), layers)),
        model_(model::v4::load_dummy_model(config_, 1, *backend_, model::v4::NumericMode::kReferenceQat)),
        runner_(*model_) {}
  cache::CacheSpec cache_spec() const override { return runner_.cache_spec(); }
  std::int32_t vocab_size() const override { return runner_.vocab_size(); }
  void allocate_cache(const cache::CacheLayout& layout) override { runner_.allocate_cache(layout); }
  void forward(const ForwardBatch& batch, std::span<float> logits) override { runner_.forward(batch, logits); }
  void launch(const ForwardBatch& batch) override { runner_.launch(batch); }
  void collect(std::span<float> logits) override { runner_.collect(logits); }
  ops::Backend* device_backend() override { return runner_.device_backend(); }
  const Tensor& device_logits() const override { return runner_.device_logits(); }
  bool can_launch_ahead() const override { return runner_.can_launch_ahead(); }
  void launch_ahead(const ForwardBatch& batch, const Tensor& sampled) override { runner_.launch_ahead(batch, sampled); }

 private:
  std::unique_ptr<ops::Backend> backend_;
  io::ModelConfig config_;
  std::unique_ptr<model::SequenceModel> model_;
  model::v4::PagedModelRunner runner_;
};
#endif

std::unique_ptr<ModelRunner> open_dummy_runner([[maybe_unused]] const char* config, [[maybe_unused]] int layers,
                                               [[maybe_unused]] const std::string& device) {
#ifdef DEEPINFER_BENCH_DUMMY_MODEL
  return std::make_unique<DummyRunner>(config, layers, device);
#else
  std::fprintf(stderr, "engine_bench: built without the dummy-model library; --dummy is not available\n");
  std::exit(2);
#endif
}

}  // namespace

int main(int argc, char** argv) try {
  const char* model_dir = nullptr;
  const char* dummy_config = nullptr;
  int layers = 2;
  std::string device = "cpu";
  EngineConfig::Overlap overlap = EngineConfig::Overlap::kAuto;
  bool host_sampling = false;
  bool ahead = true;
  bool fake_device = false;
  std::int32_t top_k = -1;
  float top_p = 1.0f;
  while (argc > 1 && std::strncmp(argv[1], "--", 2) == 0) {
    const std::string flag = argv[1];
    const char* value = argc > 2 ? argv[2] : "";
    int used = 2;
    if (flag == "--model") {
      model_dir = value;
    } else if (flag == "--dummy") {
      dummy_config = value;
    } else if (flag == "--layers") {
      layers = std::atoi(value);
    } else if (flag == "--device") {
      device = value;
    } else if (flag == "--overlap") {
      overlap = std::strcmp(value, "on") == 0    ? EngineConfig::Overlap::kOn
                : std::strcmp(value, "off") == 0 ? EngineConfig::Overlap::kOff
                                                 : EngineConfig::Overlap::kAuto;
    } else if (flag == "--ahead") {
      ahead = std::strcmp(value, "off") != 0;
    } else if (flag == "--top-k") {
      top_k = std::atoi(value);
    } else if (flag == "--top-p") {
      top_p = std::strtof(value, nullptr);
    } else if (flag == "--fake-device") {  // the fake model's logits on a CPU ops backend (device paths)
      fake_device = true;
      used = 1;
    } else if (flag == "--host-sampling") {
      host_sampling = true;
      used = 1;
    } else {
      std::fprintf(stderr, "engine_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
    argv += used;
    argc -= used;
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
  config.overlap = overlap;
  config.device_sampling = !host_sampling;
  config.launch_ahead = ahead;
  FakeModelConfig model;
  model.vocab_size = vocab;
  model.device_logits = fake_device;
  std::unique_ptr<ModelRunner> inner;
  if (dummy_config != nullptr) {
    inner = open_dummy_runner(dummy_config, layers, device);
    // A multiple of every compression ratio of the geometry (V4-Flash's HCA layers compress 128).
    config.cache.page_size = 128;
    config.cache.num_pages = requests * ((prompt_len + output_len) / 128 + 2);
  } else {
    inner = std::make_unique<FakeModelRunner>(model);
  }
  auto timed = std::make_unique<GapTimingRunner>(std::move(inner));
  GapTimingRunner& gaps = *timed;
  std::unique_ptr<Engine> owned = model_dir
                                      ? open_real_engine(model_dir, requests, prompt_len + output_len + 1, max_num_seqs, workers)
                                      : std::make_unique<Engine>(config, std::move(timed));
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
    params.top_k = top_k;
    params.top_p = top_p;
    params.max_tokens = output_len;
    params.ignore_eos = true;
    params.seq_seed = static_cast<std::uint64_t>(r);
    engine.add_request(std::to_string(r), std::move(prompt), params);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  // The last steps are steady decode steps (same batch): their wall time per step and host gap.
  constexpr std::size_t kTail = 8;
  std::vector<double> step_ends;
  // Every request's tokens, hashed in request order: two runs of the same requests (launched
  // ahead or not) must print the same digest.
  std::vector<std::vector<std::int32_t>> outputs(static_cast<std::size_t>(requests));
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      auto& tokens = outputs[static_cast<std::size_t>(std::stoi(out.request_id))];
      for (const CompletionOutput& c : out.completions) tokens.insert(tokens.end(), c.token_ids.begin(), c.token_ids.end());
    }
    step_ends.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const std::size_t tail = std::min(kTail, step_ends.size() > 1 ? step_ends.size() - 1 : 0);
  const double tail_wall =
      tail == 0 ? 0.0 : (step_ends.back() - step_ends[step_ends.size() - 1 - tail]) / static_cast<double>(tail);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  const EngineStats& s = engine.stats();
  const std::string model_name = model_dir      ? model_dir
                                 : dummy_config ? std::string(dummy_config) + " (dummy, " + std::to_string(layers) +
                                                      " layers, " + device + ")"
                                                : std::string("fake");
  std::printf("model %s requests %d prompt %d output %d vocab %d temperature %.2f top_k %d top_p %.2f workers %d\n",
              model_name.c_str(), requests, prompt_len, output_len, engine.vocab_size(), static_cast<double>(temperature),
              top_k, static_cast<double>(top_p), workers);
  std::printf("steps %lld  prefill tokens %lld  decode tokens %lld  generated %lld  wall %.3f s\n",
              static_cast<long long>(s.steps), static_cast<long long>(s.prefill_tokens),
              static_cast<long long>(s.decode_tokens), static_cast<long long>(s.generated_tokens), wall);
  std::printf("engine %.3f ms/step (%.2f us/generated token)   model %.3f ms/step\n",
              1e3 * s.engine_seconds / static_cast<double>(s.steps),
              1e6 * s.engine_seconds / static_cast<double>(s.generated_tokens),
              1e3 * s.model_seconds / static_cast<double>(s.steps));
  // On a shared machine the step times above include waiting for a core; with one thread
  // (workers 0, DEEPINFER_NUM_THREADS=1) cpu / wall is the share of a core the run got.
  std::printf("loop %s, sampling on the %s: last %zu steps %.3f ms/step wall, host gap collect->launch %.3f ms/step "
              "(%lld rows sampled on the device)\n",
              engine.overlapped() ? "overlapped" : "synchronous", engine.stats().device_sampled_rows > 0 ? "device" : "host",
              tail, 1e3 * tail_wall, 1e3 * gaps.mean_gap(tail), static_cast<long long>(s.device_sampled_rows));
  std::uint64_t digest = 0xCBF29CE484222325ull;
  std::size_t generated = 0;
  for (const auto& tokens : outputs) {
    generated += tokens.size();
    for (std::int32_t t : tokens) digest = (digest ^ static_cast<std::uint32_t>(t)) * 0x100000001B3ull;
    digest = (digest ^ 0xFFFFFFFFull) * 0x100000001B3ull;
  }
  std::printf("output digest %016llx over %zu tokens\n", static_cast<unsigned long long>(digest), generated);
  const double tail_batch = static_cast<double>(std::min(requests, max_num_seqs));
  std::printf("launched ahead: %s, %lld steps (%lld wasted rows); decode %.0f tokens/s over the last %zu steps\n",
              engine.launches_ahead() ? "on" : "off", static_cast<long long>(s.steps_launched_ahead),
              static_cast<long long>(s.wasted_rows), tail_wall > 0.0 ? tail_batch / tail_wall : 0.0, tail);
  std::printf("process cpu %.3f s over wall %.3f s (%.0f%%)\n", cpu, wall, 100.0 * cpu / wall);
  if (const cache::PrefixCache* prefix = engine.scheduler().prefix_cache()) {
    std::printf("prefix cache: token hit rate %.3f\n", prefix->stats().token_hit_rate());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "engine_bench: %s\n", e.what());
  return 1;
}
