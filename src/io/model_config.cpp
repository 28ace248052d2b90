// config.json -> ModelConfig: architecture detection, the field table with every known spelling
// (released / inference ModelArgs / HF transformers), and the consistency checks between them.
#include "io/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "io/config_fields.h"
#include "io/file_util.h"
#include "io/json_util.h"
#include "io/model_config_internal.h"

namespace deepinfer::io {
namespace {

using json = nlohmann::json;
using detail::ConfigFields;

constexpr std::int64_t kMaxDim = 1 << 24;        // generous bound on any width or count
constexpr std::int64_t kMaxVocab = 1 << 26;
constexpr std::int64_t kMaxPosition = std::int64_t{1} << 40;

bool is_v41_type(std::string_view type) { return type == "deepseek_v41" || type == "deepseek_v41_text"; }

std::optional<ModelArch> arch_of_model_type(std::string_view type) {
  if (type == "deepseek_v4") return ModelArch::kDeepseekV4;
  if (is_v41_type(type)) return ModelArch::kDeepseekV41;
  return std::nullopt;
}

std::optional<ModelArch> arch_of_class(std::string_view name) {
  if (name == "DeepseekV4ForCausalLM") return ModelArch::kDeepseekV4;
  if (name == "DeepseekV41ForCausalLM" || name == "DeepseekV41ForConditionalGeneration") return ModelArch::kDeepseekV41;
  return std::nullopt;
}

// model_type and architectures decide; DeepSeek's inference/config.json has neither, and V4.1's
// is told apart by its CSA2 / Engram fields.
ModelArch detect_arch(const ConfigFields& top, const json& text) {
  std::optional<ModelArch> arch;
  std::string because;
  if (const auto type = top.opt_string({"model_type"})) {
    arch = arch_of_model_type(*type);
    if (!arch) top.fail("model_type '{}' is not supported (deepinfer runs deepseek_v4 and deepseek_v41)", *type);
    because = "model_type '" + *type + "'";
  }
  if (&text != &top.object() && text.contains("model_type") && text.at("model_type").is_string()) {
    const auto type = text.at("model_type").get<std::string>();
    const auto text_arch = arch_of_model_type(type);
    if (!text_arch) top.fail("text_config.model_type '{}' is not supported", type);
    if (arch && *arch != *text_arch) top.fail("text_config.model_type '{}' contradicts {}", type, because);
    arch = text_arch;
    because = "text_config.model_type '" + type + "'";
  }
  if (const auto classes = top.opt_string_list({"architectures"})) {
    for (const auto& name : *classes) {
      const auto class_arch = arch_of_class(name);
      if (!class_arch)
        top.fail("architectures entry '{}' is not supported (expected DeepseekV4ForCausalLM or DeepseekV41ForCausalLM)", name);
      if (arch && *arch != *class_arch) top.fail("architectures entry '{}' contradicts {}", name, because);
      arch = class_arch;
      because = "architectures entry '" + name + "'";
    }
  }
  if (arch) return *arch;
  const ConfigFields f(text, top.source());
  if (f.any_present({"kv_source_layers", "kv_source_layer_ids", "index_source_layers", "engram_layer_ids"}))
    return ModelArch::kDeepseekV41;
  if (f.any_present({"dim", "n_layers"})) return ModelArch::kDeepseekV4;
  top.fail("cannot tell the architecture: no model_type or architectures, and not DeepSeek's inference/config.json");
}

int to_int(std::int64_t v) { return static_cast<int>(v); }

void parse_geometry(ModelConfig& c, const ConfigFields& f) {
  c.vocab_size = f.req_int({"vocab_size"}, 1, kMaxVocab);
  c.hidden_size = to_int(f.req_int({"hidden_size", "dim"}, 1, kMaxDim));
  c.num_layers = to_int(f.req_int({"num_hidden_layers", "n_layers"}, 1, 4096));
  c.num_heads = to_int(f.req_int({"num_attention_heads", "n_heads"}, 1, kMaxDim));
  c.num_kv_heads = to_int(f.opt_int({"num_key_value_heads", "n_kv_heads"}, 1, kMaxDim).value_or(1));
  if (c.num_kv_heads != 1)
    f.fail("'{}' = {}: DeepSeek-V4 attention has one shared K=V head", f.field("num_key_value_heads"), c.num_kv_heads);
  c.head_dim = to_int(f.req_int({"head_dim"}, 1, kMaxDim));
  c.q_lora_rank = to_int(f.req_int({"q_lora_rank"}, 1, kMaxDim));
  c.o_groups = to_int(f.req_int({"o_groups"}, 1, kMaxDim));
  c.o_lora_rank = to_int(f.req_int({"o_lora_rank"}, 1, kMaxDim));
  c.sliding_window = to_int(f.req_int({"sliding_window", "window_size"}, 1, kMaxDim));
  c.index_n_heads = to_int(f.req_int({"index_n_heads"}, 1, kMaxDim));
  c.index_head_dim = to_int(f.req_int({"index_head_dim"}, 1, kMaxDim));
  c.index_topk = to_int(f.req_int({"index_topk"}, 1, kMaxDim));
  c.hc_mult = to_int(f.req_int({"hc_mult"}, 1, 64));
  c.hc_sinkhorn_iters = to_int(f.req_int({"hc_sinkhorn_iters"}, 0, 1000));
  c.hc_eps = f.opt_number({"hc_eps"}).value_or(1e-6);
  c.rms_norm_eps = f.opt_number({"rms_norm_eps", "norm_eps"}).value_or(c.arch == ModelArch::kDeepseekV4 ? 1e-6 : 1e-20);
  if (!(c.hc_eps > 0) || !(c.rms_norm_eps > 0)) f.fail("hc_eps and rms_norm_eps must be positive");
  c.tie_word_embeddings = f.opt_bool({"tie_word_embeddings"}).value_or(false);
  if (c.head_dim % 2 != 0) f.fail("'{}' = {} must be even", f.field("head_dim"), c.head_dim);
  if (c.num_heads % c.o_groups != 0)
    f.fail("'{}' = {} does not divide '{}' = {}", f.field("o_groups"), c.o_groups, f.field("num_attention_heads"), c.num_heads);
}

void parse_rope_head_dim(ModelConfig& c, const ConfigFields& f) {
  const auto explicit_dim = f.opt_int({"qk_rope_head_dim", "rope_head_dim"}, 1, c.head_dim);
  const auto factor = f.opt_number({"partial_rotary_factor", "rope_parameters.main.partial_rotary_factor",
                                    "rope_parameters.compress.partial_rotary_factor"});
  std::optional<std::int64_t> derived;
  if (factor) {
    const double dims = *factor * c.head_dim;
    if (!(dims > 0) || std::fabs(dims - std::round(dims)) > 1e-6 || dims > c.head_dim)
      f.fail("'{}' = {} times head_dim {} is not a whole number of dimensions in (0, head_dim]",
             f.field("partial_rotary_factor"), *factor, c.head_dim);
    derived = static_cast<std::int64_t>(std::llround(dims));
  }
  if (explicit_dim && derived && *explicit_dim != *derived)
    f.fail("'{}' = {} contradicts 'partial_rotary_factor' * head_dim = {}", f.field("qk_rope_head_dim"), *explicit_dim, *derived);
  if (!explicit_dim && !derived) f.fail("missing required field 'qk_rope_head_dim' / 'rope_head_dim' / 'partial_rotary_factor'");
  c.rope_head_dim = to_int(explicit_dim ? *explicit_dim : *derived);
  if (c.rope_head_dim % 2 != 0) f.fail("RoPE dimensions {} must be even", c.rope_head_dim);
}

void parse_rope(ModelConfig& c, const ConfigFields& f) {
  c.rope.theta = f.req_number({"rope_theta", "rope_parameters.main.rope_theta"});
  c.rope.compress_theta = f.req_number({"compress_rope_theta", "rope_parameters.compress.rope_theta"});
  if (!(c.rope.theta > 0) || !(c.rope.compress_theta > 0)) f.fail("RoPE bases must be positive");
  if (const auto main_type = f.opt_string({"rope_parameters.main.rope_type", "rope_parameters.main.type"});
      main_type && *main_type != "default")
    f.fail("'{}' = '{}': window-only layers use plain RoPE (\"default\")", f.field("rope_parameters.main.rope_type"), *main_type);

  const auto type = f.opt_string({"rope_scaling.type", "rope_scaling.rope_type", "rope_parameters.compress.rope_type",
                                  "rope_parameters.compress.type"});
  const auto factor = f.opt_number({"rope_scaling.factor", "rope_parameters.compress.factor", "rope_factor"});
  if (type && *type != "yarn" && *type != "default")
    f.fail("RoPE scaling type '{}' is not supported (DeepSeek-V4 uses yarn on compressed layers)", *type);
  if (!type && !factor)
    f.fail("missing the compressed layers' RoPE scaling: expected 'rope_scaling', 'rope_parameters.compress' or 'rope_factor'");
  if (type && *type == "default") {
    if (factor) f.fail("RoPE scaling type 'default' contradicts a scaling factor {}", *factor);
    return;
  }
  YarnConfig yarn;
  if (!factor) f.fail("missing required field 'rope_scaling.factor' / 'rope_factor'");
  yarn.factor = *factor;
  yarn.original_max_position_embeddings = f.req_int(
      {"rope_scaling.original_max_position_embeddings", "rope_parameters.compress.original_max_position_embeddings",
       "original_seq_len"},
      1, kMaxPosition);
  yarn.beta_fast = f.req_number({"rope_scaling.beta_fast", "rope_parameters.compress.beta_fast", "beta_fast"});
  yarn.beta_slow = f.req_number({"rope_scaling.beta_slow", "rope_parameters.compress.beta_slow", "beta_slow"});
  yarn.attention_factor =
      f.opt_number({"rope_scaling.attention_factor", "rope_parameters.compress.attention_factor"}).value_or(1.0);
  if (!(yarn.factor >= 1)) f.fail("YaRN factor {} must be at least 1", yarn.factor);
  c.rope.yarn = yarn;
}

void parse_moe(ModelConfig& c, const ConfigFields& f) {
  c.n_routed_experts = to_int(f.req_int({"n_routed_experts", "num_local_experts"}, 1, kMaxDim));
  c.num_experts_per_tok = to_int(f.req_int({"num_experts_per_tok", "n_activated_experts"}, 1, c.n_routed_experts));
  c.n_shared_experts = to_int(f.req_int({"n_shared_experts"}, 0, 64));
  c.moe_intermediate_size = to_int(f.req_int({"moe_intermediate_size", "moe_inter_dim"}, 1, kMaxDim));
  c.scoring_func = f.req_string({"scoring_func", "score_func"});
  if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "softmax" && c.scoring_func != "sigmoid")
    f.fail("'{}' = '{}' is not supported (sqrtsoftplus, softmax or sigmoid)", f.field("scoring_func"), c.scoring_func);
  c.topk_method = f.opt_string({"topk_method"}).value_or("noaux_tc");
  if (c.topk_method != "noaux_tc")
    f.fail("'{}' = '{}' is not supported (DeepSeek-V4 routes with noaux_tc)", f.field("topk_method"), c.topk_method);
  c.norm_topk_prob = f.opt_bool({"norm_topk_prob"}).value_or(true);
  c.routed_scaling_factor = f.req_number({"routed_scaling_factor", "route_scale"});
  c.swiglu_limit = f.req_number({"swiglu_limit"});
  c.gate_temp = f.opt_number({"gate_temp"}).value_or(1.0);
  if (!(c.routed_scaling_factor > 0) || c.swiglu_limit < 0 || !(c.gate_temp > 0))
    f.fail("routed_scaling_factor and gate_temp must be positive and swiglu_limit non-negative");
}

// compress_rates (HF) name the ratio of each compressed layer type; the reference code gives the
// lightning indexer and the overlapping compressor to ratio 4 only, so CSA must be 4.
std::pair<int, int> parse_compress_rates(const ConfigFields& f) {
  const int csa = to_int(f.opt_int({"compress_rates.compressed_sparse_attention", "compress_rate_csa"}, 1, 1 << 20).value_or(4));
  const int hca = to_int(f.opt_int({"compress_rates.heavily_compressed_attention", "compress_rate_hca"}, 1, 1 << 20).value_or(128));
  if (csa != 4) f.fail("compressed_sparse_attention rate {} is not supported (the reference's CSA ratio is 4)", csa);
  if (hca == 4) f.fail("heavily_compressed_attention rate must differ from the CSA rate 4");
  return {csa, hca};
}

// V4: compress_ratios and/or layer_types (+ compress_rates); num_hash_layers and/or mlp_layer_types.
void parse_schedule_v4(ModelConfig& c, const ConfigFields& f, std::vector<std::int64_t>& all_ratios) {
  const auto [csa, hca] = parse_compress_rates(f);
  const auto ratios = f.opt_int_list({"compress_ratios"}, 0, 1 << 20);
  const auto types = f.opt_string_list({"layer_types"});
  if (!ratios && !types) f.fail("missing required field 'compress_ratios' / 'layer_types'");
  if (types) {
    if (static_cast<int>(types->size()) != c.num_layers)
      f.fail("'{}' has {} entries for {} layers", f.field("layer_types"), types->size(), c.num_layers);
    std::vector<std::int64_t> from_types;
    for (std::size_t i = 0; i < types->size(); ++i) {
      const auto& t = (*types)[i];
      if (t == "sliding_attention") from_types.push_back(0);
      else if (t == "compressed_sparse_attention") from_types.push_back(csa);
      else if (t == "heavily_compressed_attention") from_types.push_back(hca);
      else f.fail("'{}[{}]' = '{}' is not a DeepSeek-V4 layer type", f.field("layer_types"), i, t);
      if (ratios && i < ratios->size() && (*ratios)[i] != from_types.back())
        f.fail("'{}[{}]' = '{}' contradicts '{}[{}]' = {}", f.field("layer_types"), i, t, f.field("compress_ratios"), i,
               (*ratios)[i]);
    }
    if (!ratios) all_ratios = from_types;
  }
  if (ratios) all_ratios = *ratios;
  if (static_cast<int>(all_ratios.size()) < c.num_layers)
    f.fail("'{}' has {} entries for {} layers", f.field("compress_ratios"), all_ratios.size(), c.num_layers);

  const auto hash = f.opt_int({"num_hash_layers", "n_hash_layers"}, 0, c.num_layers);
  const auto mlp_types = f.opt_string_list({"mlp_layer_types"});
  if (!hash && !mlp_types) f.fail("missing required field 'num_hash_layers' / 'n_hash_layers' / 'mlp_layer_types'");
  if (mlp_types) {
    if (static_cast<int>(mlp_types->size()) != c.num_layers)
      f.fail("'{}' has {} entries for {} layers", f.field("mlp_layer_types"), mlp_types->size(), c.num_layers);
    int count = 0;
    for (std::size_t i = 0; i < mlp_types->size(); ++i) {
      const auto& t = (*mlp_types)[i];
      if (t != "hash_moe" && t != "moe") f.fail("'{}[{}]' = '{}' is not hash_moe or moe", f.field("mlp_layer_types"), i, t);
      if (t == "hash_moe" && static_cast<int>(i) != count)
        f.fail("'{}[{}]' = 'hash_moe' after a learned-routing layer: hash-routed layers must come first",
               f.field("mlp_layer_types"), i);
      count += t == "hash_moe";
    }
    if (hash && *hash != count)
      f.fail("'{}' = {} contradicts '{}' ({} hash_moe layers)", f.field("num_hash_layers"), *hash, f.field("mlp_layer_types"), count);
    c.num_hash_layers = count;
  } else {
    c.num_hash_layers = to_int(*hash);
  }
}

// V4.1: compress_ratios plus the CSA2 source lists; layer_types (HF) must agree with the KV sources.
void parse_schedule_v41(ModelConfig& c, const ConfigFields& f, std::vector<std::int64_t>& all_ratios) {
  all_ratios = f.req_int_list({"compress_ratios"}, 0, 2);
  if (static_cast<int>(all_ratios.size()) < c.num_layers)
    f.fail("'{}' has {} entries for {} layers", f.field("compress_ratios"), all_ratios.size(), c.num_layers);
  const auto to_ints = [](const std::vector<std::int64_t>& v) { return std::vector<int>(v.begin(), v.end()); };
  c.kv_source_layer_ids = to_ints(f.req_int_list({"kv_source_layer_ids", "kv_source_layers"}, 0, c.num_layers - 1));
  c.index_source_layer_ids = to_ints(f.req_int_list({"index_source_layer_ids", "index_source_layers"}, 0, c.num_layers - 1));
  c.candidate_source_layer_id = to_int(f.req_int({"candidate_source_layer_id", "candidate_source_layer"}, -1, c.num_layers - 1));
  if (c.candidate_source_layer_id >= 0) {
    c.candidate_topk_blocks = to_int(f.req_int({"candidate_topk_blocks"}, 1, kMaxDim));
    c.candidate_block_size = to_int(f.req_int({"candidate_block_size"}, 1, kMaxDim));
  }
  if (const auto hash = f.opt_int({"num_hash_layers", "n_hash_layers"}, 0, 4096); hash && *hash != 0)
    f.fail("'{}' = {}: DeepSeek-V4.1 has no hash-routed layers", f.field("num_hash_layers"), *hash);
  if (const auto mlp_types = f.opt_string_list({"mlp_layer_types"})) {
    for (std::size_t i = 0; i < mlp_types->size(); ++i)
      if ((*mlp_types)[i] != "moe") f.fail("'{}[{}]' = '{}': DeepSeek-V4.1 layers are all moe", f.field("mlp_layer_types"), i, (*mlp_types)[i]);
  }
  if (const auto types = f.opt_string_list({"layer_types"})) {
    if (static_cast<int>(types->size()) != c.num_layers)
      f.fail("'{}' has {} entries for {} layers", f.field("layer_types"), types->size(), c.num_layers);
    for (int i = 0; i < c.num_layers; ++i) {
      const bool source = std::count(c.kv_source_layer_ids.begin(), c.kv_source_layer_ids.end(), i) > 0;
      const std::string& t = (*types)[static_cast<std::size_t>(i)];
      if (t != "sliding_attention" && t != "shared_compressed_attention")
        f.fail("'{}[{}]' = '{}' is not a DeepSeek-V4.1 layer type", f.field("layer_types"), i, t);
      if ((t == "shared_compressed_attention") != source)
        f.fail("'{}[{}]' = '{}' contradicts 'kv_source_layer_ids' (layer {} {} a KV source)", f.field("layer_types"), i, t, i,
               source ? "is" : "is not");
    }
  }
}

// HF configs (transformers >= 5) write the torch dtype of the weights under "dtype": an
// unquantised checkpoint, unlike DeepSeek's inference "dtype" (fp8 | bf16).
bool is_torch_dtype_name(const std::string& name) {
  return name == "bfloat16" || name == "float16" || name == "float32";
}

void parse_quantization(ModelConfig& c, const ConfigFields& top, const ConfigFields& f) {
  QuantizationConfig& q = c.quant;
  const bool has_qc = top.has({"quantization_config"}) || f.has({"quantization_config"});
  const auto inference_dtype = f.opt_string({"dtype"});
  if (has_qc) {
    const ConfigFields& where = top.has({"quantization_config"}) ? top : f;
    const auto method = where.req_string({"quantization_config.quant_method"});
    if (method != "fp8") where.fail("quantization_config.quant_method '{}' is not supported (expected fp8)", method);
    if (const auto fmt_name = where.opt_string({"quantization_config.fmt"}); fmt_name && *fmt_name != "e4m3")
      where.fail("quantization_config.fmt '{}' is not supported (expected e4m3)", *fmt_name);
    if (const auto scheme = where.opt_string({"quantization_config.activation_scheme"}); scheme && *scheme != "dynamic")
      where.fail("quantization_config.activation_scheme '{}' is not supported (expected dynamic)", *scheme);
    const auto block = where.req_int_list({"quantization_config.weight_block_size"}, 1, 1 << 16);
    if (block.size() != 2) where.fail("quantization_config.weight_block_size must have two entries, got {}", block.size());
    q.fp8 = true;
    q.block_rows = to_int(block[0]);
    q.block_cols = to_int(block[1]);
    q.scale_fmt = where.opt_string({"quantization_config.scale_fmt"}).value_or("");
    if (inference_dtype && *inference_dtype != "fp8")
      f.fail("'dtype' = '{}' contradicts quantization_config (fp8)", *inference_dtype);
  } else if (inference_dtype && !is_torch_dtype_name(*inference_dtype)) {
    if (*inference_dtype != "fp8" && *inference_dtype != "bf16")
      f.fail("'{}' = '{}' is not supported (fp8 or bf16)", f.field("dtype"), *inference_dtype);
    q.fp8 = *inference_dtype == "fp8";
    // The block size is a constant of the reference code, not a config field (MODEL_SPEC A3.1).
    const int block = c.arch == ModelArch::kDeepseekV4 ? 128 : 32;
    q.block_rows = q.fp8 ? block : 0;
    q.block_cols = q.fp8 ? block : 0;
  }
  if (const auto fmt_name = f.opt_string({"scale_fmt"})) {
    if (!q.scale_fmt.empty() && q.scale_fmt != *fmt_name)
      f.fail("'{}' = '{}' contradicts quantization_config.scale_fmt '{}'", f.field("scale_fmt"), *fmt_name, q.scale_fmt);
    if (q.fp8) q.scale_fmt = *fmt_name;
  }
  std::optional<std::string> expert = top.opt_string({"quantization_config.expert_dtype"});
  if (const auto text_expert = f.opt_string({"expert_dtype"})) {
    if (expert && *expert != *text_expert)
      f.fail("'{}' = '{}' contradicts quantization_config.expert_dtype '{}'", f.field("expert_dtype"), *text_expert, *expert);
    expert = text_expert;
  }
  if (!expert) {
    q.expert_format = q.fp8 ? ExpertFormat::kUnspecified : ExpertFormat::kBf16;
  } else if (*expert == "fp4") {
    q.expert_format = ExpertFormat::kFp4;
  } else if (*expert == "fp8") {
    q.expert_format = ExpertFormat::kFp8;
  } else if (*expert == "bf16" || *expert == "bfloat16") {
    q.expert_format = ExpertFormat::kBf16;
  } else {
    f.fail("expert_dtype '{}' is not supported (fp4, fp8 or bf16)", *expert);
  }
}

}  // namespace

