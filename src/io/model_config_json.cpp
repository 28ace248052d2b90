// ModelConfig -> config.json in the released spelling (what make-tiny writes), spelling detection
// for `inspect`, and the names of the config enums.
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/model_config.h"

namespace deepinfer::io {
namespace {

using json = nlohmann::json;

json rope_scaling_json(const YarnConfig& yarn) {
  json out = {{"type", "yarn"},
              {"factor", yarn.factor},
              {"original_max_position_embeddings", yarn.original_max_position_embeddings},
              {"beta_fast", yarn.beta_fast},
              {"beta_slow", yarn.beta_slow}};
  if (yarn.attention_factor != 1.0) out["attention_factor"] = yarn.attention_factor;
  return out;
}

// Fields shared by V4's top level and V4.1's text_config.
json text_fields(const ModelConfig& c) {
  std::vector<int> ratios = c.compress_ratios;
  ratios.resize(ratios.size() + static_cast<std::size_t>(c.draft.num_stages), 0);
  json t = {{"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"qk_rope_head_dim", c.rope_head_dim},
            {"q_lora_rank", c.q_lora_rank},
            {"o_groups", c.o_groups},
            {"o_lora_rank", c.o_lora_rank},
            {"sliding_window", c.sliding_window},
            {"compress_ratios", ratios},
            {"rope_theta", c.rope.theta},
            {"compress_rope_theta", c.rope.compress_theta},
            {"max_position_embeddings", c.max_position_embeddings},
            {"index_n_heads", c.index_n_heads},
            {"index_head_dim", c.index_head_dim},
            {"index_topk", c.index_topk},
            {"n_routed_experts", c.n_routed_experts},
            {"num_experts_per_tok", c.num_experts_per_tok},
            {"n_shared_experts", c.n_shared_experts},
            {"moe_intermediate_size", c.moe_intermediate_size},
            {"scoring_func", c.scoring_func},
            {"topk_method", c.topk_method},
            {"norm_topk_prob", c.norm_topk_prob},
            {"routed_scaling_factor", c.routed_scaling_factor},
            {"swiglu_limit", c.swiglu_limit},
            {"gate_temp", c.gate_temp},
            {"hc_mult", c.hc_mult},
            {"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
            {"hc_eps", c.hc_eps},
            {"rms_norm_eps", c.rms_norm_eps},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", c.tie_word_embeddings}};
  t["rope_scaling"] = c.rope.yarn ? rope_scaling_json(*c.rope.yarn) : json{{"type", "default"}};
  const DraftConfig& d = c.draft;
  if (d.kind == DraftKind::kDSpark) {
    t["dspark_block_size"] = d.block_size;
    t["dspark_noise_token_id"] = d.noise_token_id;
    t["dspark_target_layer_ids"] = d.target_layer_ids;
    t["dspark_markov_rank"] = d.markov_rank;
  }
  return t;
}

json quantization_json(const QuantizationConfig& q) {
  json out = {{"quant_method", "fp8"},
              {"fmt", "e4m3"},
              {"activation_scheme", "dynamic"},
              {"weight_block_size", {q.block_rows, q.block_cols}}};
  if (!q.scale_fmt.empty()) out["scale_fmt"] = q.scale_fmt;
  return out;
}

}  // namespace

std::string_view model_arch_name(ModelArch arch) {
  return arch == ModelArch::kDeepseekV4 ? "deepseek_v4" : "deepseek_v41";
}

std::string_view attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kSlidingWindow: return "SWA";
    case AttentionKind::kCompressedSparse: return "CSA";
    case AttentionKind::kHeavilyCompressed: return "HCA";
    case AttentionKind::kSharedCompressed: return "CSA2";
  }
  return "?";
}

std::string_view csa2_role_name(Csa2Role role) {
  switch (role) {
    case Csa2Role::kNone: return "-";
    case Csa2Role::kFull: return "Full";
    case Csa2Role::kReuse: return "Reuse";
    case Csa2Role::kReindex: return "Reindex";
  }
  return "?";
}

std::string_view expert_format_name(ExpertFormat format) {
  switch (format) {
    case ExpertFormat::kUnspecified: return "unspecified";
    case ExpertFormat::kFp4: return "fp4";
    case ExpertFormat::kFp8: return "fp8";
    case ExpertFormat::kBf16: return "bf16";
  }
  return "?";
}

std::string_view draft_kind_name(DraftKind kind) {
  switch (kind) {
    case DraftKind::kNone: return "none";
    case DraftKind::kMtp: return "MTP";
    case DraftKind::kDSpark: return "DSpark";
  }
  return "?";
}

const LayerSpec& ModelConfig::layer(int index) const {
  DI_CHECK(index >= 0 && index < static_cast<int>(layers.size()), "layer {} out of range (the model has {} layers)", index,
           layers.size());
  return layers[static_cast<std::size_t>(index)];
}

std::string model_config_to_json(const ModelConfig& c) {
  json text = text_fields(c);
  json root;
  const std::string expert = std::string(expert_format_name(c.quant.expert_format));
  if (c.arch == ModelArch::kDeepseekV4) {
    root = {{"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"bos_token_id", 0}, {"eos_token_id", 1}};
    root.update(text);
    root["num_hash_layers"] = c.num_hash_layers;
    // The 0731 release keeps num_nextn_predict_layers = 1 beside its 3 DSpark stages.
    root["num_nextn_predict_layers"] =
        c.draft.kind == DraftKind::kMtp ? c.draft.num_stages : c.draft.kind == DraftKind::kDSpark ? 1 : 0;
    if (c.quant.fp8) root["quantization_config"] = quantization_json(c.quant);
    if (c.quant.expert_format != ExpertFormat::kUnspecified) root["expert_dtype"] = expert;
  } else {
    text["model_type"] = "deepseek_v41_text";
    text["kv_source_layer_ids"] = c.kv_source_layer_ids;
    text["index_source_layer_ids"] = c.index_source_layer_ids;
    text["candidate_source_layer_id"] = c.candidate_source_layer_id;
    if (c.candidate_source_layer_id >= 0) {
      text["candidate_topk_blocks"] = c.candidate_topk_blocks;
      text["candidate_block_size"] = c.candidate_block_size;
    }
    text["num_nextn_predict_layers"] = c.draft.num_stages;
    if (c.draft.kind == DraftKind::kDSpark) {
      text["dspark_n_routed_experts"] = c.draft.n_routed_experts;
      text["dspark_num_experts_per_tok"] = c.draft.num_experts_per_tok;
    }
    const EngramConfig& e = c.engram;
    text["engram_layer_ids"] = e.layer_ids;
    if (!e.layer_ids.empty()) {
      text["engram_num_embeddings"] = e.num_embeddings;
      text["engram_max_ngram_size"] = e.max_ngram_size;
      text["engram_vocab_size"] = e.vocab_size;
      text["engram_n_heads"] = e.n_heads;
      text["engram_head_dim"] = e.head_dim;
      text["engram_pad_token_id"] = e.pad_token_id;
      if (e.compressed_vocab_size > 0) text["engram_compressed_vocab_size"] = e.compressed_vocab_size;
    }
    root = {{"architectures", {"DeepseekV41ForCausalLM"}}, {"model_type", "deepseek_v41"}, {"text_config", text}};
    if (c.quant.fp8) {
      root["quantization_config"] = quantization_json(c.quant);
      if (c.quant.expert_format != ExpertFormat::kUnspecified) root["quantization_config"]["expert_dtype"] = expert;
    } else if (c.quant.expert_format != ExpertFormat::kUnspecified) {
      root["text_config"]["expert_dtype"] = expert;
    }
    if (c.vision.image_token_id >= 0) root["image_token_id"] = c.vision.image_token_id;
    if (c.vision.present)
      root["vision_config"] = {{"model_type", "deepseek_v41_vision"},
                               {"num_hidden_layers", c.vision.num_layers},
                               {"hidden_size", c.vision.hidden_size}};
  }
  root["torch_dtype"] = "bfloat16";
  return root.dump(2) + "\n";
}

std::string detect_config_spelling(std::string_view json_text) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return "unknown";
  const json& text = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  if (text.contains("layer_types") || text.contains("rope_parameters") || text.contains("mlp_layer_types") ||
      text.contains("partial_rotary_factor"))
    return "hf-transformers";
  if (text.contains("dim") || text.contains("n_layers")) return "deepseek-inference";
  return "deepseek-release";
}

}  // namespace deepinfer::io
