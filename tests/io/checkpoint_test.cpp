// Checkpoint: DeepSeek / `model.`-prefixed / HF transformers names all reach DeepSeek's names,
// HF's stacked experts come back as per-expert views, and directory errors are named.
#include <gtest/gtest.h>

#include <fstream>

#include "common/error.h"
#include "io/checkpoint.h"
#include "io/safetensors_writer.h"
#include "io/temp_dir.h"
#include "io/tensor_names.h"

namespace deepinfer::io {
namespace {

using deepinfer::testing::TempDir;

TEST(TensorNames, HfNamesMapToDeepSeekNames) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model.embed_tokens.weight", "embed.weight"},
      {"lm_head.weight", "head.weight"},
      {"model.norm.weight", "norm.weight"},
      {"model.hc_head.hc_fn", "hc_head_fn"},
      {"model.hc_head.hc_scale", "hc_head_scale"},
      {"model.layers.3.input_layernorm.weight", "layers.3.attn_norm.weight"},
      {"model.layers.3.post_attention_layernorm.weight", "layers.3.ffn_norm.weight"},
      {"model.layers.3.attn_hc.fn", "layers.3.hc_attn_fn"},
      {"model.layers.3.ffn_hc.base", "layers.3.hc_ffn_base"},
      {"model.layers.3.self_attn.q_a_proj.weight", "layers.3.attn.wq_a.weight"},
      {"model.layers.3.self_attn.q_a_proj.weight_scale_inv", "layers.3.attn.wq_a.scale"},
      {"model.layers.3.self_attn.q_a_norm.weight", "layers.3.attn.q_norm.weight"},
      {"model.layers.3.self_attn.q_b_proj.weight", "layers.3.attn.wq_b.weight"},
      {"model.layers.3.self_attn.kv_proj.weight", "layers.3.attn.wkv.weight"},
      {"model.layers.3.self_attn.kv_norm.weight", "layers.3.attn.kv_norm.weight"},
      {"model.layers.3.self_attn.o_a_proj.weight", "layers.3.attn.wo_a.weight"},
      {"model.layers.3.self_attn.o_b_proj.weight", "layers.3.attn.wo_b.weight"},
      {"model.layers.3.self_attn.sinks", "layers.3.attn.attn_sink"},
      {"model.layers.2.self_attn.compressor.kv_proj.weight", "layers.2.attn.compressor.wkv.weight"},
      {"model.layers.2.self_attn.compressor.gate_proj.weight", "layers.2.attn.compressor.wgate.weight"},
      {"model.layers.2.self_attn.compressor.kv_norm.weight", "layers.2.attn.compressor.norm.weight"},
      {"model.layers.2.self_attn.compressor.position_bias", "layers.2.attn.compressor.ape"},
      {"model.layers.2.self_attn.compressor.indexer.q_b_proj.weight", "layers.2.attn.indexer.wq_b.weight"},
      {"model.layers.2.self_attn.compressor.indexer.weights_proj.weight", "layers.2.attn.indexer.weights_proj.weight"},
      {"model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight", "layers.2.attn.indexer.weights_proj.weight"},
      {"model.layers.2.self_attn.compressor.indexer.kv_proj.weight", "layers.2.attn.indexer.compressor.wkv.weight"},
      {"model.layers.2.self_attn.compressor.indexer.gate_proj.weight", "layers.2.attn.indexer.compressor.wgate.weight"},
      {"model.layers.2.self_attn.compressor.indexer.kv_norm.weight", "layers.2.attn.indexer.compressor.norm.weight"},
      {"model.layers.2.self_attn.compressor.indexer.position_bias", "layers.2.attn.indexer.compressor.ape"},
      {"model.layers.0.mlp.gate.weight", "layers.0.ffn.gate.weight"},
      {"model.layers.0.mlp.gate.tid2eid", "layers.0.ffn.gate.tid2eid"},
      {"model.layers.5.mlp.gate.e_score_correction_bias", "layers.5.ffn.gate.bias"},
      {"model.layers.5.mlp.shared_experts.gate_proj.weight", "layers.5.ffn.shared_experts.w1.weight"},
      {"model.layers.5.mlp.shared_experts.up_proj.weight", "layers.5.ffn.shared_experts.w3.weight"},
      {"model.layers.5.mlp.shared_experts.down_proj.weight_scale_inv", "layers.5.ffn.shared_experts.w2.scale"},
      {"model.layers.5.mlp.experts.7.w1.weight", "layers.5.ffn.experts.7.w1.weight"},
      // DeepSeek's own names (V4 and V4.1) pass through, with or without the prefix.
      {"layers.3.attn.wq_a.weight", "layers.3.attn.wq_a.weight"},
      {"model.layers.14.engram.embed.weight", "layers.14.engram.embed.weight"},
      {"layers.20.attn.indexer.k_norm.weight", "layers.20.attn.indexer.k_norm.weight"},
      {"mtp.2.markov_head.embed.weight", "mtp.2.markov_head.embed.weight"},
      {"mtp.0.ffn.gate.bias", "mtp.0.ffn.gate.bias"},
      {"layers.0.ffn.gate.tid2eid", "layers.0.ffn.gate.tid2eid"},
  };
  for (const auto& [stored, deepseek] : cases) {
    const CanonicalName c = canonical_tensor_name(stored);
    EXPECT_EQ(c.kind, CanonicalName::Kind::kPlain) << stored;
    EXPECT_EQ(c.name, deepseek) << stored;
  }
  EXPECT_FALSE(canonical_tensor_name("layers.3.attn.wq_a.weight").renamed);
  EXPECT_TRUE(canonical_tensor_name("model.layers.3.attn.wq_a.weight").prefixed);
  EXPECT_FALSE(canonical_tensor_name("model.layers.3.attn.wq_a.weight").renamed);
  const CanonicalName stacked = canonical_tensor_name("model.layers.4.mlp.experts.gate_up_proj_scale_inv");
  EXPECT_EQ(stacked.kind, CanonicalName::Kind::kStackedGateUp);
  EXPECT_EQ(stacked.name, "layers.4.ffn.experts");
  EXPECT_TRUE(stacked.scale);
  EXPECT_EQ(canonical_tensor_name("model.layers.4.mlp.experts.down_proj").kind, CanonicalName::Kind::kStackedDown);
}