ModelConfig parse_model_config(std::string_view json_text, std::string_view source) {
  const std::string label(source);
  const json root = parse_json(json_text, label);
  if (!root.is_object()) throw_error("{}: expected a JSON object, got {}", label, root.type_name());
  const ConfigFields top(root, label);
  const bool nested = root.contains("text_config");
  if (nested && !root.at("text_config").is_object()) top.fail("'text_config' must be an object");
  const json& text = nested ? root.at("text_config") : root;

  ModelConfig c;
  c.arch = detect_arch(top, text);
  const ConfigFields f(text, label, nested ? "text_config." : "");
  parse_geometry(c, f);
  parse_rope_head_dim(c, f);
  parse_rope(c, f);
  const auto position = f.opt_int({"max_position_embeddings"}, 1, kMaxPosition);
  if (!position && !c.rope.yarn) f.fail("missing required field 'max_position_embeddings'");
  c.max_position_embeddings =
      position ? *position
               : static_cast<std::int64_t>(c.rope.yarn->factor * static_cast<double>(c.rope.yarn->original_max_position_embeddings));
  parse_moe(c, f);
  std::vector<std::int64_t> all_ratios;
  if (c.arch == ModelArch::kDeepseekV4) parse_schedule_v4(c, f, all_ratios);
  else parse_schedule_v41(c, f, all_ratios);
  c.compress_ratios.assign(all_ratios.begin(), all_ratios.begin() + c.num_layers);
  parse_quantization(c, top, f);
  detail::parse_engram_and_vision(c, top, f);
  detail::parse_draft(c, f, std::vector<int>(all_ratios.begin() + c.num_layers, all_ratios.end()));
  detail::derive_schedule(c, f);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  return parse_model_config(read_text_file(path, 16u << 20), path.string());
}

}  // namespace deepinfer::io
