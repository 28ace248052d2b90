// The whole V4 model on the CUDA backend against HF transformers (tests/golden/v4 fixtures) and against
// the CPU backend: logits of prompt + greedy continuation (one prefill chunk, and one token at a time),
// free-running greedy tokens, in exact and reference-qat mode. Skips where there is no GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>

#include "golden/npy_reader.h"
#include "io/checkpoint.h"
#include "model/deepseek_v4/model.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "support/gpu_test.h"

namespace deepinfer::golden {
namespace {

namespace fs = std::filesystem;
using model::v4::Model;
using model::v4::NumericMode;

// max|Δ| / max|ref| over all positions. The CUDA linear layers round f32 activations to bf16 before
// the tensor-core GEMM (HF and the CPU backend keep them f32), so exact mode cannot reach the CPU
// backend's 1e-3. Measured on the H200 (2026-11-29, docs/PERFORMANCE.md): 4.3e-3 (swa_hash) and 5.4e-3
// (hca_pro_like prefill) where no near-tie router/indexer decision flips; 5e-2 is ten times that floor
// and still far below what a wrong op gives (0.1-0.5, see the fixtures' sensitivity table).
constexpr double kExactBound = 5e-2;
// reference-qat fake-quantises activations to FP8 on both backends; the bf16 staging is the only
// difference left (plus summation order), so the same bound.
constexpr double kQatBound = 5e-2;
// A greedy token may differ from the reference's only at a step whose reference top-2 gap is within
// twice the bf16 noise floor above (5e-3 · max|logit|).
constexpr double kGreedyNoise = 5e-3;

struct Case {
  std::string name;
  std::string checkpoint;  // model (HF save_pretrained) or model_deepseek (DeepSeek layout)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name << "/" << c.checkpoint; }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const fs::path root = fs::path(DEEPINFER_SOURCE_DIR) / "tests/golden/v4";
  if (!fs::exists(root)) return cases;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    for (const char* ckpt : {"model", "model_deepseek"})
      if (fs::exists(entry.path() / ckpt / "config.json")) cases.push_back({entry.path().filename().string(), ckpt});
  }
  std::sort(cases.begin(), cases.end(),
            [](const Case& a, const Case& b) { return a.name + a.checkpoint < b.name + b.checkpoint; });
  return cases;
}

ops::Backend& cpu_backend() {
  static auto b = ops::make_cpu_backend();
  return *b;
}

ops::Backend& cuda_backend() {
  static auto b = ops::make_cuda_backend(0);
  return *b;
}

// What one model produced on one case (host copies) and how long it took.
struct ModelRun {
  std::vector<float> prefill;  // [T, vocab], prompt + HF greedy tokens as one chunk
  std::vector<float> stepped;  // [T, vocab], the same fed one token per forward
  std::vector<std::int32_t> greedy;
  std::vector<float> greedy_logits;  // [steps, vocab] of the free-running greedy decode
  double prefill_ms = 0, step_ms = 0;
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Feeds `ids` in chunks of `chunk` tokens and returns every position's logits; *ms = mean per forward.
std::vector<float> forward_all(Model& m, std::span<const std::int32_t> ids, std::size_t chunk, double* ms) {
  ops::Backend& be = m.backend();
  const std::int64_t vocab = m.config().vocab_size;
  std::vector<float> out(ids.size() * static_cast<std::size_t>(vocab));
  auto seq = m.new_sequence();
  std::size_t calls = 0;
  const double start = now_ms();
  for (std::size_t p = 0; p < ids.size(); p += chunk, ++calls) {
    const std::size_t n = std::min(chunk, ids.size() - p);
    Tensor logits = be.empty(Shape{static_cast<std::int64_t>(n), vocab}, DType::kF32);
    const Model::Chunk c{seq.get(), ids.subspan(p, n), static_cast<std::int32_t>(n)};
    m.forward({&c, 1}, logits);
    Tensor host = Tensor::empty(logits.shape(), DType::kF32);
    be.copy(logits, host);  // synchronises, so the time is the forward's
    std::memcpy(out.data() + p * static_cast<std::size_t>(vocab), host.raw_data(), host.nbytes());
  }
  *ms = (now_ms() - start) / static_cast<double>(calls);
  return out;
}

std::int32_t argmax(const float* row, std::int64_t n) {
  return static_cast<std::int32_t>(std::max_element(row, row + n) - row);
}

// Best minus second-best logit of a row.
double top_gap(const float* row, std::int64_t n) {
  std::vector<float> v(row, row + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return static_cast<double>(v[0]) - static_cast<double>(v[1]);
}

// Greedy decode from the prompt, feeding back the model's own argmax.
void greedy_decode(Model& m, const std::vector<std::int32_t>& prompt, std::size_t steps, ModelRun& run) {
  ops::Backend& be = m.backend();
  const std::int64_t vocab = m.config().vocab_size;
  auto seq = m.new_sequence();
  std::vector<std::int32_t> next = prompt;
  for (std::size_t s = 0; s < steps; ++s) {
    Tensor logits = be.empty(Shape{1, vocab}, DType::kF32);
    const Model::Chunk c{seq.get(), next, 1};
    m.forward({&c, 1}, logits);
    Tensor host = Tensor::empty(logits.shape(), DType::kF32);
    be.copy(logits, host);
    const float* row = host.data<float>();
    run.greedy_logits.insert(run.greedy_logits.end(), row, row + vocab);
    run.greedy.push_back(argmax(row, vocab));
    next = {run.greedy.back()};
  }
}

ModelRun run_model(Model& m, const std::vector<std::int32_t>& ids, const std::vector<std::int32_t>& prompt,
              std::size_t steps) {
  ModelRun run;
  double warm_ms = 0;
  forward_all(m, ids, ids.size(), &warm_ms);  // first call: workspace allocation, kernel loading
  run.prefill = forward_all(m, ids, ids.size(), &run.prefill_ms);
  run.stepped = forward_all(m, ids, 1, &run.step_ms);
  greedy_decode(m, prompt, steps, run);
  return run;
}

// Everything about one case: HF's reference, and each backend's run per mode (cached: loading and
// running the CPU model is the slow part).
struct Fixture {
  std::unique_ptr<io::Checkpoint> checkpoint;
  std::vector<std::int32_t> prompt, hf_greedy, ids;
  NpyArray hf_full, hf_greedy_logits;
  std::int64_t vocab = 0;
  std::map<std::string, ModelRun> runs;  // "cpu/exact", "cuda/reference-qat", ...
};

Fixture& fixture(const Case& c) {
  static std::map<std::string, std::unique_ptr<Fixture>> cache;
  auto& slot = cache[c.name + "/" + c.checkpoint];
  if (slot) return *slot;
  auto f = std::make_unique<Fixture>();
  const fs::path dir = fs::path(DEEPINFER_SOURCE_DIR) / "tests/golden/v4" / c.name;
  f->checkpoint = std::make_unique<io::Checkpoint>(io::Checkpoint::open(dir / c.checkpoint));
  const auto meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
  f->prompt = meta.at("prompt_ids").get<std::vector<std::int32_t>>();
  f->hf_greedy = meta.at("greedy_ids").get<std::vector<std::int32_t>>();
  f->ids = f->prompt;
  f->ids.insert(f->ids.end(), f->hf_greedy.begin(), f->hf_greedy.end());
  f->hf_full = read_npy_f32(dir / "logits_full.npy");
  f->hf_greedy_logits = read_npy_f32(dir / "logits_greedy.npy");
  for (NumericMode mode : {NumericMode::kExact, NumericMode::kReferenceQat}) {
    for (ops::Backend* be : {&cpu_backend(), &cuda_backend()}) {
      auto m = Model::load(*model::v4::checkpoint_weights(*f->checkpoint), f->checkpoint->config(), *be, mode);
      f->vocab = m->config().vocab_size;
      const std::string key = std::string(be == &cpu_backend() ? "cpu/" : "cuda/") + std::string(model::v4::numeric_mode_name(mode));
      f->runs[key] = run_model(*m, f->ids, f->prompt, f->hf_greedy.size());
    }
  }
  slot = std::move(f);
  return *slot;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// max|got − want| / max|want|.
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  return worst / max_abs(want);
}

// Greedy tokens must equal the reference's at every step until one where the reference's own top-2
// gap is within 2·bound·max|logit| (there a flip is allowed and the sequences part). Returns the
// number of identical leading tokens.
std::size_t check_greedy(const std::vector<std::int32_t>& got, const std::vector<std::int32_t>& want,
                         const std::vector<float>& want_logits, std::int64_t vocab, double bound) {
  const double slack = 2 * bound * max_abs(want_logits);
  std::size_t same = 0;
  for (; same < std::min(got.size(), want.size()) && got[same] == want[same]; ++same) {
  }
  if (same < want.size()) {
    const double gap = top_gap(want_logits.data() + same * static_cast<std::size_t>(vocab), vocab);
    EXPECT_LT(gap, slack) << "greedy token " << same << " differs (" << got[same] << " vs " << want[same]
                          << ") although the reference's margin " << gap << " exceeds " << slack;
  }
  return same;
}

class CudaGolden : public ::testing::TestWithParam<Case> {};

TEST_P(CudaGolden, ExactLogitsMatchHfAndCpuInPrefillAndDecode) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = fixture(GetParam());
  const ModelRun& gpu = f.runs.at("cuda/exact");
  const ModelRun& cpu = f.runs.at("cpu/exact");
  const double hf_prefill = rel_error(gpu.prefill, f.hf_full.data), hf_step = rel_error(gpu.stepped, f.hf_full.data);
  const double cpu_prefill = rel_error(gpu.prefill, cpu.prefill), cpu_step = rel_error(gpu.stepped, cpu.stepped);
  std::printf("MEASURED %s exact: vs HF prefill %.3g step %.3g | vs CPU prefill %.3g step %.3g | CPU vs HF %.3g | "
              "prefill %zu tok: GPU %.2f ms CPU %.2f ms | per token: GPU %.3f ms CPU %.3f ms\n",
              GetParam().name.c_str(), hf_prefill, hf_step, cpu_prefill, cpu_step,
              rel_error(cpu.prefill, f.hf_full.data), f.ids.size(), gpu.prefill_ms, cpu.prefill_ms, gpu.step_ms,
              cpu.step_ms);
  EXPECT_LT(hf_prefill, kExactBound);
  EXPECT_LT(hf_step, kExactBound);
  EXPECT_LT(cpu_prefill, kExactBound);
  EXPECT_LT(cpu_step, kExactBound);
}

TEST_P(CudaGolden, ExactGreedyDecodeMatchesHfWhereMarginsAllow) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = fixture(GetParam());
  const ModelRun& gpu = f.runs.at("cuda/exact");
  const std::size_t same = check_greedy(gpu.greedy, f.hf_greedy, f.hf_greedy_logits.data, f.vocab, kGreedyNoise);
  std::printf("MEASURED %s exact greedy: %zu/%zu tokens identical to HF\n", GetParam().name.c_str(), same,
              f.hf_greedy.size());
}

TEST_P(CudaGolden, ReferenceQatLogitsAndGreedyMatchCpuReferenceQat) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = fixture(GetParam());
  const ModelRun& gpu = f.runs.at("cuda/reference-qat");
  const ModelRun& cpu = f.runs.at("cpu/reference-qat");
  const double prefill = rel_error(gpu.prefill, cpu.prefill), step = rel_error(gpu.stepped, cpu.stepped);
  const std::size_t same = check_greedy(gpu.greedy, cpu.greedy, cpu.greedy_logits, f.vocab, kGreedyNoise);
  std::printf("MEASURED %s reference-qat: vs CPU prefill %.3g step %.3g | greedy %zu/%zu identical to CPU | "
              "prefill GPU %.2f ms CPU %.2f ms | per token GPU %.3f ms CPU %.3f ms\n",
              GetParam().name.c_str(), prefill, step, same, cpu.greedy.size(), gpu.prefill_ms, cpu.prefill_ms,
              gpu.step_ms, cpu.step_ms);
  EXPECT_LT(prefill, kQatBound);
  EXPECT_LT(step, kQatBound);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGolden, ::testing::ValuesIn(all_cases()), [](const auto& param_info) {
  return param_info.param.name + (param_info.param.checkpoint == "model" ? "" : "_deepseek_layout");
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaGolden);

}  // namespace
}  // namespace deepinfer::golden
