// The whole V4 and V4.1 model on the CUDA backend against HF transformers (tests/golden/v4 and v41
// fixtures) and against the CPU backend: logits of prompt + greedy continuation (one prefill chunk, and
// one token at a time), free-running greedy tokens, in exact and reference-qat mode (V4.1: HF's
// numerics, exact plus its QAT fake-quant where it applied it). Skips where there is no GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>

#include "golden/golden_cases.h"
#include "golden/op_check_backend.h"
#include "golden/v41_case_model.h"
#include "io/checkpoint.h"
#include "model/deepseek_v4/model.h"
#include "model/sequence_model.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "support/gpu_test.h"

namespace deepinfer::golden {
namespace {

using model::v4::Model;
using model::v4::NumericMode;

// max|Δ| / max|ref| over all positions. Exact mode keeps activations f32 on the GPU too (SIMT f32
// GEMMs for f32 inputs, linear and experts), so it matches HF as the CPU backend does: measured on the
// H200 (2026-11-29, docs/PERFORMANCE_CUDA.md) <= 1.1e-6 on every fixture (CPU: <= 8.4e-7). 1e-4 leaves
// room for summation order and is far below what a wrong op gives (0.1-0.5). (With bf16-staged
// activations the error was 4e-3 per projection, which flipped near-tied router and indexer choices:
// 0.15-0.36 on four fixtures.)
constexpr double kExactBound = 1e-4;
// reference-qat picks each FP8 block's power-of-two scale from its amax and rounds values to FP8 and
// bf16: a last-bit difference in f32 summation order (tensor cores vs the CPU's tiles) can flip one
// scale or rounding at an isolated position, and compressed KV carries it forward. Measured on the
// H200: every op equals the CPU op on the same inputs within 5e-5 (attention: 2e-3, bf16
// probabilities; EveryModelOpMatchesTheCpuOpOnTheSameInputs),
// yet single positions differ by 0.1-0.3 (swa_hash: position 65 of 88 only; flash_ratios: 197 of
// 200). So the model-level check is the QAT band: the GPU's QAT logits lie as far from the exact
// logits as the CPU's (measured gaps <= 0.008; a skipped QAT step or a wrong op moves them by 0.1+).
constexpr double kQatBand = 2e-2;
// A greedy token may differ from the reference's only at a step whose reference top-2 gap is within
// twice the noise floor above (1e-4 · max|logit|).
constexpr double kGreedyNoise = 1e-4;

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
std::vector<float> forward_all(model::SequenceModel& m, std::span<const std::int32_t> ids, std::size_t chunk,
                               double* ms) {
  ops::Backend& be = m.backend();
  const std::int64_t vocab = m.config().vocab_size;
  std::vector<float> out(ids.size() * static_cast<std::size_t>(vocab));
  auto seq = m.new_sequence();
  std::size_t calls = 0;
  const double start = now_ms();
  for (std::size_t p = 0; p < ids.size(); p += chunk, ++calls) {
    const std::size_t n = std::min(chunk, ids.size() - p);
    Tensor logits = be.empty(Shape{static_cast<std::int64_t>(n), vocab}, DType::kF32);
    const model::SequenceModel::Chunk c{seq.get(), ids.subspan(p, n), static_cast<std::int32_t>(n)};
    m.forward({&c, 1}, logits);
    Tensor host = Tensor::empty(logits.shape(), DType::kF32);
    be.copy(logits, host);  // synchronises, so the time is the forward's
    std::memcpy(out.data() + p * static_cast<std::size_t>(vocab), host.raw_data(), host.nbytes());
  }
  *ms = (now_ms() - start) / static_cast<double>(calls);
  return out;
}

// Best minus second-best logit of a row.
double top_gap(const float* row, std::int64_t n) {
  std::vector<float> v(row, row + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return static_cast<double>(v[0]) - static_cast<double>(v[1]);
}

// Greedy decode from the prompt, feeding back the model's own argmax.
void greedy_decode(model::SequenceModel& m, const std::vector<std::int32_t>& prompt, std::size_t steps,
                   ModelRun& run) {
  ops::Backend& be = m.backend();
  const std::int64_t vocab = m.config().vocab_size;
  auto seq = m.new_sequence();
  std::vector<std::int32_t> next = prompt;
  for (std::size_t s = 0; s < steps; ++s) {
    Tensor logits = be.empty(Shape{1, vocab}, DType::kF32);
    const model::SequenceModel::Chunk c{seq.get(), next, 1};
    m.forward({&c, 1}, logits);
    Tensor host = Tensor::empty(logits.shape(), DType::kF32);
    be.copy(logits, host);
    const float* row = host.data<float>();
    run.greedy_logits.insert(run.greedy_logits.end(), row, row + vocab);
    run.greedy.push_back(argmax(row, vocab));
    next = {run.greedy.back()};
  }
}

ModelRun run_model(model::SequenceModel& m, const std::vector<std::int32_t>& ids,
                   const std::vector<std::int32_t>& prompt, std::size_t steps) {
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
  nlohmann::json meta;
  std::map<std::string, ModelRun> runs;  // "cpu/exact", "cuda/reference-qat", ...
};

// The case's checkpoint, ids and HF reference, without model runs (shared by the GPU tests'
// fixture() and the CPU-only differential test).
Fixture& fixture_inputs(const Case& c) {
  static std::map<std::string, std::unique_ptr<Fixture>> cache;
  auto& slot = cache[c.arch + "/" + c.name + "/" + c.checkpoint];
  if (slot) return *slot;
  auto f = std::make_unique<Fixture>();
  f->checkpoint = std::make_unique<io::Checkpoint>(io::Checkpoint::open(case_dir(c) / c.checkpoint));
  Reference ref = load_reference(c);
  f->ids = ref.sequence();
  f->prompt = std::move(ref.prompt);
  f->hf_greedy = std::move(ref.greedy);
  f->hf_full = std::move(ref.full);
  f->hf_greedy_logits = std::move(ref.greedy_logits);
  f->meta = std::move(ref.meta);
  slot = std::move(f);
  return *slot;
}

// fixture_inputs plus every backend's run per mode (cached: loading and running the CPU model is the
// slow part).
Fixture& fixture(const Case& c) {
  Fixture& f = fixture_inputs(c);
  if (!f.runs.empty()) return f;
  for (NumericMode mode : {NumericMode::kExact, NumericMode::kReferenceQat}) {
    for (ops::Backend* be : {&cpu_backend(), &cuda_backend()}) {
      auto m = Model::load(*model::v4::checkpoint_weights(*f.checkpoint), f.checkpoint->config(), *be, mode);
      f.vocab = m->config().vocab_size;
      const std::string key = std::string(be == &cpu_backend() ? "cpu/" : "cuda/") + std::string(model::v4::numeric_mode_name(mode));
      f.runs[key] = run_model(*m, f.ids, f.prompt, f.hf_greedy.size());
    }
  }
  return f;
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

// The GPU run's logits (one chunk, and token by token) against HF's and the CPU run's: printed as
// "MEASURED <label>: ..." with timings, each expected below `bound`.
void expect_gpu_logits_match(const std::string& label, const Fixture& f, const ModelRun& gpu, const ModelRun& cpu,
                             double bound) {
  const double hf_prefill = rel_error(gpu.prefill, f.hf_full.data), hf_step = rel_error(gpu.stepped, f.hf_full.data);
  const double cpu_prefill = rel_error(gpu.prefill, cpu.prefill), cpu_step = rel_error(gpu.stepped, cpu.stepped);
  std::printf("MEASURED %s: vs HF prefill %.3g step %.3g | vs CPU prefill %.3g step %.3g | CPU vs HF %.3g | "
              "prefill %zu tok: GPU %.2f ms CPU %.2f ms | per token: GPU %.3f ms CPU %.3f ms\n",
              label.c_str(), hf_prefill, hf_step, cpu_prefill, cpu_step, rel_error(cpu.prefill, f.hf_full.data),
              f.ids.size(), gpu.prefill_ms, cpu.prefill_ms, gpu.step_ms, cpu.step_ms);
  EXPECT_LT(hf_prefill, bound);
  EXPECT_LT(hf_step, bound);
  EXPECT_LT(cpu_prefill, bound);
  EXPECT_LT(cpu_step, bound);
}

class CudaGolden : public ::testing::TestWithParam<Case> {};

TEST_P(CudaGolden, ExactLogitsMatchHfAndCpuInPrefillAndDecode) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = fixture(GetParam());
  expect_gpu_logits_match(GetParam().name + " exact", f, f.runs.at("cuda/exact"), f.runs.at("cpu/exact"), kExactBound);
}

TEST_P(CudaGolden, ExactGreedyDecodeMatchesHfWhereMarginsAllow) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = fixture(GetParam());
  const ModelRun& gpu = f.runs.at("cuda/exact");
  const std::size_t same = check_greedy(gpu.greedy, f.hf_greedy, f.hf_greedy_logits.data, f.vocab, kGreedyNoise);
  std::printf("MEASURED %s exact greedy: %zu/%zu tokens identical to HF\n", GetParam().name.c_str(), same,
              f.hf_greedy.size());
}

TEST_P(CudaGolden, ReferenceQatLogitsStayInTheCpuQatBand) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = fixture(GetParam());
  const ModelRun& gpu = f.runs.at("cuda/reference-qat");
  const ModelRun& cpu = f.runs.at("cpu/reference-qat");
  const double prefill = rel_error(gpu.prefill, cpu.prefill), step = rel_error(gpu.stepped, cpu.stepped);
  std::size_t same = 0;
  while (same < std::min(gpu.greedy.size(), cpu.greedy.size()) && gpu.greedy[same] == cpu.greedy[same]) ++same;
  std::printf("MEASURED %s reference-qat: vs CPU prefill %.3g step %.3g | greedy %zu/%zu identical to CPU | "
              "prefill GPU %.2f ms CPU %.2f ms | per token GPU %.3f ms CPU %.3f ms\n",
              GetParam().name.c_str(), prefill, step, same, cpu.greedy.size(), gpu.prefill_ms, cpu.prefill_ms,
              gpu.step_ms, cpu.step_ms);
  // Where the error sits: the first positions over 1e-2 (isolated flips, see kQatBand).
  const std::size_t positions = gpu.prefill.size() / static_cast<std::size_t>(f.vocab);
  const double scale = max_abs(cpu.prefill);
  std::string profile;
  for (std::size_t p = 0, shown = 0; p < positions && shown < 6; ++p) {
    double worst = 0;
    for (std::int64_t v = 0; v < f.vocab; ++v) {
      const std::size_t i = p * static_cast<std::size_t>(f.vocab) + static_cast<std::size_t>(v);
      worst = std::max(worst, std::fabs(static_cast<double>(gpu.prefill[i]) - cpu.prefill[i]));
    }
    if (worst / scale > 1e-2) {
      profile += " " + std::to_string(p) + ":" + std::to_string(worst / scale).substr(0, 6);
      ++shown;
    }
  }
  // The QAT band: distance of each backend's QAT logits from the CPU's exact ones.
  const ModelRun& cpu_exact = f.runs.at("cpu/exact");
  const double gpu_band = rel_error(gpu.prefill, cpu_exact.prefill), cpu_band = rel_error(cpu.prefill, cpu_exact.prefill);
  const double gpu_band_step = rel_error(gpu.stepped, cpu_exact.stepped);
  const double cpu_band_step = rel_error(cpu.stepped, cpu_exact.stepped);
  std::printf("MEASURED %s reference-qat positions over 1e-2 (of %zu):%s | vs exact: GPU %.3g CPU %.3g (prefill), "
              "GPU %.3g CPU %.3g (steps)\n",
              GetParam().name.c_str(), positions, profile.empty() ? " none" : profile.c_str(), gpu_band, cpu_band,
              gpu_band_step, cpu_band_step);
  EXPECT_NEAR(gpu_band, cpu_band, kQatBand);
  EXPECT_NEAR(gpu_band_step, cpu_band_step, kQatBand);
}

// Differential run: every op of the model on the GPU and, on host copies of the same inputs, on the CPU
// reference (OpCheckBackend), with every allocation poisoned (NaN) and every byte of live memory
// compared around each op in prefill. Names the op whose own output is wrong, where the logit tests
// above only show that something is. Bound per call: 2e-2 of the output's max (measured: <= 5e-5, bf16
// attention probabilities 2e-3); integer outputs (indices, expert ids) must match exactly; no NaN
// output, no byte written outside the op's outputs.
constexpr double kOpBound = 2e-2;

void check_ops(const Case& c, NumericMode mode, bool stepped) {
  Fixture& f = fixture(c);
  OpCheckBackend check(cuda_backend(), cpu_backend());
  check.set_check_strays(!stepped);
  check.set_poison(true);  // byte-compares all memory per op: prefill only (none found so far)
  auto m = Model::load(*model::v4::checkpoint_weights(*f.checkpoint), f.checkpoint->config(), check, mode);
  // Steps: the first 40 tokens (every fixture compresses within them; the byte check is slow).
  const std::size_t n = stepped ? std::min<std::size_t>(f.ids.size(), 40) : f.ids.size();
  double ms = 0;
  const std::vector<float> logits = forward_all(*m, std::span(f.ids).first(n), stepped ? 1 : n, &ms);
  const ModelRun& cpu = f.runs.at("cpu/" + std::string(model::v4::numeric_mode_name(mode)));
  const std::vector<float>& cpu_logits = stepped ? cpu.stepped : cpu.prefill;
  std::printf("OPLOGITS %s %s %s: logits of the op-checked GPU run vs the CPU backend %.3g; %lld uploads differ\n",
              c.name.c_str(), std::string(model::v4::numeric_mode_name(mode)).c_str(), stepped ? "steps" : "prefill",
              rel_error(logits, std::vector<float>(cpu_logits.begin(), cpu_logits.begin() + static_cast<std::ptrdiff_t>(logits.size()))),
              static_cast<long long>(check.bad_uploads()));
  std::fflush(stdout);
  struct Worst {
    std::int64_t calls = 0;
    double l2 = 0, max = 0;
  };
  std::map<std::string, Worst> worst;  // per op kind (name and dtype, shapes dropped)
  std::int64_t bad = 0;
  for (const OpCheck& k : check.checks()) {
    const bool wrong = !(k.rel_max <= kOpBound) || k.int_mismatches > 0 || k.stray_bytes > 0 || k.nan_outputs > 0;
    Worst& w = worst[k.op.substr(0, k.op.find_first_of("[0123456789"))];
    ++w.calls;
    w.l2 = std::max(w.l2, std::isnan(k.rel_l2) ? INFINITY : k.rel_l2);
    w.max = std::max(w.max, std::isnan(k.rel_max) ? INFINITY : k.rel_max);
    if (wrong && ++bad <= 12)
      std::printf("OPCHECK %s %s %s call %lld: %s rel L2 %.3g rel max %.3g int mismatches %lld NaN outputs %lld\n",
                  c.name.c_str(), std::string(model::v4::numeric_mode_name(mode)).c_str(),
                  stepped ? "steps" : "prefill", static_cast<long long>(k.call), k.op.c_str(), k.rel_l2, k.rel_max,
                  static_cast<long long>(k.int_mismatches), static_cast<long long>(k.nan_outputs));
  }
  for (const auto& [op, w] : worst)
    std::printf("OPSTAT %s %s %s: %s calls %lld worst rel L2 %.3g worst rel max %.3g\n", c.name.c_str(),
                std::string(model::v4::numeric_mode_name(mode)).c_str(), stepped ? "steps" : "prefill", op.c_str(),
                static_cast<long long>(w.calls), w.l2, w.max);
  std::fflush(stdout);
  EXPECT_EQ(check.bad_uploads(), 0);
  EXPECT_EQ(bad, 0) << bad << " of " << check.checks().size() << " op calls differ from the CPU op";
}

TEST_P(CudaGolden, EveryModelOpMatchesTheCpuOpOnTheSameInputs) {
  DEEPINFER_REQUIRE_GPU();
  for (NumericMode mode : {NumericMode::kExact, NumericMode::kReferenceQat})
    for (bool stepped : {false, true}) check_ops(GetParam(), mode, stepped);
}

// The same differential run with the CPU backend on both sides: the "device" CPU runs the model as
// written (in-place calls, views), the reference on fresh copies. Needs no GPU: it shows whether the
// CPU reference itself depends on aliasing, and its logits must equal a plain CPU run's.
TEST_P(CudaGolden, CpuModelOpsGiveTheSameResultsOnCopies) {
  Fixture& f = fixture_inputs(GetParam());
  for (NumericMode mode : {NumericMode::kExact, NumericMode::kReferenceQat}) {
    auto second = ops::make_cpu_backend();
    OpCheckBackend check(*second, cpu_backend());
    check.set_check_strays(false);
    check.set_poison(true);  // NaN in every fresh allocation: unwritten memory that is read shows up
    auto m = Model::load(*model::v4::checkpoint_weights(*f.checkpoint), f.checkpoint->config(), check, mode);
    auto plain = Model::load(*model::v4::checkpoint_weights(*f.checkpoint), f.checkpoint->config(), cpu_backend(), mode);
    double ms = 0;
    const std::vector<float> checked = forward_all(*m, f.ids, f.ids.size(), &ms);
    const std::vector<float> want = forward_all(*plain, f.ids, f.ids.size(), &ms);
    std::int64_t bad = 0;
    for (const OpCheck& k : check.checks()) {
      if (k.rel_max <= 1e-6 && k.int_mismatches == 0 && k.nan_outputs == 0) continue;
      if (++bad <= 8)
        std::printf("CPUCHECK %s %s call %lld: %s rel max %.3g int mismatches %lld NaN outputs %lld\n",
                    GetParam().name.c_str(), std::string(model::v4::numeric_mode_name(mode)).c_str(),
                    static_cast<long long>(k.call), k.op.c_str(), k.rel_max, static_cast<long long>(k.int_mismatches),
                    static_cast<long long>(k.nan_outputs));
    }
    const double logits = rel_error(checked, want);
    std::printf("MEASURED %s %s: CPU model with every op on copies vs as written %.3g (%lld ops differ)\n",
                GetParam().name.c_str(), std::string(model::v4::numeric_mode_name(mode)).c_str(), logits,
                static_cast<long long>(bad));
    EXPECT_EQ(bad, 0);
    EXPECT_LT(logits, 1e-6);
  }
}

// Decode steps of a batch of three sequences (bucket 4, one padding row), kSteps of them after three
// prompts of different lengths, run on a model with graphs and on one without: the replayed steps must
// give the eager steps' logits bit for bit, step after step (the graph's state writes — rings,
// compressor groups, compressed rows — feed the next replay exactly as eager ones do). V4 and V4.1.
// `eager` runs on eager_be (the shared backend by default; another backend's options for A/B tests).
template <class M>
void expect_graph_replays_equal_eager_steps(const Fixture& f, M& graphed, M& eager,
                                            ops::Backend& eager_be = cuda_backend()) {
  const std::int64_t vocab = graphed.config().vocab_size;
  const auto n = static_cast<std::int64_t>(f.ids.size());
  constexpr std::int64_t kSteps = 8;
  ASSERT_GT(n, kSteps + 3);
  std::vector<std::vector<float>> out[2];
  for (int which = 0; which < 2; ++which) {
    M& m = which == 0 ? graphed : eager;
    ops::Backend& be = which == 0 ? cuda_backend() : eager_be;
    std::vector<std::unique_ptr<model::v4::SequenceState>> seqs;
    for (std::int64_t s = 0; s < 3; ++s) {  // prompts of n - kSteps - s tokens
      seqs.push_back(m.new_sequence());
      const std::int64_t len = n - kSteps - s;
      Tensor l = be.empty(Shape{1, vocab}, DType::kF32);
      const model::SequenceModel::Chunk c{seqs.back().get(), std::span(f.ids).first(static_cast<std::size_t>(len)), 1};
      m.forward({&c, 1}, l);
    }
    for (std::int64_t step = 0; step < kSteps; ++step) {
      std::vector<model::SequenceModel::Chunk> batch;
      for (std::int64_t s = 0; s < 3; ++s)
        batch.push_back({seqs[static_cast<std::size_t>(s)].get(),
                         std::span(f.ids).subspan(static_cast<std::size_t>(n - kSteps - s + step), 1), 1});
      Tensor l = be.empty(Shape{3, vocab}, DType::kF32);
      m.forward(batch, l);
      Tensor host = Tensor::empty(Shape{3, vocab}, DType::kF32);
      be.copy(l, host);
      out[which].emplace_back(host.data<float>(), host.data<float>() + host.numel());
    }
  }
  EXPECT_GE(graphed.graph_replays(), kSteps - 1) << "decode steps did not run from a graph";
  EXPECT_EQ(eager.graph_replays(), 0);
  for (std::int64_t step = 0; step < kSteps; ++step)
    ASSERT_EQ(std::memcmp(out[0][static_cast<std::size_t>(step)].data(), out[1][static_cast<std::size_t>(step)].data(),
                          out[0][static_cast<std::size_t>(step)].size() * sizeof(float)),
              0)
        << "decode step " << step << " differs between graph replay and eager launches";
}

TEST_P(CudaGolden, DecodeStepsReplayedAsGraphsEqualEagerSteps) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = fixture_inputs(GetParam());
  const auto load = [&](bool graphs) {
    auto m = Model::load(*model::v4::checkpoint_weights(*f.checkpoint), f.checkpoint->config(), cuda_backend(),
                         NumericMode::kReferenceQat);
    m->set_graphs(graphs);
    return m;
  };
  auto graphed = load(true), eager = load(false);
  expect_graph_replays_equal_eager_steps(f, *graphed, *eager);
}

