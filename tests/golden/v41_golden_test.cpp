// The C++ V4.1 model against HF transformers' DeepseekV41ForCausalLM (fixtures in tests/golden/v41,
// made by tools/make_golden.py --arch v41): every position's logits within max|Δ| / max|ref| < 1e-3
// however the sequence is split into chunks, the 40 greedy tokens, and the Engram row ids HF hashed.
// Numerics: exact (f32 activations) plus, where HF applied it (meta reference.hf_kv_fake_quant),
// HF's QAT fake-quant of the window KV (FP8), compressed KV (FP4) and indexer (FP4). Engram hashes
// through the compressed map of the tokenizer saved beside each checkpoint (512 ids).
#include <gtest/gtest.h>

#include <memory>

#include "golden/golden_cases.h"
#include "golden/v41_case_model.h"
#include "model/deepseek_v41/model.h"
#include "model/engram/engram_hash.h"

namespace deepinfer::golden {
namespace {

class V41Golden : public ::testing::TestWithParam<Case> {};

TEST_P(V41Golden, EngramRowIdsEqualHfHashIds) {
  const Case& c = GetParam();
  const io::Checkpoint checkpoint = io::Checkpoint::open(case_dir(c) / c.checkpoint);
  const io::ModelConfig& config = checkpoint.config();
  if (config.engram.layer_ids.empty()) GTEST_SKIP() << "no Engram layers in " << c.name;
  const auto hasher = hasher_for(config, case_dir(c) / c.checkpoint);
  const Reference ref = load_reference(c);
  const auto want = read_npy_i32(case_dir(c) / "engram_row_ids.npy");  // [T, layers, columns]
  const std::vector<std::int32_t> ids = ref.sequence();
  const std::int64_t layers = hasher->num_layers(), cols = hasher->columns();
  ASSERT_EQ(want.shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(ids.size()), layers, cols}));
  for (int layer = 0; layer < hasher->num_layers(); ++layer) {
    // One shot, and token by token from the last three ids as decode does.
    std::vector<std::int32_t> whole(ids.size() * static_cast<std::size_t>(cols));
    hasher->row_ids(layer, {}, 0, ids, whole);
    for (std::size_t t = 0; t < ids.size(); ++t) {
      std::vector<std::int32_t> one(static_cast<std::size_t>(cols));
      const std::size_t from = t - std::min<std::size_t>(t, 3);
      hasher->row_ids(layer, std::span(ids).subspan(from, t - from), static_cast<std::int64_t>(t),
                      std::span(ids).subspan(t, 1), one);
      for (std::int64_t k = 0; k < cols; ++k) {
        const std::int32_t hf = want.data[(t * static_cast<std::size_t>(layers) + static_cast<std::size_t>(layer)) *
                                              static_cast<std::size_t>(cols) + static_cast<std::size_t>(k)];
        ASSERT_EQ(whole[t * static_cast<std::size_t>(cols) + static_cast<std::size_t>(k)], hf)
            << "Engram layer " << hasher->layer_id(layer) << " position " << t << " column " << k;
        ASSERT_EQ(one[static_cast<std::size_t>(k)], hf) << "token by token, position " << t << " column " << k;
      }
    }
  }
}

using model::v41::Model;

LoadedCase<Model>& fixture(const Case& c) {
  return loaded_case<Model>(c, [](const io::Checkpoint& checkpoint, const Reference& ref) {
    return load_v41(checkpoint, ref.meta, cpu_backend());
  });
}

TEST_P(V41Golden, LogitsOfEveryPositionMatchHfForEveryChunking) {
  auto& f = fixture(GetParam());
  expect_logits_match_for_every_chunking(*f.model, f.ref);
}

TEST_P(V41Golden, GreedyDecodeReproducesHfTokensAndStepLogits) {
  auto& f = fixture(GetParam());
  expect_greedy_decode_matches(*f.model, f.ref);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V41Golden, ::testing::ValuesIn(all_cases("v41")), case_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(V41Golden);

}  // namespace
}  // namespace deepinfer::golden