const char* kConfig = "tests/io/fixtures/v4_flash.release.json";

void copy_config(const TempDir& dir) {
  std::filesystem::copy_file(std::filesystem::path(DEEPINFER_SOURCE_DIR) / kConfig, dir / "config.json");
}

Tensor filled(const Shape& shape, float start) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from_f32(shape, v);
}

TEST(Checkpoint, OpensDeepSeekLayout) {
  TempDir dir;
  copy_config(dir);
  SafetensorsWriter w;
  w.add("layers.0.attn.wq_a.weight", filled(Shape{2, 2}, 1));
  Tensor packed = Tensor::zeros(Shape{4, 16}, DType::kI8);
  w.add("layers.0.ffn.experts.0.w1.weight", packed);
  w.write(dir / "model.safetensors");
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_EQ(ckpt.layout(), NameLayout::kDeepSeek);
  EXPECT_EQ(ckpt.config().num_layers, 43);
  EXPECT_TRUE(ckpt.has("layers.0.attn.wq_a.weight"));
  EXPECT_EQ(ckpt.tensor("layers.0.attn.wq_a.weight").item_f32(3), 4.0f);
  // The preview config does not say how experts are stored: the I8 tensors say fp4.
  EXPECT_EQ(ckpt.config().quant.expert_format, ExpertFormat::kFp4);
  try {
    ckpt.tensor("layers.0.attn.wkv.weight");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'layers.0.attn.wkv.weight'"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, HfStackedExpertsBecomePerExpertViews) {
  TempDir dir;
  copy_config(dir);
  SafetensorsWriter w;
  w.add("model.layers.1.mlp.experts.gate_up_proj", filled(Shape{2, 4, 3}, 0));  // E=2, I=2, K=3
  w.add("model.layers.1.mlp.experts.down_proj", filled(Shape{2, 3, 2}, 100));  // E=2, D=3, I=2
  w.add("model.layers.1.mlp.experts.gate_up_proj_scale_inv", filled(Shape{2, 2, 1}, 50));
  w.add("model.layers.1.self_attn.q_a_proj.weight", filled(Shape{2, 2}, 7));
  w.add("lm_head.weight", filled(Shape{2, 2}, 9));
  w.write(dir / "model.safetensors");
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_EQ(ckpt.layout(), NameLayout::kHuggingFace);
  const Tensor w3 = ckpt.tensor("layers.1.ffn.experts.1.w3.weight");  // expert 1, rows 2..3
  ASSERT_EQ(w3.shape(), (Shape{2, 3}));
  EXPECT_EQ(w3.item_f32(0), 12.0f + 6.0f);
  EXPECT_EQ(w3.item_f32(5), 12.0f + 11.0f);
  const Tensor w1 = ckpt.tensor("layers.1.ffn.experts.0.w1.weight");
  EXPECT_EQ(w1.item_f32(5), 5.0f);
  const Tensor w2 = ckpt.tensor("layers.1.ffn.experts.1.w2.weight");
  ASSERT_EQ(w2.shape(), (Shape{3, 2}));
  EXPECT_EQ(w2.item_f32(0), 106.0f);
  EXPECT_EQ(ckpt.tensor("layers.1.ffn.experts.1.w3.scale").item_f32(0), 50.0f + 3.0f);
  EXPECT_EQ(ckpt.shape("layers.1.ffn.experts.0.w1.weight"), (Shape{2, 3}));
  EXPECT_EQ(ckpt.tensor("layers.1.attn.wq_a.weight").item_f32(0), 7.0f);
  EXPECT_EQ(ckpt.tensor("head.weight").item_f32(0), 9.0f);
  EXPECT_NE(ckpt.describe("layers.1.ffn.experts.1.w3.weight").find("second half"), std::string::npos);
}

TEST(Checkpoint, PrefixedDeepSeekNamesAreRecognised) {
  TempDir dir;
  copy_config(dir);
  SafetensorsWriter w;
  w.add("model.layers.0.attn.wq_a.weight", filled(Shape{2}, 3));
  w.add("model.embed.weight", filled(Shape{2}, 1));
  w.write(dir / "model.safetensors");
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_EQ(ckpt.layout(), NameLayout::kDeepSeekPrefixed);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"embed.weight", "layers.0.attn.wq_a.weight"}));
}

std::string open_error(const std::filesystem::path& dir) {
  try {
    Checkpoint::open(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, DirectoryProblemsAreNamed) {
  TempDir dir;
  EXPECT_NE(open_error(dir / "nope").find("no such model directory"), std::string::npos);
  EXPECT_NE(open_error(dir.path()).find("no config.json"), std::string::npos);
  copy_config(dir);
  EXPECT_NE(open_error(dir.path()).find("no safetensors files"), std::string::npos);
  SafetensorsWriter w;
  w.add("layers.0.attn.wq_a.weight", filled(Shape{2}, 3));
  w.add("model.layers.0.self_attn.q_a_proj.weight", filled(Shape{2}, 3));
  w.write(dir / "model.safetensors");
  const std::string message = open_error(dir.path());
  EXPECT_NE(message.find("both map to 'layers.0.attn.wq_a.weight'"), std::string::npos) << message;
  std::ofstream(dir / "config.json") << "{\"model_type\": \"llama\"}";
  EXPECT_NE(open_error(dir.path()).find("model_type 'llama' is not supported"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::io
