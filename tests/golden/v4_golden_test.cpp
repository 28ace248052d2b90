// The C++ V4 model in exact mode against HF transformers' DeepseekV4ForCausalLM (fixtures in
// tests/golden/v4, made by tools/make_golden.py): every position's logits within
// max|Δ| / max|ref| < 1e-3 however the sequence is split into chunks, and the 40 greedy tokens.
#include <gtest/gtest.h>

#include "golden/golden_cases.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::golden {
namespace {

using model::v4::Model;

LoadedCase<Model>& fixture(const Case& c) {
  return loaded_case<Model>(c, [](const io::Checkpoint& checkpoint, const Reference&) {
    return Model::load(*model::v4::checkpoint_weights(checkpoint), checkpoint.config(), cpu_backend(),
                       model::v4::NumericMode::kExact);
  });
}

class V4Golden : public ::testing::TestWithParam<Case> {};

TEST_P(V4Golden, LogitsOfEveryPositionMatchHfForEveryChunking) {
  auto& f = fixture(GetParam());
  expect_logits_match_for_every_chunking(*f.model, f.ref);
}

TEST_P(V4Golden, GreedyDecodeReproducesHfTokensAndStepLogits) {
  auto& f = fixture(GetParam());
  expect_greedy_decode_matches(*f.model, f.ref);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Golden, ::testing::ValuesIn(all_cases("v4")), case_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(V4Golden);

}  // namespace
}  // namespace deepinfer::golden
