// ModelConfig: the three released models in all three spellings, the derived layer roles, and
// clear errors for missing or contradictory fields.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "common/error.h"
#include "io/model_config.h"

namespace deepinfer::io {
namespace {

using json = nlohmann::json;

std::string fixture_path(const std::string& name) { return std::string(DEEPINFER_SOURCE_DIR) + "/tests/io/fixtures/" + name; }

json load_json(const std::string& name) {
  std::ifstream in(fixture_path(name));
  return json::parse(in);
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "config.json"); }

// Parses `j` after `edit` and returns the error message (fails the test if parsing succeeds).
std::string error_of(json j, const std::function<void(json&)>& edit) {
  edit(j);
  try {
    parse(j);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error for " << j.dump().substr(0, 200);
  return "";
}

int count_kind(const ModelConfig& c, AttentionKind kind) {
  int n = 0;
  for (const auto& layer : c.layers) n += layer.attention == kind;
  return n;
}

TEST(ModelConfig, V4FlashPreviewReleaseMatchesTheSpecTables) {
  const ModelConfig c = load_model_config(fixture_path("v4_flash.release.json"));
  EXPECT_EQ(c.arch, ModelArch::kDeepseekV4);
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 43);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.num_hash_layers, 3);
  ASSERT_EQ(c.layers.size(), 43u);
  EXPECT_EQ(count_kind(c, AttentionKind::kSlidingWindow), 2);
  EXPECT_EQ(count_kind(c, AttentionKind::kCompressedSparse), 21);
  EXPECT_EQ(count_kind(c, AttentionKind::kHeavilyCompressed), 20);
  EXPECT_EQ(c.layer(42).attention, AttentionKind::kCompressedSparse);  // P16: layer 42 is CSA, not SWA
  EXPECT_EQ(c.layer(3).attention, AttentionKind::kHeavilyCompressed);
  EXPECT_TRUE(c.layer(2).hash_routed);
  EXPECT_FALSE(c.layer(3).hash_routed);
  EXPECT_TRUE(c.layer(2).has_indexer);
  EXPECT_FALSE(c.layer(3).has_indexer);
  EXPECT_EQ(c.layer(0).rope_theta, 10000);
  EXPECT_FALSE(c.layer(0).yarn);
  EXPECT_EQ(c.layer(2).rope_theta, 160000);
  EXPECT_TRUE(c.layer(2).yarn);
  ASSERT_TRUE(c.rope.yarn.has_value());
  EXPECT_EQ(c.rope.yarn->factor, 16);
  EXPECT_EQ(c.rope.yarn->original_max_position_embeddings, 65536);
  EXPECT_EQ(c.draft.kind, DraftKind::kMtp);
  EXPECT_EQ(c.draft.num_stages, 1);
  EXPECT_TRUE(c.quant.fp8);
  EXPECT_EQ(c.quant.block_rows, 128);
  EXPECT_EQ(c.quant.scale_fmt, "ue8m0");
  EXPECT_EQ(c.quant.expert_format, ExpertFormat::kUnspecified);  // the preview's config.json omits it
}

TEST(ModelConfig, V4Flash0731HasThreeDSparkStagesDespiteNumNextnOne) {
  const ModelConfig c = load_model_config(fixture_path("v4_flash_0731.release.json"));
  EXPECT_EQ(c.draft.kind, DraftKind::kDSpark);
  EXPECT_EQ(c.draft.num_stages, 3);
  EXPECT_EQ(c.draft.block_size, 5);
  EXPECT_EQ(c.draft.noise_token_id, 128799);
  EXPECT_EQ(c.draft.target_layer_ids, (std::vector<int>{40, 41, 42}));
  EXPECT_EQ(c.draft.markov_rank, 256);
  EXPECT_EQ(c.draft.n_routed_experts, 256);
  ASSERT_EQ(c.draft.stages.size(), 3u);
  EXPECT_EQ(c.draft.stages[2].index, 45);
  EXPECT_EQ(c.draft.stages[2].attention, AttentionKind::kSlidingWindow);
  EXPECT_EQ(c.quant.expert_format, ExpertFormat::kFp4);
}

