// Dummy weights (--load-format dummy): the real V4-Flash config cut to N layers keeps its widths and
// layer roles; the synthesised tensors are in the release formats, deterministic per seed, and a
// model built from them loads and gives finite, seed-dependent logits on the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "io/tiny_checkpoint.h"
#include "model/deepseek_v4/dummy_weights.h"
#include "model/deepseek_v4/model.h"
#include "model/weight_manifest.h"

namespace deepinfer::model::v4 {
namespace {

io::ModelConfig flash_config() {
  const std::string path = std::string(DEEPINFER_SOURCE_DIR) + "/tests/io/fixtures/v4_flash.release.json";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return io::parse_model_config(text.str(), path);
}

std::int64_t released_bytes(const io::ModelConfig& c) {
  std::int64_t total = 0;
  for (const ManifestEntry& e : build_weight_manifest(c)) total += e.released_bytes();
  return total;
}

TEST(DummyWeights, FlashConfigCutToEightLayersKeepsTheRealGeometry) {
  const io::ModelConfig full = flash_config();
  const io::ModelConfig c = dummy_model_config(full, 8);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.hidden_size, full.hidden_size);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.num_hash_layers, full.num_hash_layers);
  EXPECT_EQ(std::vector<int>(c.compress_ratios.begin(), c.compress_ratios.end()),
            std::vector<int>(full.compress_ratios.begin(), full.compress_ratios.begin() + 8));
  EXPECT_TRUE(c.quant.fp8);
  EXPECT_EQ(c.quant.expert_format, io::ExpertFormat::kFp4);
  EXPECT_EQ(c.draft.num_stages, 0);
  // One more layer adds at least its 256 FP4 experts (3 matrices of 2048 x 4096 at half a byte).
  const std::int64_t per_layer = released_bytes(dummy_model_config(full, 9)) - released_bytes(c);
  EXPECT_GT(per_layer, 256LL * 3 * 2048 * 4096 / 2);
  std::printf("MEASURED V4-Flash cut to 8 layers: %.2f GB as released (per layer %.2f GB)\n", released_bytes(c) / 1e9,
              per_layer / 1e9);
  EXPECT_THROW(dummy_model_config(full, full.num_layers + 1), Error);
}

TEST(DummyWeights, TensorsComeInTheReleaseFormatsAndDependOnlyOnTheSeed) {
  const io::ModelConfig c = dummy_model_config(io::tiny_model_config({}), 0);
  const auto a = dummy_weights(c, 1), b = dummy_weights(c, 1), other = dummy_weights(c, 2);
  int fp8 = 0, fp4 = 0;
  for (const ManifestEntry& e : build_weight_manifest(c)) {
    ASSERT_TRUE(a->has(e.name)) << e.name;
    const Tensor t = a->tensor(e.name);
    EXPECT_EQ(t.shape(), e.shape) << e.name;
    if (e.format == WeightFormat::kFp8Block) {
      ++fp8;
      EXPECT_EQ(t.dtype(), DType::kF8E4M3);
      EXPECT_EQ(a->tensor(e.scale_name()).dtype(), DType::kUE8M0);
      for (std::size_t i = 0; i < t.nbytes(); ++i) {  // no NaN code (S.1111.111)
        const auto code = static_cast<const std::uint8_t*>(t.raw_data())[i] & 0x7F;
        ASSERT_NE(code, 0x7F) << e.name;
      }
    }
    if (e.format == WeightFormat::kFp4) {
      ++fp4;
      EXPECT_EQ(t.dtype(), DType::kF4E2M1);
    }
    if (e.format == WeightFormat::kFloat) {
      const Tensor f = t.to(DType::kF32);
      for (std::int64_t i = 0; i < f.numel(); ++i) ASSERT_TRUE(std::isfinite(f.data<float>()[i])) << e.name;
    }
    const Tensor same = b->tensor(e.name);
    EXPECT_EQ(std::memcmp(t.raw_data(), same.raw_data(), t.nbytes()), 0) << e.name;
    if (e.numel() >= 64 && e.format != WeightFormat::kIndex && !e.name.ends_with("norm.weight")) {
      EXPECT_NE(std::memcmp(t.raw_data(), other->tensor(e.name).raw_data(), t.nbytes()), 0) << e.name;
    }
  }
  EXPECT_GT(fp8, 0);
  EXPECT_GT(fp4, 0);
  EXPECT_FALSE(a->has("layers.0.not_a_tensor.weight"));
  EXPECT_THROW(a->tensor("layers.0.not_a_tensor.weight"), Error);
}

std::vector<float> logits_of(const io::ModelConfig& c, std::uint64_t seed) {
  auto backend = ops::make_cpu_backend();
  auto m = Model::load(*dummy_weights(c, seed), c, *backend, NumericMode::kReferenceQat);
  auto seq = m->new_sequence();
  const std::vector<std::int32_t> ids = {1, 17, 5, 300, 42, 7, 99, 3};
  Tensor logits = backend->empty(Shape{8, c.vocab_size}, DType::kF32);
  const Model::Chunk chunk{seq.get(), ids, 8};
  m->forward({&chunk, 1}, logits);
  return {logits.data<float>(), logits.data<float>() + logits.numel()};
}

TEST(DummyWeights, ModelLoadsAndGivesFiniteSeedDependentLogits) {
  const io::ModelConfig c = dummy_model_config(io::tiny_model_config({}), 0);
  const std::vector<float> a = logits_of(c, 3), b = logits_of(c, 3), other = logits_of(c, 4);
  double spread = 0;
  for (float x : a) {
    ASSERT_TRUE(std::isfinite(x));
    spread = std::max(spread, std::fabs(static_cast<double>(x - a[0])));
  }
  EXPECT_GT(spread, 1e-3);  // not flat
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
}

}  // namespace
}  // namespace deepinfer::model::v4
