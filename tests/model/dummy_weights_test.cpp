// Dummy weights (--load-format dummy): the real V4-Flash / V4.1-Flash configs cut to N layers keep
// their widths and layer roles (V4.1: CSA2 sources, Engram layers); the synthesised tensors are in
// the release formats, deterministic per seed, and V4 and V4.1 models built from them load and give
// finite, seed-dependent logits on the CPU backend.
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

io::ModelConfig flash_config(const std::string& file = "v4_flash.release.json") {
  const std::string path = std::string(DEEPINFER_SOURCE_DIR) + "/tests/io/fixtures/" + file;
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
  auto m = load_dummy_model(c, seed, *backend, NumericMode::kReferenceQat);
  auto seq = m->new_sequence();
  const std::vector<std::int32_t> ids = {1, 17, 5, 300, 42, 7, 99, 3};
  Tensor logits = backend->empty(Shape{8, c.vocab_size}, DType::kF32);
  const Model::Chunk chunk{seq.get(), ids, 8};
  m->forward({&chunk, 1}, logits);
  return {logits.data<float>(), logits.data<float>() + logits.numel()};
}

void expect_finite_seed_dependent_logits(const io::ModelConfig& c) {
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

TEST(DummyWeights, ModelLoadsAndGivesFiniteSeedDependentLogits) {
  expect_finite_seed_dependent_logits(dummy_model_config(io::tiny_model_config({}), 0));
}

io::ModelConfig tiny_v41() {
  io::TinyModelOptions options;
  options.arch = io::ModelArch::kDeepseekV41;
  return io::tiny_model_config(options);
}

TEST(DummyWeights, TinyV41ModelLoadsWithEngramAndCsa2AndGivesFiniteLogits) {
  const io::ModelConfig c = dummy_model_config(tiny_v41(), 0);
  EXPECT_EQ(c.quant.block_rows, 32);
  EXPECT_EQ(c.quant.block_cols, 32);
  EXPECT_FALSE(c.engram.layer_ids.empty());
  EXPECT_FALSE(c.kv_source_layer_ids.empty());
  bool engram_fp8 = false;
  const auto w = dummy_weights(c, 1);
  for (const ManifestEntry& e : build_weight_manifest(c)) {
    if (!e.name.ends_with("engram.embed.weight")) continue;
    engram_fp8 = e.format == WeightFormat::kFp8Block;
    EXPECT_EQ(w->tensor(e.name).dtype(), DType::kF8E4M3);
    EXPECT_EQ(w->tensor(e.scale_name()).shape(), (Shape{e.shape[0], e.shape[1] / 32}));
    EXPECT_EQ(w->tensor(e.scale_name()).dtype(), DType::kUE8M0);
  }
  EXPECT_TRUE(engram_fp8);
  expect_finite_seed_dependent_logits(c);
}

// The manifest of a cut config is the full one's backbone entries of the kept layers plus the global
// tensors, entry for entry: the same names, shapes, formats and released bytes.
std::int64_t expect_prefix_of_full_manifest(const io::ModelConfig& full, const io::ModelConfig& cut) {
  std::vector<ManifestEntry> expected;
  for (ManifestEntry& e : build_weight_manifest(full))
    if (e.layer < cut.num_layers && e.component != Component::kDraft) expected.push_back(std::move(e));
  const std::vector<ManifestEntry> got = build_weight_manifest(cut);
  EXPECT_EQ(got.size(), expected.size());
  std::int64_t bytes = 0, expected_bytes = 0;
  for (std::size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
    EXPECT_EQ(got[i].name, expected[i].name);
    EXPECT_EQ(got[i].shape, expected[i].shape) << got[i].name;
    EXPECT_EQ(got[i].format, expected[i].format) << got[i].name;
    EXPECT_EQ(got[i].dtype, expected[i].dtype) << got[i].name;
    bytes += got[i].released_bytes();
    expected_bytes += expected[i].released_bytes();
  }
  EXPECT_EQ(bytes, expected_bytes);
  return bytes;
}

TEST(DummyWeights, V41FlashCutToTwoLayersListsItsEngramTableInTheReleaseFormat) {
  const io::ModelConfig full = flash_config("v41_flash.release.json");
  const io::ModelConfig c = dummy_model_config(full, 2);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.engram.layer_ids, std::vector<int>{1});  // layer 14's table is cut
  EXPECT_EQ(c.engram.num_embeddings, std::vector<std::int64_t>{full.engram.num_embeddings[0]});
  EXPECT_TRUE(c.kv_source_layer_ids.empty());
  EXPECT_EQ(c.candidate_source_layer_id, -1);
  const std::int64_t bytes = expect_prefix_of_full_manifest(full, c);
  // Layer 1's Engram table alone: FP8 rows of head_dim bytes plus one UE8M0 scale per 32 values.
  const std::int64_t rows = full.engram.num_embeddings[0], hd = full.engram.head_dim;
  std::int64_t table = 0;
  for (const ManifestEntry& e : build_weight_manifest(c))
    if (e.name == "layers.1.engram.embed.weight") table = e.released_bytes();
  EXPECT_EQ(table, rows * hd + rows * (hd / 32));
  EXPECT_GT(bytes, table);
  std::printf("MEASURED V4.1-Flash cut to 2 layers: %.2f GB as released (Engram table %.2f GB)\n", bytes / 1e9,
              table / 1e9);
}

TEST(DummyWeights, V41FlashCutsKeepEveryKeptLayersCsa2Role) {
  const io::ModelConfig full = flash_config("v41_flash.release.json");
  // 3: the first KV source (Full); 10: a Reuse layer after the second source; 22: past the
  // candidate source (20) with Reuse / Reindex layers reading it.
  for (const int layers : {3, 10, 22}) {
    const io::ModelConfig c = dummy_model_config(full, layers);
    for (int i = 0; i < layers; ++i) EXPECT_EQ(c.layer(i), full.layer(i)) << layers << " layers, layer " << i;
    expect_prefix_of_full_manifest(full, c);
  }
  EXPECT_EQ(dummy_model_config(full, 10).layer(9).role, io::Csa2Role::kReuse);
  EXPECT_EQ(dummy_model_config(full, 10).layer(9).kv_source_layer, 8);
  EXPECT_EQ(dummy_model_config(full, 22).candidate_source_layer_id, 20);
  EXPECT_EQ(dummy_model_config(full, 10).candidate_source_layer_id, -1);
  EXPECT_EQ(dummy_model_config(full, 10).index_source_layer_ids, (std::vector<int>{2, 8}));
  EXPECT_THROW(dummy_model_config(full, full.num_layers + 1), Error);
}

}  // namespace
}  // namespace deepinfer::model::v4