TEST(ModelConfig, V41FlashLayerRolesFollowTheCsa2Table) {
  const ModelConfig c = load_model_config(fixture_path("v41_flash.release.json"));
  EXPECT_EQ(c.arch, ModelArch::kDeepseekV41);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_layers, 40);
  EXPECT_EQ(c.q_lora_rank, 1280);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.index_n_heads, 32);
  EXPECT_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(c.num_hash_layers, 0);
  for (int i : {0, 1}) EXPECT_EQ(c.layer(i).attention, AttentionKind::kSlidingWindow) << i;
  for (int i : {2, 8, 14}) {
    EXPECT_EQ(c.layer(i).role, Csa2Role::kFull) << i;
    EXPECT_EQ(c.layer(i).compress_ratio, 2) << i;
    EXPECT_TRUE(c.layer(i).owns_compressor && c.layer(i).owns_index_keys && c.layer(i).has_indexer) << i;
  }
  EXPECT_EQ(c.layer(20).role, Csa2Role::kFull);
  EXPECT_EQ(c.layer(20).compress_ratio, 1);
  EXPECT_TRUE(c.layer(20).candidate_source);
  for (int i : {24, 28, 32, 36}) {
    EXPECT_EQ(c.layer(i).role, Csa2Role::kReindex) << i;
    EXPECT_EQ(c.layer(i).kv_source_layer, 20) << i;
    EXPECT_FALSE(c.layer(i).owns_index_keys) << i;
  }
  for (int i : {3, 7, 9, 19, 21, 23, 25, 39}) EXPECT_EQ(c.layer(i).role, Csa2Role::kReuse) << i;
  EXPECT_EQ(c.layer(7).kv_source_layer, 2);
  EXPECT_EQ(c.layer(13).kv_source_layer, 8);
  EXPECT_EQ(c.layer(19).kv_source_layer, 14);
  EXPECT_EQ(c.layer(23).index_source_layer, 20);
  EXPECT_EQ(c.layer(27).index_source_layer, 24);
  EXPECT_EQ(c.layer(39).index_source_layer, 36);
  EXPECT_TRUE(c.layer(1).engram);
  EXPECT_TRUE(c.layer(14).engram);
  EXPECT_FALSE(c.layer(2).engram);
  EXPECT_EQ(c.engram.num_embeddings, (std::vector<std::int64_t>{384006168, 384016682}));
  EXPECT_EQ(c.engram.compressed_vocab_size, 99092);
  EXPECT_EQ(c.draft.kind, DraftKind::kDSpark);
  EXPECT_EQ(c.draft.num_stages, 3);
  EXPECT_EQ(c.draft.n_routed_experts, 128);
  EXPECT_EQ(c.draft.num_experts_per_tok, 3);
  EXPECT_EQ(c.quant.block_rows, 32);
  EXPECT_EQ(c.quant.expert_format, ExpertFormat::kFp4);
  EXPECT_TRUE(c.vision.present);
  EXPECT_EQ(c.vision.num_layers, 32);
  EXPECT_EQ(c.vision.hidden_size, 1024);
}

class ConfigSpellings : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigSpellings, ReleaseInferenceAndHfSpellingsGiveIdenticalConfigs) {
  const std::string model = GetParam();
  const ModelConfig release = load_model_config(fixture_path(model + ".release.json"));
  const ModelConfig hf = load_model_config(fixture_path(model + ".hf.json"));
  ModelConfig inference = load_model_config(fixture_path(model + ".inference.json"));
  EXPECT_EQ(release, hf);
  if (release.quant.expert_format == ExpertFormat::kUnspecified) {
    // Only the preview's HF-style config.json omits expert_dtype; inference/config.json states fp4.
    EXPECT_EQ(inference.quant.expert_format, ExpertFormat::kFp4);
    inference.quant.expert_format = ExpertFormat::kUnspecified;
  }
  // DeepSeek's inference/config.json does not state image_token_id (its code takes it from the tokenizer).
  EXPECT_EQ(inference.vision.image_token_id, -1);
  inference.vision.image_token_id = release.vision.image_token_id;
  EXPECT_EQ(release, inference);
  EXPECT_EQ(detect_config_spelling(load_json(model + ".hf.json").dump()), "hf-transformers");
  EXPECT_EQ(detect_config_spelling(load_json(model + ".inference.json").dump()), "deepseek-inference");
  EXPECT_EQ(detect_config_spelling(load_json(model + ".release.json").dump()), "deepseek-release");
}

TEST_P(ConfigSpellings, SerialisedConfigParsesBackToTheSameConfig) {
  const ModelConfig release = load_model_config(fixture_path(GetParam() + ".release.json"));
  EXPECT_EQ(parse_model_config(model_config_to_json(release), "roundtrip"), release);
}

INSTANTIATE_TEST_SUITE_P(RealModels, ConfigSpellings, ::testing::Values("v4_flash", "v4_flash_0731", "v41_flash"));

TEST(ModelConfig, RopeParametersAloneDescribeBothRopeBases) {
  json j = load_json("v4_flash.hf.json");
  j.erase("rope_theta");
  j.erase("compress_rope_theta");
  EXPECT_EQ(parse(j), load_model_config(fixture_path("v4_flash.release.json")));
}

