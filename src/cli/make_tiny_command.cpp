// `deepinfer make-tiny`: writes a small random DeepSeek-V4 / V4.1 checkpoint in the official
// on-disk format, optionally with a tokenizer copied in and the vocabulary sized to it.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <system_error>

#include "cli/command.h"
#include "common/error.h"
#include "io/file_util.h"
#include "io/json_util.h"
#include "io/tiny_checkpoint.h"

namespace deepinfer::cli {
namespace {

namespace fs = std::filesystem;

struct MakeTinyArgs {
  std::string output;
  std::string tokenizer;
  std::uint64_t seed = 0;
  std::string dtype = "bf16";
  std::string config;
  std::string arch = "v4";
  std::string draft;
};

// Token count of a tokenizer.json: one past the largest id in model.vocab and added_tokens.
std::int64_t tokenizer_tokens(const fs::path& path) {
  const nlohmann::json tok = io::parse_json(io::read_text_file(path, 256u << 20), path.string());
  std::int64_t max_id = -1;
  const auto visit = [&](const nlohmann::json& id) {
    if (!id.is_number_integer()) throw_error("{}: token id {} is not an integer", path.string(), id.dump());
    max_id = std::max(max_id, id.get<std::int64_t>());
  };
  if (!tok.is_object() || !tok.contains("model") || !tok.at("model").is_object() || !tok.at("model").contains("vocab"))
    throw_error("{}: no model.vocab (expected a Hugging Face tokenizer.json)", path.string());
  const auto& vocab = tok.at("model").at("vocab");
  if (vocab.is_object()) {
    for (const auto& [token, id] : vocab.items()) visit(id);
  } else if (vocab.is_array()) {  // Unigram vocabularies: [[piece, score], ...] indexed by position
    max_id = std::max<std::int64_t>(max_id, static_cast<std::int64_t>(vocab.size()) - 1);
  } else {
    throw_error("{}: model.vocab must be an object or a list", path.string());
  }
  if (tok.contains("added_tokens") && tok.at("added_tokens").is_array())
    for (const auto& added : tok.at("added_tokens"))
      if (added.is_object() && added.contains("id")) visit(added.at("id"));
  if (max_id < 0) throw_error("{}: the tokenizer has no tokens", path.string());
  return max_id + 1;
}

// Copies one file; the copy is writable by its owner even when the source is read-only.
void copy_into(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::equivalent(from, to, ec)) return;  // --tokenizer is the output directory itself
  fs::remove(to, ec);
  fs::copy_file(from, to, ec);
  if (ec) throw_error("{}: cannot copy to {}: {}", from.string(), to.string(), ec.message());
  fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add, ec);
}

// Copies tokenizer.json (and tokenizer_config.json when present) from a file or a directory.
std::int64_t copy_tokenizer(const fs::path& from, const fs::path& output) {
  std::error_code ec;
  const fs::path json = fs::is_directory(from, ec) ? from / "tokenizer.json" : from;
  if (!fs::is_regular_file(json, ec)) throw_error("--tokenizer {}: no tokenizer.json", from.string());
  const std::int64_t tokens = tokenizer_tokens(json);
  copy_into(json, output / "tokenizer.json");
  const fs::path config = json.parent_path() / "tokenizer_config.json";
  if (fs::is_regular_file(config, ec)) copy_into(config, output / "tokenizer_config.json");
  return tokens;
}

io::DraftKind parse_draft(const std::string& name) {
  if (name == "none") return io::DraftKind::kNone;
  if (name == "mtp") return io::DraftKind::kMtp;
  if (name == "dspark") return io::DraftKind::kDSpark;
  throw_error("--draft {}: expected none, mtp or dspark", name);
}

int run_make_tiny(const MakeTinyArgs& args) {
  const fs::path output(args.output);
  std::error_code ec;
  if (fs::exists(output, ec) && !fs::is_directory(output, ec)) throw_error("--output {}: exists and is not a directory", args.output);
  fs::create_directories(output, ec);
  if (ec) throw_error("--output {}: cannot create: {}", args.output, ec.message());
  std::optional<std::int64_t> tokens;
  if (!args.tokenizer.empty()) tokens = copy_tokenizer(args.tokenizer, output);

  io::ModelConfig config;
  if (!args.config.empty()) {
    config = io::load_model_config(args.config);
    if (tokens && config.vocab_size < *tokens)
      throw_error("{}: vocab_size {} is smaller than the tokenizer's {} tokens", args.config, config.vocab_size, *tokens);
  } else {
    io::TinyModelOptions options;
    if (args.arch == "v4") options.arch = io::ModelArch::kDeepseekV4;
    else if (args.arch == "v41") options.arch = io::ModelArch::kDeepseekV41;
    else throw_error("--arch {}: expected v4 or v41", args.arch);
    if (args.dtype != "bf16" && args.dtype != "fp8") throw_error("--dtype {}: expected bf16 or fp8", args.dtype);
    options.fp8 = args.dtype == "fp8";
    if (!args.draft.empty()) options.draft = parse_draft(args.draft);
    if (tokens) options.vocab_size = io::padded_vocab_size(*tokens);
    config = io::tiny_model_config(options);
  }
  const io::TinyCheckpointStats stats = io::write_random_checkpoint(config, output, args.seed);
  fmt::print("wrote a tiny {} checkpoint to {}: {} layers{}, vocab {}{}, {} tensors, {:.1f} MB in {} shards (seed {}, {})\n",
             io::model_arch_name(config.arch), args.output, config.num_layers,
             config.draft.num_stages > 0
                 ? fmt::format(" + {} {} stage{}", config.draft.num_stages, io::draft_kind_name(config.draft.kind),
                               config.draft.num_stages > 1 ? "s" : "")
                 : std::string(),
             config.vocab_size, tokens ? fmt::format(" (tokenizer: {} tokens)", *tokens) : std::string(), stats.tensors,
             static_cast<double>(stats.bytes) / 1e6, stats.shards, args.seed,
             config.quant.fp8 ? "fp8 + fp4 experts" : "bf16");
  return 0;
}

}  // namespace

void register_make_tiny(CLI::App& app) {
  auto args = std::make_shared<MakeTinyArgs>();
  auto* sub = app.add_subcommand("make-tiny", "Write a small random DeepSeek-V4 checkpoint in the official on-disk format");
  sub->add_option("--output,-o", args->output, "Directory to write config.json and the safetensors to")->required();
  sub->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json or a directory holding it: copied in, and the vocabulary sized to it");
  sub->add_option("--seed", args->seed, "Random seed (the same seed writes the same bytes)");
  auto* dtype = sub->add_option("--dtype", args->dtype, "bf16, or fp8 (FP8 block weights and FP4 experts, as released)");
  auto* arch = sub->add_option("--arch", args->arch, "Built-in geometry: v4 (DeepSeek-V4-Flash) or v41 (DeepSeek-V4.1-Flash)");
  auto* draft = sub->add_option("--draft", args->draft, "Speculative stages: dspark (default), mtp (V4 only) or none");
  sub->add_option("--config", args->config, "A config.json giving the whole geometry and format instead (excludes "
                                            "--arch, --dtype and --draft)")
      ->excludes(dtype)
      ->excludes(arch)
      ->excludes(draft);
  set_handler(sub, [args] { return run_make_tiny(*args); });
}

}  // namespace deepinfer::cli