TEST_P(CudaGolden, DependentLaunchesGiveThePlainLaunchesBits) {
  DEEPINFER_REQUIRE_GPU();
  // Every kernel is a programmatic dependent of the one before it (the shared backend's default) and
  // waits for it first: graph replays of decode steps so launched == eager steps on a backend that
  // launches every kernel after its predecessor completed, bit for bit. A kernel touching memory before
  // its wait would race with its predecessor and show here.
  Fixture& f = fixture_inputs(GetParam());
  static const auto plain = [] {
    ops::CudaBackendOptions options;
    options.dependent_launch = false;
    return ops::make_cuda_backend(options);
  }();
  const auto weights = model::v4::checkpoint_weights(*f.checkpoint);
  auto chained = Model::load(*weights, f.checkpoint->config(), cuda_backend(), NumericMode::kReferenceQat);
  auto unchained = Model::load(*weights, f.checkpoint->config(), *plain, NumericMode::kReferenceQat);
  chained->set_graphs(true);
  unchained->set_graphs(false);
  expect_graph_replays_equal_eager_steps(f, *chained, *unchained, *plain);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGolden, ::testing::ValuesIn(all_cases("v4")), case_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaGolden);

// V4.1 (tests/golden/v41) with HF's numerics (golden/v41_case_model.h). Bounds on max|Δ| / max|ref| vs HF
// and vs the CPU backend: the plain cases (roles_plain, no_engram_nocand: exact numerics) kExactBound as
// V4 (measured on the H200 with eval-logits: 7.7e-7 / 1.1e-6). roles_qat adds HF's fake-quant (FP8
// window KV, FP4 compressed KV, FP4 indexer): there an FP4 rounding that fp32 summation order flips
// moves the logits by ~1e-3 (tests/golden/README.md), so it gets v41_golden_test's kTolerance (1e-3),
// which the CPU holds against HF's H200 run (1.8e-4, docs/MODEL_V41.md) although one of its roundings
// differs from HF's. Not the V4 reference-qat band: the fixture was chosen so HF's own fp64 and fp32
// paths agree within 1e-4 and keeps every index entry and candidate block, so no flip changes a choice
// and a rounding flip stays one local step. The band is still printed (MEASURED ... band: distance from
// the run without fake-quant, 0.91 on the CPU) in case 1e-3 proves too tight on the GPU; the V4 criterion
// would then be |GPU band − CPU band| < kQatBand. Greedy tokens must equal HF's at every step (the CPU's
// do). With a CPU backend in place of the GPU's all checks pass (CPU vs HF 7.9e-7 / 6.1e-7 / 1.8e-4).
double v41_bound(const Fixture& f) { return hf_kv_fake_quant(f.meta) ? kTolerance : kExactBound; }