TEST(ModelConfig, MissingOrContradictoryFieldsNameTheField) {
  const json v4 = load_json("v4_flash.release.json");
  const json v41 = load_json("v41_flash.release.json");
  const auto expect_error = [](const std::string& message, const std::string& needle) {
    EXPECT_NE(message.find(needle), std::string::npos) << "message: " << message << "\nexpected to mention: " << needle;
    EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  };
  expect_error(error_of(v4, [](json& j) { j.erase("hidden_size"); }), "'hidden_size' / 'dim'");
  expect_error(error_of(v4, [](json& j) { j["dim"] = 5120; }), "'dim' = 5120 contradicts 'hidden_size' = 4096");
  expect_error(error_of(v4, [](json& j) { j["hidden_size"] = "4096"; }), "'hidden_size' must be an integer");
  expect_error(error_of(v4, [](json& j) { j["compress_ratios"] = json::array({0, 0, 4}); }),
               "'compress_ratios' has 3 entries for 43 layers");
  expect_error(error_of(v4, [](json& j) { j["compress_ratios"][43] = 4; }), "'compress_ratios[43]' = 4");
  expect_error(error_of(v4,
                        [](json& j) {
                          json types = json::array();
                          for (int i = 0; i < 43; ++i) types.push_back("sliding_attention");
                          j["layer_types"] = types;
                        }),
               "'layer_types[2]' = 'sliding_attention' contradicts 'compress_ratios[2]' = 4");
  expect_error(error_of(v4, [](json& j) { j["model_type"] = "deepseek_v3"; }), "model_type 'deepseek_v3' is not supported");
  expect_error(error_of(v4, [](json& j) { j["architectures"] = {"LlamaForCausalLM"}; }), "'LlamaForCausalLM' is not supported");
  expect_error(error_of(v4, [](json& j) { j["num_key_value_heads"] = 8; }), "num_key_value_heads");
  expect_error(error_of(v4, [](json& j) { j.erase("rope_scaling"); }), "RoPE scaling");
  expect_error(error_of(v4, [](json& j) { j["quantization_config"]["quant_method"] = "awq"; }), "quant_method 'awq'");
  expect_error(error_of(v4, [](json& j) { j["n_mtp_layers"] = 2; }), "MTP/DSpark stages");
  expect_error(error_of(v4,
                        [](json& j) {
                          j.erase("num_hash_layers");
                          json types = json::array({"moe", "hash_moe"});
                          for (int i = 2; i < 43; ++i) types.push_back("moe");
                          j["mlp_layer_types"] = types;
                        }),
               "hash-routed layers must come first");
  expect_error(error_of(v4, [](json& j) { j["num_hash_layers"] = 44; }), "num_hash_layers");
  expect_error(error_of(v4, [](json& j) { j["o_groups"] = 7; }), "o_groups");
  expect_error(error_of(v41, [](json& j) { j["text_config"]["kv_source_layer_ids"] = {1, 8, 14, 20}; }),
               "KV source layer 1 has compress_ratios[1] = 0");
  expect_error(error_of(v41, [](json& j) { j["text_config"]["candidate_source_layer_id"] = 21; }),
               "'text_config.candidate_source_layer_id' = 21 is not an index source layer");
  expect_error(error_of(v41, [](json& j) { j["text_config"].erase("kv_source_layer_ids"); }), "kv_source_layer_ids");
  expect_error(error_of(v41, [](json& j) { j["text_config"]["compress_ratios"][5] = 4; }), "compress_ratios[5]");
  expect_error(error_of(v41, [](json& j) { j["text_config"]["model_type"] = "deepseek_v4"; }), "contradicts");
  expect_error(error_of(v41, [](json& j) { j["text_config"]["engram_num_embeddings"][1] = 384016681; }),
               "'text_config.engram_num_embeddings[1]' = 384016681, but the Engram bucket primes above engram_vocab_size "
               "16000000 give layer 14 384016682 rows");
}

TEST(ModelConfig, EngramBucketPrimesAreConsecutivePrimesAboveTheStart) {
  EngramConfig e;
  e.layer_ids = {1, 4};
  e.max_ngram_size = 3;
  e.n_heads = 2;
  e.vocab_size = 10;
  const auto primes = engram_bucket_primes(e);
  EXPECT_EQ(primes, (std::vector<std::vector<std::int64_t>>{{11, 13, 17, 19}, {23, 29, 31, 37}}));
}

TEST(ModelConfig, DeeplyNestedJsonIsRejected) {
  const std::string deep = "{\"hidden_size\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    parse_model_config(deep, "config.json");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64 levels"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, NothingFallsBackToToyDefaults) {
  // Only an architecture: every geometry field is missing and must be reported, not defaulted.
  const std::string message = [] {
    try {
      parse_model_config(R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"})", "config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(message.find("missing required field 'vocab_size'"), std::string::npos) << message;
}

TEST(ModelConfig, MalformedJsonIsAnErrorNotACrash) {
  for (const char* text : {"", "{", "[1,2]", "null", "{\"model_type\": 5}", "{\"text_config\": 3}"}) {
    EXPECT_THROW(parse_model_config(text, "bad.json"), Error) << text;
  }
  EXPECT_THROW(load_model_config("/nonexistent/config.json"), Error);
}

}  // namespace
}  // namespace deepinfer::io
