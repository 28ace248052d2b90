// `deepinfer inspect MODEL_DIR`: what a checkpoint is (architecture, layer roles, parameters and
// bytes per component, dtypes, quantisation) and whether it holds every tensor the model needs.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <set>

#include "cli/command.h"
#include "common/error.h"
#include "io/checkpoint.h"
#include "io/file_util.h"
#include "model/weight_manifest.h"

namespace deepinfer::cli {
namespace {

using io::ModelConfig;
using model::Component;

struct ComponentTotals {
  std::int64_t tensors = 0;
  std::int64_t parameters = 0;
  std::int64_t bytes = 0;
  std::set<std::string> forms;  // "bf16", "fp8_e4m3+scale", ...
};

std::array<ComponentTotals, model::kNumComponents> totals_by_component(const std::vector<model::ManifestEntry>& manifest,
                                                                       const model::ManifestReport& report) {
  std::array<ComponentTotals, model::kNumComponents> out;
  for (std::size_t i = 0; i < manifest.size(); ++i) {
    ComponentTotals& t = out[static_cast<std::size_t>(manifest[i].component)];
    const model::StoredWeight& stored = report.stored[i];
    t.tensors += 1;
    t.parameters += manifest[i].numel();
    t.bytes += stored.bytes;
    if (stored.bytes > 0) t.forms.insert(std::string(dtype_name(stored.dtype)) + (stored.has_scale ? "+scale" : ""));
  }
  return out;
}

std::string layer_extras(const io::LayerSpec& l) {
  std::vector<std::string> extras;
  if (l.has_indexer) extras.push_back("indexer");
  if (l.owns_index_keys && l.attention == io::AttentionKind::kSharedCompressed) extras.push_back("index keys");
  if (l.candidate_source) extras.push_back("candidate source");
  if (l.engram) extras.push_back("engram");
  return fmt::format("{}", fmt::join(extras, ", "));
}

std::string layer_ref(int layer) { return layer < 0 ? "-" : std::to_string(layer); }

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string human_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
  return fmt::format("{} B", bytes);
}

std::string quantisation_summary(const io::QuantizationConfig& q) {
  const std::string experts = fmt::format("routed experts {}", io::expert_format_name(q.expert_format));
  if (!q.fp8) return "none (bf16 weights); " + experts;
  return fmt::format("fp8 e4m3 weights in {}x{} blocks, {} scales; {}", q.block_rows, q.block_cols,
                     q.scale_fmt.empty() ? "float" : q.scale_fmt, experts);
}

void print_config(const io::Checkpoint& ckpt, const std::string& spelling) {
  const ModelConfig& c = ckpt.config();
  fmt::print("model:        {}\n", ckpt.directory().string());
  fmt::print("architecture: {} (config spelling: {}; tensor names: {})\n", io::model_arch_name(c.arch), spelling,
             io::name_layout_name(ckpt.layout()));
  fmt::print("geometry:     vocab {}, hidden {}, {} layers, {} heads x {} (RoPE on {}), q_lora {}, o_groups {} x {}, window {}\n",
             c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.head_dim, c.rope_head_dim, c.q_lora_rank, c.o_groups,
             c.o_lora_rank, c.sliding_window);
  fmt::print("moe:          {} routed experts (top {}, {}, x{}) + {} shared, width {}; {} hash-routed layers\n",
             c.n_routed_experts, c.num_experts_per_tok, c.scoring_func, c.routed_scaling_factor, c.n_shared_experts,
             c.moe_intermediate_size, c.num_hash_layers);
  fmt::print("indexer:      {} heads x {}, top-{}\n", c.index_n_heads, c.index_head_dim, c.index_topk);
  if (c.rope.yarn)
    fmt::print("rope:         theta {} on window-only layers; {} with YaRN x{} from {} on compressed layers\n", c.rope.theta,
               c.rope.compress_theta, c.rope.yarn->factor, c.rope.yarn->original_max_position_embeddings);
  else
    fmt::print("rope:         theta {} / {} (no YaRN)\n", c.rope.theta, c.rope.compress_theta);
  fmt::print("quantisation: {}\n", quantisation_summary(c.quant));
  const io::DraftConfig& d = c.draft;
  if (d.kind == io::DraftKind::kNone) fmt::print("draft:        none\n");
  else if (d.kind == io::DraftKind::kMtp) fmt::print("draft:        MTP, {} stage(s)\n", d.num_stages);
  else
    fmt::print("draft:        DSpark, {} stages, block {}, taps [{}], Markov rank {}, {} experts (top {})\n", d.num_stages,
               d.block_size, fmt::join(d.target_layer_ids, ", "), d.markov_rank, d.n_routed_experts, d.num_experts_per_tok);
  if (c.vision.present)
    fmt::print("vision:       {} layers x {} (in the config; the engine is text-only)\n", c.vision.num_layers, c.vision.hidden_size);
  if (!c.engram.layer_ids.empty())
    fmt::print("engram:       layers [{}], {} heads x {} dims, n-grams up to {}\n", fmt::join(c.engram.layer_ids, ", "),
               c.engram.n_heads, c.engram.head_dim, c.engram.max_ngram_size);
}

void print_layers(const ModelConfig& c) {
  fmt::print("\n{:>5}  {:>5}  {:<4}  {:<7}  {:>6}  {:>7}  {:<7}  {}\n", "layer", "ratio", "attn", "role", "kv-src", "idx-src",
             "routing", "extras");
  const auto row = [](const io::LayerSpec& l, std::string_view routing) {
    fmt::print("{:>5}  {:>5}  {:<4}  {:<7}  {:>6}  {:>7}  {:<7}  {}\n", l.index, l.compress_ratio,
               io::attention_kind_name(l.attention), io::csa2_role_name(l.role), layer_ref(l.kv_source_layer),
               layer_ref(l.index_source_layer), routing, layer_extras(l));
  };
  for (const auto& l : c.layers) row(l, l.hash_routed ? "hash" : "learned");
  for (const auto& l : c.draft.stages) row(l, io::draft_kind_name(c.draft.kind));
}

void print_components(const std::array<ComponentTotals, model::kNumComponents>& totals) {
  fmt::print("\n{:<15}  {:>8}  {:>16}  {:>11}  {}\n", "component", "tensors", "parameters", "bytes", "stored as");
  ComponentTotals all;
  for (int i = 0; i < model::kNumComponents; ++i) {
    const ComponentTotals& t = totals[static_cast<std::size_t>(i)];
    if (t.tensors == 0) continue;
    fmt::print("{:<15}  {:>8}  {:>16}  {:>11}  {}\n", model::component_name(static_cast<Component>(i)), t.tensors,
               with_commas(t.parameters), human_bytes(t.bytes), fmt::join(t.forms, ", "));
    all.tensors += t.tensors;
    all.parameters += t.parameters;
    all.bytes += t.bytes;
  }
  fmt::print("{:<15}  {:>8}  {:>16}  {:>11}\n", "total", all.tensors, with_commas(all.parameters), human_bytes(all.bytes));
}

nlohmann::json layer_json(const io::LayerSpec& l) {
  return {{"index", l.index},
          {"compress_ratio", l.compress_ratio},
          {"attention", io::attention_kind_name(l.attention)},
          {"role", io::csa2_role_name(l.role)},
          {"kv_source_layer", l.kv_source_layer},
          {"index_source_layer", l.index_source_layer},
          {"hash_routed", l.hash_routed},
          {"has_indexer", l.has_indexer},
          {"candidate_source", l.candidate_source},
          {"engram", l.engram},
          {"rope_theta", l.rope_theta},
          {"yarn", l.yarn}};
}

nlohmann::json report_json(const io::Checkpoint& ckpt, const std::string& spelling,
                           const std::array<ComponentTotals, model::kNumComponents>& totals,
                           const model::ManifestReport& report) {
  const ModelConfig& c = ckpt.config();
  nlohmann::json out = {{"model", ckpt.directory().string()},
                        {"architecture", io::model_arch_name(c.arch)},
                        {"config_spelling", spelling},
                        {"tensor_names", io::name_layout_name(ckpt.layout())},
                        {"config", nlohmann::json::parse(io::model_config_to_json(c))},
                        {"layers", nlohmann::json::array()},
                        {"draft_stages", nlohmann::json::array()},
                        {"components", nlohmann::json::object()},
                        {"issues", nlohmann::json::array()},
                        {"optional_missing", report.optional_missing.size()},
                        {"unexpected", report.unexpected},
                        {"ok", report.ok()}};
  for (const auto& l : c.layers) out["layers"].push_back(layer_json(l));
  for (const auto& l : c.draft.stages) out["draft_stages"].push_back(layer_json(l));
  for (int i = 0; i < model::kNumComponents; ++i) {
    const ComponentTotals& t = totals[static_cast<std::size_t>(i)];
    if (t.tensors == 0) continue;
    out["components"][std::string(model::component_name(static_cast<Component>(i)))] = {
        {"tensors", t.tensors}, {"parameters", t.parameters}, {"bytes", t.bytes}, {"stored_as", t.forms}};
  }
  for (const auto& issue : report.issues) out["issues"].push_back({{"tensor", issue.tensor}, {"problem", issue.message}});
  return out;
}

int run_inspect(const std::string& directory, bool as_json) {
  const io::Checkpoint ckpt = io::Checkpoint::open(directory);
  const std::string spelling = io::detect_config_spelling(io::read_text_file(ckpt.directory() / "config.json", 16u << 20));
  const auto manifest = model::build_weight_manifest(ckpt.config());
  const model::ManifestReport report = model::validate_checkpoint(manifest, ckpt);
  const auto totals = totals_by_component(manifest, report);
  if (as_json) {
    fmt::print("{}\n", report_json(ckpt, spelling, totals, report).dump(2));
  } else {
    print_config(ckpt, spelling);
    print_layers(ckpt.config());
    print_components(totals);
    fmt::print("\ncheckpoint:   {} files, {} tensors; {} of {} manifest tensors present and well-formed\n",
               ckpt.files().files().size(), ckpt.names().size(), manifest.size() - report.issues.size() - report.optional_missing.size(),
               manifest.size());
    if (!report.optional_missing.empty())
      fmt::print("optional:     {} optional tensors missing (first: {})\n", report.optional_missing.size(),
                 report.optional_missing.front().tensor);
    if (!report.unexpected.empty())
      fmt::print("unused:       {} stored tensors the engine does not use (first: {})\n", report.unexpected.size(),
                 report.unexpected.front());
    for (const auto& issue : report.issues) fmt::print("problem:      {}: {}\n", issue.tensor, issue.message);
  }
  if (!report.ok())
    throw_error("{}: {} tensors the model needs are missing or malformed (first: {}: {})", directory, report.issues.size(),
                report.issues.front().tensor, report.issues.front().message);
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto directory = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("inspect", "Describe a checkpoint and check that it holds every tensor the model needs");
  sub->add_option("model_dir", *directory, "Model directory (config.json + safetensors)")->required();
  sub->add_flag("--json", *as_json, "Print the report as JSON");
  set_handler(sub, [directory, as_json] { return run_inspect(*directory, *as_json); });
}

}  // namespace deepinfer::cli