// fixture_inputs plus the CPU and the GPU run with HF's numerics ("cpu/hf", "cuda/hf") and, for QAT
// cases, the CPU run without the fake-quant ("cpu/no-fake-quant", the band's origin).
Fixture& v41_fixture(const Case& c) {
  Fixture& f = fixture_inputs(c);
  if (!f.runs.empty()) return f;
  for (ops::Backend* be : {&cpu_backend(), &cuda_backend()}) {
    auto m = load_v41(*f.checkpoint, f.meta, *be);
    f.vocab = m->config().vocab_size;
    f.runs[be == &cpu_backend() ? "cpu/hf" : "cuda/hf"] = run_model(*m, f.ids, f.prompt, f.hf_greedy.size());
  }
  if (hf_kv_fake_quant(f.meta)) {
    auto m = load_v41(*f.checkpoint, f.meta, cpu_backend(), /*fake_quant=*/false);
    f.runs["cpu/no-fake-quant"] = run_model(*m, f.ids, f.prompt, f.hf_greedy.size());
  }
  return f;
}

class CudaGoldenV41 : public ::testing::TestWithParam<Case> {};

TEST_P(CudaGoldenV41, LogitsMatchHfAndCpuInPrefillAndTokenByToken) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = v41_fixture(GetParam());
  const ModelRun& gpu = f.runs.at("cuda/hf");
  const ModelRun& cpu = f.runs.at("cpu/hf");
  const bool qat = hf_kv_fake_quant(f.meta);
  expect_gpu_logits_match("v41 " + GetParam().name + (qat ? " exact + HF fake-quant" : " exact"), f, gpu, cpu,
                          v41_bound(f));
  if (qat) {
    const ModelRun& plain = f.runs.at("cpu/no-fake-quant");
    std::printf("MEASURED v41 %s band (distance from the CPU run without fake-quant): GPU %.3g CPU %.3g (prefill), "
                "GPU %.3g CPU %.3g (steps)\n",
                GetParam().name.c_str(), rel_error(gpu.prefill, plain.prefill), rel_error(cpu.prefill, plain.prefill),
                rel_error(gpu.stepped, plain.stepped), rel_error(cpu.stepped, plain.stepped));
  }
}

