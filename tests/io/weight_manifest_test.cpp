// The weight manifest against the published facts of the real checkpoints (tensor counts, bytes,
// parameter totals, MODEL_SPEC A2 / B2 shapes) and its checker against tiny checkpoints.
#include <gtest/gtest.h>

#include <map>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors_writer.h"
#include "io/temp_dir.h"
#include "io/tiny_checkpoint.h"
#include "model/weight_manifest.h"

namespace deepinfer::model {
namespace {

io::ModelConfig fixture(const std::string& name) {
  io::ModelConfig c = io::load_model_config(std::string(DEEPINFER_SOURCE_DIR) + "/tests/io/fixtures/" + name);
  if (c.quant.expert_format == io::ExpertFormat::kUnspecified) c.quant.expert_format = io::ExpertFormat::kFp4;
  return c;
}

struct Totals {
  std::int64_t stored_tensors = 0;  // weights plus their scale tensors, as the safetensors hold them
  std::int64_t bytes = 0;
  std::int64_t parameters = 0;
};

Totals totals(const std::vector<ManifestEntry>& manifest) {
  Totals t;
  for (const auto& e : manifest) {
    t.stored_tensors += e.scale_name().empty() ? 1 : 2;
    t.bytes += e.released_bytes();
    t.parameters += e.numel();
  }
  return t;
}

const ManifestEntry& find(const std::vector<ManifestEntry>& manifest, const std::string& name) {
  for (const auto& e : manifest)
    if (e.name == name) return e;
  throw std::runtime_error("manifest has no " + name);
}

TEST(WeightManifest, V4FlashPreviewMatchesTheReleasedTensorCount) {
  const auto manifest = build_weight_manifest(fixture("v4_flash.release.json"));
  EXPECT_EQ(totals(manifest).stored_tensors, 69187);  // MODEL_SPEC section 0: 46 shards, 69,187 tensors
}

TEST(WeightManifest, V4Flash0731MatchesTheReleasedTensorCountAndSize) {
  const auto manifest = build_weight_manifest(fixture("v4_flash_0731.release.json"));
  const Totals t = totals(manifest);
  EXPECT_EQ(t.stored_tensors, 72317);  // 48 shards, 72,317 tensors
  EXPECT_NEAR(static_cast<double>(t.bytes) / 1e9, 166.9, 0.05);  // ~166.9 GB
  // Shapes of MODEL_SPEC A2.
  EXPECT_EQ(find(manifest, "layers.0.hc_attn_fn").shape, (Shape{24, 16384}));
  EXPECT_EQ(find(manifest, "layers.0.attn.wo_a.weight").shape, (Shape{8192, 4096}));
  EXPECT_EQ(find(manifest, "layers.0.ffn.gate.tid2eid").shape, (Shape{129280, 6}));
  EXPECT_EQ(find(manifest, "layers.2.attn.compressor.ape").shape, (Shape{4, 1024}));
  EXPECT_EQ(find(manifest, "layers.3.attn.compressor.ape").shape, (Shape{128, 512}));
  EXPECT_EQ(find(manifest, "layers.2.attn.indexer.compressor.wkv.weight").shape, (Shape{256, 4096}));
  const ManifestEntry& w2 = find(manifest, "layers.5.ffn.experts.255.w2.weight");
  EXPECT_EQ(w2.format, WeightFormat::kFp4);
  EXPECT_EQ(w2.shape, (Shape{4096, 2048}));
  EXPECT_EQ(w2.scale_name(), "layers.5.ffn.experts.255.w2.scale");
  EXPECT_EQ(find(manifest, "mtp.0.main_proj.weight").shape, (Shape{4096, 12288}));
  EXPECT_EQ(find(manifest, "mtp.2.confidence_head.proj.weight").shape, (Shape{1, 4352}));
  EXPECT_TRUE(find(manifest, "mtp.1.ffn.experts.0.w1.weight").optional);
  EXPECT_EQ(find(manifest, "mtp.1.attn.wq_a.weight").component, Component::kDraft);
}

TEST(WeightManifest, V41FlashMatchesTheReleasedShapesAndCounts) {
  const auto manifest = build_weight_manifest(fixture("v41_flash.release.json"));
  const Totals t = totals(manifest);
  // 510.29 GB in the release includes the vision tower, which the text manifest leaves out.
  EXPECT_NEAR(static_cast<double>(t.bytes) / 1e9, 509.3, 0.1);
  EXPECT_NEAR(static_cast<double>(t.parameters) / 1e9, 762.7, 0.1);  // "~196B of 763B parameters" are Engram
  std::map<std::string, int> counts;
  for (const auto& e : manifest) {
    if (e.name.rfind("layers.", 0) != 0) continue;
    for (const char* key : {"attn.compressor.wkv.", "attn.compressor.wgate.", "attn.indexer.wq_b.", "attn.indexer.wk."})
      if (e.name.find(key) != std::string::npos) ++counts[key];
  }
  EXPECT_EQ(counts["attn.compressor.wkv."], 4);  // B2 sanity counts
  EXPECT_EQ(counts["attn.compressor.wgate."], 3);
  EXPECT_EQ(counts["attn.indexer.wq_b."], 8);
  EXPECT_EQ(counts["attn.indexer.wk."], 4);
  const ManifestEntry& table = find(manifest, "layers.14.engram.embed.weight");
  EXPECT_EQ(table.shape, (Shape{384016682, 256}));
  EXPECT_EQ(table.block_rows, 1);
  EXPECT_EQ(table.block_cols, 32);
  EXPECT_EQ(find(manifest, "layers.1.engram.wkv.weight").shape, (Shape{25600, 6144}));
  EXPECT_EQ(find(manifest, "layers.0.attn.wq_b.weight").block_rows, 32);
  EXPECT_EQ(find(manifest, "mtp.0.ffn.gate.weight").shape, (Shape{128, 5120}));
  EXPECT_EQ(find(manifest, "mtp.2.markov_head.head.weight").shape, (Shape{129280, 256}));
  EXPECT_EQ(find(manifest, "mtp.2.confidence_head.proj.weight").shape, (Shape{1, 5376}));
  for (const auto& e : manifest) EXPECT_EQ(e.name.find("hc_head"), std::string::npos) << e.name;  // V4.1 has none
}

TEST(WeightManifest, NamesAreUnique) {
  for (const char* name : {"v4_flash.release.json", "v4_flash_0731.release.json", "v41_flash.release.json"}) {
    std::map<std::string, int> seen;
    for (const auto& e : build_weight_manifest(fixture(name))) EXPECT_EQ(seen[e.name]++, 0) << e.name;
  }
}

TEST(WeightManifest, CheckerAcceptsDequantisedWeightsAndRejectsWrongScales) {
  deepinfer::testing::TempDir dir;
  io::TinyModelOptions options;
  options.fp8 = true;
  options.draft = io::DraftKind::kNone;
  options.vocab_size = 256;
  const io::ModelConfig config = io::tiny_model_config(options);
  io::write_random_checkpoint(config, dir.path(), 1);
  const auto manifest = build_weight_manifest(config);
  EXPECT_TRUE(validate_checkpoint(manifest, io::Checkpoint::open(dir.path())).ok());

  // Replace one FP8 weight by a dequantised bf16 copy (no scale) and give another a wrong scale.
  io::SafetensorsWriter extra;
  extra.add("layers.0.attn.wq_a.weight", Tensor::zeros(Shape{128, 128}, DType::kBF16));
  extra.add("layers.1.attn.wq_b.scale", Tensor::zeros(Shape{2, 1}, DType::kUE8M0));
  extra.write(dir / "override.safetensors");
  // Rebuild the directory without an index so every file is read, dropping the originals.
  const auto original = io::ShardedSafetensors::open(dir.path());
  io::SafetensorsWriter rest;
  for (const auto& name : original.names()) {
    if (name == "layers.0.attn.wq_a.weight" || name == "layers.0.attn.wq_a.scale" || name == "layers.1.attn.wq_b.scale" ||
        original.file_of(name).filename() == "override.safetensors")
      continue;
    rest.add(name, original.tensor(name));
  }
  rest.write(dir / "rest.safetensors");
  for (const char* file : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"})
    std::filesystem::remove(dir / file);
  const ManifestReport report = validate_checkpoint(manifest, io::Checkpoint::open(dir.path()));
  ASSERT_EQ(report.issues.size(), 1u);
  EXPECT_EQ(report.issues[0].tensor, "layers.1.attn.wq_b.weight");
  EXPECT_NE(report.issues[0].message.find("scale 'layers.1.attn.wq_b.scale' has shape [2, 1]; expected [4, 1]"),
            std::string::npos)
      << report.issues[0].message;
}

}  // namespace
}  // namespace deepinfer::model
