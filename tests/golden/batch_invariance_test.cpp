// Whole-model batch invariance (issue 6): a sequence decoded alone and as the first or the last row of
// a batch of 4 sequences with other prompts and lengths must get bit-identical logits at every step
// (prefill's last position, then greedy decode steps), on the CPU backend and on a CUDA backend built
// with CudaBackendOptions::batch_invariant (skips without a GPU). Uses the tiny V4 golden fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "golden/golden_cases.h"
#include "model/deepseek_v4/model.h"
#include "model/sequence_model.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "support/gpu_test.h"

namespace deepinfer::golden {
namespace {

using model::v4::Model;
using model::v4::NumericMode;

// Greedy decode steps after the prefill step: every row crosses a compression boundary of the
// fixtures' CSA (ratio 4) and HCA (ratio 16) layers at a different step.
constexpr std::size_t kDecodeSteps = 17;

// logits[sequence][step] (step 0 = the prompt's last position), each `vocab` floats.
using StepLogits = std::vector<std::vector<std::vector<float>>>;

// Prefills every prompt in one forward (one chunk each, last position's logits), then runs `steps`
// forwards of one greedy token per sequence, all sequences together in the order given.
StepLogits decode_together(Model& m, const std::vector<std::vector<std::int32_t>>& prompts, std::size_t steps) {
  ops::Backend& be = m.backend();
  const std::int64_t vocab = m.config().vocab_size;
  const std::size_t rows = prompts.size();
  std::vector<std::unique_ptr<model::v4::SequenceState>> seqs;
  for (std::size_t r = 0; r < rows; ++r) seqs.push_back(m.new_sequence());
  std::vector<std::vector<std::int32_t>> next = prompts;
  StepLogits out(rows);
  for (std::size_t s = 0; s <= steps; ++s) {
    std::vector<model::SequenceModel::Chunk> chunks;
    for (std::size_t r = 0; r < rows; ++r) chunks.push_back({seqs[r].get(), next[r], 1});
    Tensor logits = be.empty(Shape{static_cast<std::int64_t>(rows), vocab}, DType::kF32);
    m.forward(chunks, logits);
    Tensor host = Tensor::empty(logits.shape(), DType::kF32);
    be.copy(logits, host);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* row = host.data<float>() + r * static_cast<std::size_t>(vocab);
      out[r].emplace_back(row, row + vocab);
      next[r] = {argmax(row, vocab)};
    }
  }
  return out;
}

// Other prompts for the batch, cut from the case's sequence: lengths 1, 5 (reversed) and the target's
// plus 9 (shifted by 3), so rows sit at different positions and compress at different steps.
std::vector<std::vector<std::int32_t>> companion_prompts(const Reference& ref) {
  const std::vector<std::int32_t> ids = ref.sequence();
  std::vector<std::int32_t> reversed(ids.rbegin(), ids.rbegin() + 5);
  const std::size_t long_len = std::min(ref.prompt.size() + 9, ids.size() - 3);
  std::vector<std::int32_t> shifted(ids.begin() + 3, ids.begin() + 3 + static_cast<std::ptrdiff_t>(long_len));
  return {{ids[7]}, std::move(reversed), std::move(shifted)};
}

// First step whose logits differ in any bit (by their bit patterns, so -0 vs 0 and NaNs count), with the
// count of differing entries and the largest |Δ|; empty when every step is identical.
std::string first_difference(const std::vector<std::vector<float>>& alone,
                             const std::vector<std::vector<float>>& batched) {
  for (std::size_t s = 0; s < std::min(alone.size(), batched.size()); ++s) {
    const auto& a = alone[s];
    const auto& b = batched[s];
    if (a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) continue;
    std::size_t differ = 0;
    double worst = 0;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      if (std::memcmp(&a[i], &b[i], sizeof(float)) == 0) continue;
      ++differ;
      worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    }
    std::ostringstream os;
    os << "step " << s << (s == 0 ? " (prefill)" : " (decode)") << ": " << differ << " of " << a.size()
       << " logits differ, max |delta| " << worst;
    return os.str();
  }
  return alone.size() == batched.size() ? "" : "step counts differ";
}

// The case's prompt decoded alone, then as row 0 and as row 3 of a batch of 4: bit-identical logits at
// every step, else the failure names the placement and the first differing step.
void expect_batch_invariant(Model& m, const Reference& ref, const std::string& label) {
  const StepLogits alone = decode_together(m, {ref.prompt}, kDecodeSteps);
  const auto others = companion_prompts(ref);
  std::vector<std::vector<std::int32_t>> first = {ref.prompt};
  first.insert(first.end(), others.begin(), others.end());
  std::vector<std::vector<std::int32_t>> last = others;
  last.push_back(ref.prompt);
  const StepLogits as_first = decode_together(m, first, kDecodeSteps);
  const StepLogits as_last = decode_together(m, last, kDecodeSteps);
  // The batch really holds other sequences (a logits row mix-up would otherwise pass unnoticed).
  for (std::size_t r = 1; r < first.size(); ++r)
    ASSERT_NE(first_difference(as_first[0], as_first[r]), "") << label << ": companion " << r << " equals the target";
  EXPECT_EQ(first_difference(alone[0], as_first[0]), "") << label << ": row 0 of 4 vs alone";
  EXPECT_EQ(first_difference(alone[0], as_last[3]), "") << label << ": row 3 of 4 vs alone";
  // The companions too: the same rows in the other order (row r of `first` is row r - 1 of `last`).
  for (std::size_t r = 1; r < first.size(); ++r)
    EXPECT_EQ(first_difference(as_first[r], as_last[r - 1]), "")
        << label << ": companion " << r << " at row " << r << " vs row " << r - 1;
}

std::unique_ptr<Model> load_model(const io::Checkpoint& checkpoint, ops::Backend& be, NumericMode mode) {
  return Model::load(*model::v4::checkpoint_weights(checkpoint), checkpoint.config(), be, mode);
}

ops::Backend& invariant_cuda_backend() {
  static const auto backend = [] {
    ops::CudaBackendOptions options;
    options.batch_invariant = true;
    return ops::make_cuda_backend(options);
  }();
  return *backend;
}

class BatchInvariance : public ::testing::TestWithParam<Case> {};

TEST_P(BatchInvariance, CpuDecodeRowIsBitIdenticalAloneAndFirstOrLastInABatch) {
  const auto checkpoint = io::Checkpoint::open(case_dir(GetParam()) / GetParam().checkpoint);
  const Reference ref = load_reference(GetParam());
  for (NumericMode mode : {NumericMode::kExact, NumericMode::kReferenceQat}) {
    auto m = load_model(checkpoint, cpu_backend(), mode);
    expect_batch_invariant(*m, ref, "cpu/" + std::string(model::v4::numeric_mode_name(mode)));
  }
}

TEST_P(BatchInvariance, CudaBatchInvariantDecodeRowIsBitIdenticalAloneAndFirstOrLastInABatch) {
  DEEPINFER_REQUIRE_GPU();
  const auto checkpoint = io::Checkpoint::open(case_dir(GetParam()) / GetParam().checkpoint);
  const Reference ref = load_reference(GetParam());
  for (NumericMode mode : {NumericMode::kExact, NumericMode::kReferenceQat}) {
    auto m = load_model(checkpoint, invariant_cuda_backend(), mode);
    expect_batch_invariant(*m, ref, "cuda-batch-invariant/" + std::string(model::v4::numeric_mode_name(mode)));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvariance, ::testing::ValuesIn(all_cases("v4")), case_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BatchInvariance);

}  // namespace
}  // namespace deepinfer::golden