TEST_P(CudaGoldenV41, GreedyDecodeReproducesHfTokensAndStepLogits) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = v41_fixture(GetParam());
  const ModelRun& gpu = f.runs.at("cuda/hf");
  const double bound = v41_bound(f);
  // check_greedy names the first differing step and the reference's margin there.
  const std::size_t same = check_greedy(gpu.greedy, f.hf_greedy, f.hf_greedy_logits.data, f.vocab, bound);
  // Step logits vs HF's over the steps where both decoded the same prefix.
  const auto rows = static_cast<std::ptrdiff_t>(std::min(same, f.hf_greedy.size()) * static_cast<std::size_t>(f.vocab));
  const double logits = rel_error(std::vector<float>(gpu.greedy_logits.begin(), gpu.greedy_logits.begin() + rows),
                                  std::vector<float>(f.hf_greedy_logits.data.begin(),
                                                     f.hf_greedy_logits.data.begin() + rows));
  std::printf("MEASURED v41 %s greedy: %zu/%zu tokens identical to HF, step logits vs HF %.3g\n",
              GetParam().name.c_str(), same, f.hf_greedy.size(), logits);
  EXPECT_EQ(gpu.greedy, f.hf_greedy);
  EXPECT_LT(logits, bound);
}

// V4.1 decode steps bucketed and replayed as CUDA graphs (Engram rows staged per step, the lagged
// mHC pre weights, candidate masks and index lists in the step workspace) give the eager steps' bits.
// Exact mode is never captured, so the models run reference-qat where the fixture's widths fit its
// 32-wide quant blocks (roles_qat) and otherwise reference-qat's bf16 activations without the FP8/FP4
// steps (roles_plain, no_engram_nocand: head_dim 40 / 56) — bf16 activations are what make a step
// capturable.
model::v4::Numerics v41_graph_numerics(const Fixture& f) {
  const io::ModelConfig& config = f.checkpoint->config();
  model::v4::Numerics n = model::v4::Numerics::for_mode(NumericMode::kReferenceQat, config);
  if (!hf_kv_fake_quant(f.meta)) {
    n.linear_act_block = n.kv_quant_block = 0;
    n.kv_quant_whole = n.compressed_kv_fp4 = n.indexer_fp4 = false;
  }
  return n;
}

TEST_P(CudaGoldenV41, DecodeStepsReplayedAsGraphsEqualEagerSteps) {
  DEEPINFER_REQUIRE_GPU();
  Fixture& f = fixture_inputs(GetParam());
  const io::ModelConfig& config = f.checkpoint->config();
  const auto load = [&](bool graphs) {
    auto m = model::v41::Model::load(*model::v4::checkpoint_weights(*f.checkpoint), config, cuda_backend(),
                                      v41_graph_numerics(f), hasher_for(config, f.checkpoint->directory()));
    m->set_graphs(graphs);
    return m;
  };
  auto graphed = load(true), eager = load(false);
  expect_graph_replays_equal_eager_steps(f, *graphed, *eager);
  EXPECT_EQ(graphed->decode_graphs().size(), 1u) << "one bucket (4 rows) should hold one graph";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenV41, ::testing::ValuesIn(all_cases("v41")), case_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaGoldenV41);

}  // namespace
}  // namespace deepinfer::golden
