// Whole-model batch invariance (issue 6): a sequence decoded alone, as the first or the last row of a
// batch of 4 sequences with other prompts and lengths, and next to other sequences' prefill chunks must
// get bit-identical logits at every step (prefill's last position, then greedy decode steps), on the
// CPU backend and on a CUDA backend with CudaBackendOptions::batch_invariant (skips without a GPU).
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

// logits[sequence][forward] (a row's last token of that forward), each `vocab` floats.
using StepLogits = std::vector<std::vector<std::vector<float>>>;

// One sequence of a batch: its prompt, fed `chunk` tokens per forward (0: all in the first).
struct BatchRow {
  std::vector<std::int32_t> prompt;
  std::size_t chunk = 0;
};

// Runs `forwards` forwards over all rows together in the order given: each row feeds its prompt's
// next chunk until the prompt is in, then one greedy token (its own argmax) per forward.
StepLogits decode_together(Model& m, const std::vector<BatchRow>& rows, std::size_t forwards) {
  ops::Backend& be = m.backend();
  const std::int64_t vocab = m.config().vocab_size;
  std::vector<std::unique_ptr<model::v4::SequenceState>> seqs;
  std::vector<std::size_t> fed(rows.size(), 0);  // prompt tokens fed so far
  std::vector<std::vector<std::int32_t>> next(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) seqs.push_back(m.new_sequence());
  StepLogits out(rows.size());
  for (std::size_t s = 0; s < forwards; ++s) {
    std::vector<model::SequenceModel::Chunk> chunks;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto& prompt = rows[r].prompt;
      if (fed[r] < prompt.size()) {
        const std::size_t n = rows[r].chunk == 0 ? prompt.size() : std::min(rows[r].chunk, prompt.size() - fed[r]);
        next[r].assign(prompt.begin() + static_cast<std::ptrdiff_t>(fed[r]),
                       prompt.begin() + static_cast<std::ptrdiff_t>(fed[r] + n));
        fed[r] += n;
      }
      chunks.push_back({seqs[r].get(), next[r], 1});
    }
    Tensor logits = be.empty(Shape{static_cast<std::int64_t>(rows.size()), vocab}, DType::kF32);
    m.forward(chunks, logits);
    Tensor host = Tensor::empty(logits.shape(), DType::kF32);
    be.copy(logits, host);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const float* row = host.data<float>() + r * static_cast<std::size_t>(vocab);
      out[r].emplace_back(row, row + vocab);
      next[r] = {argmax(row, vocab)};
    }
  }
  return out;
}

// Other prompts for the batch, cut from the case's sequence: lengths 1, 5 (reversed) and the target's
// plus 9 (shifted by 3), so rows sit at different positions and compress at different steps.
std::vector<BatchRow> companion_rows(const Reference& ref) {
  const std::vector<std::int32_t> ids = ref.sequence();
  std::vector<std::int32_t> reversed(ids.rbegin(), ids.rbegin() + 5);
  const std::size_t long_len = std::min(ref.prompt.size() + 9, ids.size() - 3);
  std::vector<std::int32_t> shifted(ids.begin() + 3, ids.begin() + 3 + static_cast<std::ptrdiff_t>(long_len));
  return {{{ids[7]}}, {std::move(reversed)}, {std::move(shifted)}};
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

// The case's prompt decoded alone, then as row 0 and as row 3 of a batch of 4 (all prefilled in the
// first forward), then as row 1 of 3 while the others prefill in chunks of 16 and 2 tokens next to its
// decode steps: bit-identical logits at every step, else the failure names the placement and the
// first differing step.
void expect_batch_invariant(Model& m, const Reference& ref, const std::string& label) {
  const std::size_t forwards = kDecodeSteps + 1;
  const StepLogits alone = decode_together(m, {{ref.prompt}}, forwards);
  const auto others = companion_rows(ref);
  std::vector<BatchRow> first = {{ref.prompt}};
  first.insert(first.end(), others.begin(), others.end());
  std::vector<BatchRow> last = others;
  last.push_back({ref.prompt});
  const StepLogits as_first = decode_together(m, first, forwards);
  const StepLogits as_last = decode_together(m, last, forwards);
  const StepLogits amid_prefills =
      decode_together(m, {{others[2].prompt, 16}, {ref.prompt}, {others[1].prompt, 2}}, forwards);
  // The batch really holds other sequences (a logits row mix-up would otherwise pass unnoticed).
  for (std::size_t r = 1; r < first.size(); ++r)
    ASSERT_NE(first_difference(as_first[0], as_first[r]), "") << label << ": companion " << r << " equals the target";
  EXPECT_EQ(first_difference(alone[0], as_first[0]), "") << label << ": row 0 of 4 vs alone";
  EXPECT_EQ(first_difference(alone[0], as_last[3]), "") << label << ": row 3 of 4 vs alone";
  EXPECT_EQ(first_difference(alone[0], amid_prefills[1]), "") << label << ": row 1 of 3 next to prefill chunks vs alone";
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

TEST_P(BatchInvariance, CpuDecodeRowIsBitIdenticalAloneAndAnywhereInABatch) {
  const auto checkpoint = io::Checkpoint::open(case_dir(GetParam()) / GetParam().checkpoint);
  const Reference ref = load_reference(GetParam());
  for (NumericMode mode : {NumericMode::kExact, NumericMode::kReferenceQat}) {
    auto m = load_model(checkpoint, cpu_backend(), mode);
    expect_batch_invariant(*m, ref, "cpu/" + std::string(model::v4::numeric_mode_name(mode)));
  }
}

TEST_P(BatchInvariance, CudaBatchInvariantDecodeRowIsBitIdenticalAloneAndAnywhereInABatch) {
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
