// The golden fixtures' case plumbing shared by the golden tests (v4_golden_test, v41_golden_test,
// cuda_golden_test): which cases exist under tests/golden/<arch>/, their reference outputs from
// meta.json and the .npy files, and the logit metrics the tolerances are stated in.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "golden/npy_reader.h"
#include "io/checkpoint.h"
#include "ops/backend.h"
#include "tensor/tensor.h"

namespace deepinfer::golden {

// tests/golden/README.md: max |Δlogit| / max |logit_ref| below this, greedy ids identical.
inline constexpr double kTolerance = 1e-3;

struct Case {
  std::string arch;        // v4, v41: the folder under tests/golden
  std::string name;
  std::string checkpoint;  // model (HF save_pretrained) or model_deepseek (DeepSeek layout)
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << "/" << c.name << "/" << c.checkpoint; }

inline std::filesystem::path case_dir(const Case& c) {
  return std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests/golden" / c.arch / c.name;
}

// Every case folder of tests/golden/<arch> and each checkpoint layout it has, sorted.
inline std::vector<Case> all_cases(const std::string& arch) {
  namespace fs = std::filesystem;
  std::vector<Case> cases;
  const fs::path root = fs::path(DEEPINFER_SOURCE_DIR) / "tests/golden" / arch;
  if (!fs::exists(root)) return cases;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    for (const char* ckpt : {"model", "model_deepseek"})
      if (fs::exists(entry.path() / ckpt / "config.json"))
        cases.push_back({arch, entry.path().filename().string(), ckpt});
  }
  std::sort(cases.begin(), cases.end(),
            [](const Case& a, const Case& b) { return a.name + a.checkpoint < b.name + b.checkpoint; });
  return cases;
}

// The gtest parameter name of a case.
inline std::string case_test_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name + (info.param.checkpoint == "model" ? "" : "_deepseek_layout");
}

// What HF computed for a case: the prompt, its greedy continuation, every position's logits of
// prompt + continuation (logits_full.npy) and generate's per-step logits (logits_greedy.npy).
struct Reference {
  nlohmann::json meta;
  std::vector<std::int32_t> prompt, greedy;
  NpyArray full, greedy_logits;

  std::vector<std::int32_t> sequence() const {
    std::vector<std::int32_t> ids = prompt;
    ids.insert(ids.end(), greedy.begin(), greedy.end());
    return ids;
  }
};

inline Reference load_reference(const Case& c) {
  const std::filesystem::path dir = case_dir(c);
  Reference r;
  r.meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
  r.prompt = r.meta.at("prompt_ids").get<std::vector<std::int32_t>>();
  r.greedy = r.meta.at("greedy_ids").get<std::vector<std::int32_t>>();
  r.full = read_npy_f32(dir / "logits_full.npy");
  r.greedy_logits = read_npy_f32(dir / "logits_greedy.npy");
  return r;
}

inline ops::Backend& cpu_backend() {
  static const auto backend = ops::make_cpu_backend();
  return *backend;
}

// A case's checkpoint, model and reference, loaded once per test binary (loading is the slow part).
template <typename Model>
struct LoadedCase {
  std::unique_ptr<io::Checkpoint> checkpoint;
  std::unique_ptr<Model> model;
  Reference ref;
};

// load(const io::Checkpoint&, const Reference&) -> std::unique_ptr<Model>.
template <typename Model, typename Load>
LoadedCase<Model>& loaded_case(const Case& c, Load load) {
  static std::map<std::string, std::unique_ptr<LoadedCase<Model>>> cache;
  auto& slot = cache[c.arch + "/" + c.name + "/" + c.checkpoint];
  if (!slot) {
    auto loaded = std::make_unique<LoadedCase<Model>>();
    loaded->checkpoint = std::make_unique<io::Checkpoint>(io::Checkpoint::open(case_dir(c) / c.checkpoint));
    loaded->ref = load_reference(c);
    loaded->model = load(*loaded->checkpoint, loaded->ref);
    slot = std::move(loaded);
  }
  return *slot;
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

inline std::int32_t argmax(const float* row, std::int64_t n) {
  return static_cast<std::int32_t>(std::max_element(row, row + n) - row);
}

// The model (CPU backend: logits in host memory) against logits_full.npy for the whole sequence
// split into chunks of each size (the first: one chunk), every position's logits within kTolerance.
// Model: v4::Model or any model::SequenceModel (new_sequence, forward(chunks, logits), Chunk).
template <typename Model>
void expect_logits_match_for_every_chunking(Model& model, const Reference& ref) {
  const std::vector<std::int32_t> ids = ref.sequence();
  const std::int64_t vocab = model.config().vocab_size;
  ASSERT_EQ(ref.full.shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(ids.size()), vocab}));
  const double ref_max = max_abs(ref.full.data);
  for (std::size_t chunk : {ids.size(), std::size_t{1}, std::size_t{3}, std::size_t{16}, std::size_t{17}}) {
    auto seq = model.new_sequence();
    double worst = 0;
    std::size_t worst_pos = 0;
    for (std::size_t p = 0; p < ids.size(); p += chunk) {
      const std::size_t n = std::min(chunk, ids.size() - p);
      Tensor logits = Tensor::empty(Shape{static_cast<std::int64_t>(n), vocab}, DType::kF32);
      const typename Model::Chunk c{seq.get(), std::span(ids).subspan(p, n), static_cast<std::int32_t>(n)};
      model.forward({&c, 1}, logits);
      for (std::size_t i = 0; i < n * static_cast<std::size_t>(vocab); ++i) {
        const double d = std::fabs(logits.data<float>()[i] - ref.full.data[p * static_cast<std::size_t>(vocab) + i]);
        if (d > worst) {
          worst = d;
          worst_pos = p + i / static_cast<std::size_t>(vocab);
        }
      }
    }
    EXPECT_LT(worst / ref_max, kTolerance) << "chunk " << chunk << ": worst at position " << worst_pos;
  }
}

// Prefill the prompt, then decode one token at a time feeding back the model's own argmax: every
// step's logits within kTolerance of logits_greedy.npy and every token equal to HF's.
template <typename Model>
void expect_greedy_decode_matches(Model& model, const Reference& ref) {
  const std::int64_t vocab = model.config().vocab_size;
  const double ref_max = max_abs(ref.greedy_logits.data);
  auto seq = model.new_sequence();
  Tensor logits = Tensor::empty(Shape{1, vocab}, DType::kF32);
  std::vector<std::int32_t> next = ref.prompt;
  for (std::size_t step = 0; step < ref.greedy.size(); ++step) {
    const typename Model::Chunk c{seq.get(), next, 1};
    model.forward({&c, 1}, logits);
    const float* want = ref.greedy_logits.data.data() + step * static_cast<std::size_t>(vocab);
    double worst = 0;
    for (std::int64_t i = 0; i < vocab; ++i)
      worst = std::max(worst, double(std::fabs(logits.data<float>()[i] - want[i])));
    EXPECT_LT(worst / ref_max, kTolerance) << "decode step " << step;
    const std::int32_t token = argmax(logits.data<float>(), vocab);
    ASSERT_EQ(token, ref.greedy[step]) << "greedy token " << step;
    next = {token};
  }
}

}  // namespace deepinfer::golden
