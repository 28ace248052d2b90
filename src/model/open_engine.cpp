// open_engine: the engine setup deepinfer::LLM and `deepinfer serve` share.
#include "model/open_engine.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "grammar/engine_constraint.h"
#include "model/executor.h"
#include "tokenizer/incremental_detokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

// The engine's Detokenizer over the tokenizer's streaming decoder. A model's vocabulary is padded
// past the tokenizer's (129,280 vs 128,815 for DeepSeek); such ids have no text. The engine never
// samples them, but a prompt may carry them back (a client echoing ids), so they stay harmless here.
class TokenizerDetokenizer final : public engine::Detokenizer {
 public:
  explicit TokenizerDetokenizer(std::shared_ptr<const tokenizer::Tokenizer> tok) : tok_(std::move(tok)) {}
  std::unique_ptr<engine::DetokenizerStream> open(std::span<const std::int32_t>, bool skip) const override {
    struct Stream final : engine::DetokenizerStream {
      Stream(const tokenizer::Tokenizer& t, bool skip_special) : tok(t), detok(t, skip_special) {}
      std::string push(std::int32_t token) override { return tok.is_valid_id(token) ? detok.push(token) : ""; }
      std::string finish() override { return detok.finish(); }
      const tokenizer::Tokenizer& tok;
      tokenizer::IncrementalDetokenizer detok;
    };
    return std::make_unique<Stream>(*tok_, skip);
  }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
};

std::shared_ptr<const tokenizer::Tokenizer> load_tokenizer(const fs::path& model_dir, const LLMOptions& options,
                                                           bool required) {
  const fs::path path = options.tokenizer.empty() ? model_dir : fs::path(options.tokenizer);
  const bool found = fs::is_regular_file(path) || fs::exists(path / "tokenizer.json");
  if (!found) {
    DI_CHECK(options.tokenizer.empty(), "tokenizer {}: no tokenizer.json there", options.tokenizer);
    DI_CHECK(!required, "{}: no tokenizer.json (give --tokenizer)", model_dir.string());
    return nullptr;
  }
  return std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::load(path));
}

}  // namespace

std::int32_t resolve_max_model_len(const LLMOptions& options, const io::ModelConfig& model) {
  if (options.max_model_len > 0) return options.max_model_len;
  const std::int64_t max_pos = model.max_position_embeddings > 0 ? model.max_position_embeddings : 8192;
  return static_cast<std::int32_t>(std::min<std::int64_t>(max_pos, 8192));
}

engine::EngineConfig make_engine_config(const LLMOptions& options, const io::ModelConfig& model,
                                        const engine::ModelRunner& runner) {
  engine::EngineConfig config;
  config.scheduler.max_num_seqs = options.max_num_seqs;
  config.scheduler.max_num_batched_tokens = options.max_num_batched_tokens;
  config.scheduler.max_model_len = resolve_max_model_len(options, model);
  const std::int32_t multiple = runner.cache_spec().page_size_multiple();
  config.cache.page_size = std::max(1, (64 + multiple - 1) / multiple) * multiple;
  // Without an explicit count or budget: room for four sequences of max_model_len (a memory budget
  // sized for real models would make millions of pages for a tiny one).
  const std::int32_t per_seq = (config.scheduler.max_model_len + config.cache.page_size - 1) / config.cache.page_size;
  config.cache.num_pages = options.num_pages > 0 ? options.num_pages : options.cache_memory_bytes > 0 ? 0 : 4 * per_seq;
  config.cache.num_snapshot_slots = std::min(options.max_num_seqs, 16);
  config.cache.memory_bytes = options.cache_memory_bytes;
  config.cache.enable_prefix_caching = options.enable_prefix_caching;
  config.seed = options.seed;
  config.worker_threads = options.worker_threads;
  return config;
}

std::vector<std::int32_t> read_eos_ids(const fs::path& model_dir, const tokenizer::Tokenizer* tok) {
  std::vector<std::int32_t> ids;
  if (std::ifstream in(model_dir / "generation_config.json"); in) {
    const auto j = nlohmann::json::parse(in, nullptr, false);
    const auto e = j.is_object() ? j.value("eos_token_id", nlohmann::json()) : nlohmann::json();
    for (const auto& v : e.is_array() ? e : nlohmann::json::array({e}))
      if (v.is_number_integer()) ids.push_back(v.get<std::int32_t>());
  }
  if (ids.empty() && tok && tok->special_tokens().eos) ids.push_back(*tok->special_tokens().eos);
  return ids;
}

OpenedEngine open_engine(const fs::path& model_dir, std::unique_ptr<engine::ModelRunner> runner,
                         const io::ModelConfig& model, const LLMOptions& options, EngineSetup setup) {
  DI_CHECK(runner != nullptr, "open_engine: no model runner for {}", model_dir.string());
  OpenedEngine out;
  out.tokenizer = load_tokenizer(model_dir, options, setup.require_tokenizer);
  engine::EngineConfig config = make_engine_config(options, model, *runner);
  config.eos_token_ids = read_eos_ids(model_dir, out.tokenizer.get());
  DI_CHECK(!setup.require_eos || !config.eos_token_ids.empty(),
           "{}: neither generation_config.json nor the tokenizer names an EOS token", model_dir.string());
  std::shared_ptr<const engine::Detokenizer> detok;
  if (out.tokenizer) {
    detok = std::make_shared<TokenizerDetokenizer>(out.tokenizer);
    for (std::int32_t id = 0; id < runner->vocab_size(); ++id)
      if (!out.tokenizer->is_valid_id(id)) config.unsampleable_token_ids.push_back(id);
  }
  out.engine = std::make_unique<engine::Engine>(config, std::move(runner), detok);
  if (out.tokenizer && !config.eos_token_ids.empty()) {
    // Structured outputs: grammar constraints over the tokenizer's vocabulary. Each request says
    // where its constraint starts (so_args.start_after: "</think>" for a thinking chat, however
    // many tokens spell it), so no tokenizer needs a single end-of-thinking token.
    out.engine->set_constraint_factory(
        grammar::make_grammar_constraint_factory(*out.tokenizer, out.engine->vocab_size(), config.eos_token_ids));
    out.structured_outputs = true;
  }
  return out;
}

OpenedEngine open_engine(const fs::path& model, const LLMOptions& options, EngineSetup setup) {
  model::ExecutorModel opened = model::open_executor(model, options);
  LLMOptions sized = options;
  if (opened.plan) sized.num_pages = opened.plan->layout.num_pages;
  const io::ModelConfig& config = *opened.config;
  const fs::path dir = fs::is_regular_file(model) ? model.parent_path() : model;
  OpenedEngine out = open_engine(dir, std::move(opened.runner), config, sized, setup);
  out.model_config = &config;
  out.numeric_mode = std::string(model::v4::numeric_mode_name(opened.mode));
  return out;
}

}  // namespace deepinfer
