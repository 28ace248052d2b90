// V4.1 SWA bounded replay (MODEL_SPEC B5.3) on the make-tiny --arch v41 geometry: prefill time and
// layer-rows of work with DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=compact against full replay, and
// how far the logits move (last prompt token, then teacher-forced decode steps). Prints a markdown
// table. usage: v41_replay_bench [--quick]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "io/tiny_checkpoint.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/deepseek_v41/model.h"
#include "ops/cpu/cpu_backend.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

struct Run {
  double prefill_s = 0;
  std::vector<float> logits;  // last prompt token, then each decode step
};

// Prefill `prompt` in one chunk, then feed `decode` one token at a time.
Run run(model::SequenceModel& m, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& decode) {
  Run r;
  const std::int64_t vocab = m.config().vocab_size;
  auto seq = m.new_sequence();
  Tensor l = Tensor::empty(Shape{1, vocab}, DType::kF32);
  const model::SequenceModel::Chunk c{seq.get(), prompt, 1};
  const auto start = Clock::now();
  m.forward({&c, 1}, l);
  r.prefill_s = std::chrono::duration<double>(Clock::now() - start).count();
  r.logits.assign(l.data<float>(), l.data<float>() + vocab);
  for (const std::int32_t t : decode) {
    const model::SequenceModel::Chunk d{seq.get(), {&t, 1}, 1};
    m.forward({&d, 1}, l);
    r.logits.insert(r.logits.end(), l.data<float>(), l.data<float>() + vocab);
  }
  return r;
}

std::int32_t argmax(const float* v, std::int64_t n) { return static_cast<std::int32_t>(std::max_element(v, v + n) - v); }

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  ops::cpu::CpuBackend be;
  const std::int64_t n = quick ? 512 : 2048, keep = 140, steps = 16;
  std::printf("| weights / mode | prompt | layers full / tail | layer-rows full | compact | saved | prefill s full | "
              "compact | max abs dlogit / max abs logit (last prompt token) | (decode, %lld steps) | greedy agree |\n",
              static_cast<long long>(steps));
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const bool fp8 : {false, true}) {
    io::TinyModelOptions o;
    o.arch = io::ModelArch::kDeepseekV41;
    o.fp8 = fp8;
    o.draft = io::DraftKind::kNone;
    const io::ModelConfig config = io::tiny_model_config(o);
    const auto dir = std::filesystem::temp_directory_path() / ("deepinfer_v41_replay_" + std::to_string(::getpid()));
    io::write_random_checkpoint(config, dir, 7);
    const auto mode = fp8 ? model::v4::NumericMode::kReferenceQat : model::v4::NumericMode::kExact;
    auto full = model::v4::open_model(dir, mode, be);
    const io::ModelConfig& c = full.model->config();
    auto compact = model::v41::Model::load(
        *full.weights, c, be, full.model->numerics(),
        std::make_shared<const model::engram::EngramHasher>(
            c, [&] { std::vector<std::int32_t> id(static_cast<std::size_t>(c.vocab_size)); std::iota(id.begin(), id.end(), 0); return id; }(),
            c.vocab_size),
        {true, keep, 0});
    std::mt19937 rng(5);
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(n));
    for (auto& t : prompt) t = static_cast<std::int32_t>(rng() % 4000);
    // Decode inputs: the full model's greedy continuation (both runs see the same tokens).
    std::vector<std::int32_t> decode;
    {
      auto seq = full.model->new_sequence();
      Tensor l = Tensor::empty(Shape{1, c.vocab_size}, DType::kF32);
      std::vector<std::int32_t> next = prompt;
      for (std::int64_t i = 0; i < steps; ++i) {
        const model::SequenceModel::Chunk ch{seq.get(), next, 1};
        full.model->forward({&ch, 1}, l);
        next = {argmax(l.data<float>(), c.vocab_size)};
        decode.push_back(next[0]);
      }
    }
    const Run a = run(*full.model, prompt, decode), b = run(*compact, prompt, decode);
    const int split = c.kv_source_layer_ids.back();
    const std::int64_t early = split + 1, late = c.num_layers - early;
    const std::int64_t rows_full = c.num_layers * n, rows_compact = early * n + late * keep;
    auto rel = [&](std::int64_t from, std::int64_t to) {
      float diff = 0, scale = 0;
      for (std::int64_t i = from * c.vocab_size; i < to * c.vocab_size; ++i) {
        diff = std::max(diff, std::fabs(a.logits[static_cast<std::size_t>(i)] - b.logits[static_cast<std::size_t>(i)]));
        scale = std::max(scale, std::fabs(a.logits[static_cast<std::size_t>(i)]));
      }
      return diff / scale;
    };
    int agree = 0;
    for (std::int64_t r = 0; r <= steps; ++r)
      agree += argmax(a.logits.data() + r * c.vocab_size, c.vocab_size) ==
               argmax(b.logits.data() + r * c.vocab_size, c.vocab_size);
    std::printf("| %s / %s | %lld | %lld / %lld | %lld | %lld | %.0f%% | %.3f | %.3f | %.2e | %.2e | %d/%lld |\n",
                fp8 ? "fp8 + fp4 experts" : "bf16", fp8 ? "reference-qat" : "exact", static_cast<long long>(n),
                static_cast<long long>(early), static_cast<long long>(late), static_cast<long long>(rows_full),
                static_cast<long long>(rows_compact), 100.0 * (1.0 - static_cast<double>(rows_compact) / rows_full),
                a.prefill_s, b.prefill_s, rel(0, 1), rel(1, steps + 1), agree, static_cast<long long>(steps + 1));
    std::filesystem::remove_all(dir);
  }
  return 0;
}
