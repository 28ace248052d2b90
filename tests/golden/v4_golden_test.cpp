// The C++ V4 model in exact mode against HF transformers' DeepseekV4ForCausalLM (fixtures in
// tests/golden/v4, made by tools/make_golden.py): every position's logits within
// max|Δ| / max|ref| < 1e-3 however the sequence is split into chunks, and the 40 greedy tokens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>

#include "golden/npy_reader.h"
#include "io/checkpoint.h"
#include "model/deepseek_v4/model.h"
#include "ops/cpu/cpu_backend.h"

namespace deepinfer::golden {
namespace {

namespace fs = std::filesystem;
using model::v4::Model;

constexpr double kTolerance = 1e-3;

struct Case {
  std::string name;
  std::string checkpoint;  // model (HF save_pretrained) or model_deepseek (DeepSeek layout)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name << "/" << c.checkpoint; }

fs::path case_dir(const Case& c) { return fs::path(DEEPINFER_SOURCE_DIR) / "tests/golden/v4" / c.name; }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const fs::path root = fs::path(DEEPINFER_SOURCE_DIR) / "tests/golden/v4";
  if (!fs::exists(root)) return cases;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    for (const char* ckpt : {"model", "model_deepseek"})
      if (fs::exists(entry.path() / ckpt / "config.json")) cases.push_back({entry.path().filename().string(), ckpt});
  }
  std::sort(cases.begin(), cases.end(), [](const Case& a, const Case& b) {
    return a.name + a.checkpoint < b.name + b.checkpoint;
  });
  return cases;
}

// One loaded fixture (kept for the whole test binary: loading is the slow part).
struct Fixture {
  std::unique_ptr<io::Checkpoint> checkpoint;
  std::unique_ptr<Model> model;
  std::vector<std::int32_t> prompt, greedy;
  NpyArray full, greedy_logits;
};

ops::Backend& backend() {
  static ops::cpu::CpuBackend b;
  return b;
}

Fixture& fixture(const Case& c) {
  static std::map<std::string, std::unique_ptr<Fixture>> cache;
  auto& slot = cache[c.name + "/" + c.checkpoint];
  if (slot) return *slot;
  auto f = std::make_unique<Fixture>();
  const fs::path dir = case_dir(c);
  f->checkpoint = std::make_unique<io::Checkpoint>(io::Checkpoint::open(dir / c.checkpoint));
  f->model = Model::load(*model::v4::checkpoint_weights(*f->checkpoint), f->checkpoint->config(), backend(),
                         model::v4::NumericMode::kExact);
  const auto meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
  f->prompt = meta.at("prompt_ids").get<std::vector<std::int32_t>>();
  f->greedy = meta.at("greedy_ids").get<std::vector<std::int32_t>>();
  f->full = read_npy_f32(dir / "logits_full.npy");
  f->greedy_logits = read_npy_f32(dir / "logits_greedy.npy");
  slot = std::move(f);
  return *slot;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

std::int32_t argmax(const float* row, std::int64_t n) {
  return static_cast<std::int32_t>(std::max_element(row, row + n) - row);
}

class V4Golden : public ::testing::TestWithParam<Case> {};

TEST_P(V4Golden, LogitsOfEveryPositionMatchHfForEveryChunking) {
  Fixture& f = fixture(GetParam());
  std::vector<std::int32_t> ids = f.prompt;
  ids.insert(ids.end(), f.greedy.begin(), f.greedy.end());
  const std::int64_t vocab = f.model->config().vocab_size;
  ASSERT_EQ(f.full.shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(ids.size()), vocab}));
  const double ref_max = max_abs(f.full.data);
  for (std::size_t chunk : {ids.size(), std::size_t{1}, std::size_t{3}, std::size_t{16}, std::size_t{17}}) {
    auto seq = f.model->new_sequence();
    double worst = 0;
    std::size_t worst_pos = 0;
    for (std::size_t p = 0; p < ids.size(); p += chunk) {
      const std::size_t n = std::min(chunk, ids.size() - p);
      Tensor logits = Tensor::empty(Shape{static_cast<std::int64_t>(n), vocab}, DType::kF32);
      const Model::Chunk c{seq.get(), std::span(ids).subspan(p, n), static_cast<std::int32_t>(n)};
      f.model->forward({&c, 1}, logits);
      for (std::size_t i = 0; i < n * static_cast<std::size_t>(vocab); ++i) {
        const double d = std::fabs(logits.data<float>()[i] - f.full.data[p * static_cast<std::size_t>(vocab) + i]);
        if (d > worst) {
          worst = d;
          worst_pos = p + i / static_cast<std::size_t>(vocab);
        }
      }
    }
    EXPECT_LT(worst / ref_max, kTolerance) << "chunk " << chunk << ": worst at position " << worst_pos;
  }
}

TEST_P(V4Golden, GreedyDecodeReproducesHfTokensAndStepLogits) {
  Fixture& f = fixture(GetParam());
  const std::int64_t vocab = f.model->config().vocab_size;
  const double ref_max = max_abs(f.greedy_logits.data);
  auto seq = f.model->new_sequence();
  Tensor logits = Tensor::empty(Shape{1, vocab}, DType::kF32);
  std::vector<std::int32_t> next = f.prompt;
  for (std::size_t step = 0; step < f.greedy.size(); ++step) {
    const Model::Chunk c{seq.get(), next, 1};
    f.model->forward({&c, 1}, logits);
    const float* ref = f.greedy_logits.data.data() + step * static_cast<std::size_t>(vocab);
    double worst = 0;
    for (std::int64_t i = 0; i < vocab; ++i) worst = std::max(worst, double(std::fabs(logits.data<float>()[i] - ref[i])));
    EXPECT_LT(worst / ref_max, kTolerance) << "decode step " << step;
    const std::int32_t token = argmax(logits.data<float>(), vocab);
    ASSERT_EQ(token, f.greedy[step]) << "greedy token " << step;
    next = {token};
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Golden, ::testing::ValuesIn(all_cases()), [](const auto& param_info) {
  return param_info.param.name + (param_info.param.checkpoint == "model" ? "" : "_deepseek_layout");
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(V4Golden);

}  // namespace
}  // namespace deepinfer::golden
