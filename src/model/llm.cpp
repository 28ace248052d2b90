// deepinfer::LLM: the V4 paged runner, an optional tokenizer and the engine loop behind one
// generate() call that returns outputs in input order.
#include "deepinfer/llm.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/engine.h"
#include "model/deepseek_v4/paged_runner.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

class TokenizerDetokenizer final : public engine::Detokenizer {
 public:
  explicit TokenizerDetokenizer(std::shared_ptr<const tokenizer::Tokenizer> tok) : tok_(std::move(tok)) {}
  std::unique_ptr<engine::DetokenizerStream> open(std::span<const std::int32_t>, bool skip) const override {
    struct Stream final : engine::DetokenizerStream {
      Stream(const tokenizer::Tokenizer& tok, bool skip_special) : detok(tok, skip_special) {}
      std::string push(std::int32_t token) override { return detok.push(token); }
      std::string finish() override { return detok.finish(); }
      tokenizer::IncrementalDetokenizer detok;
    };
    return std::make_unique<Stream>(*tok_, skip);
  }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
};

// EOS ids from generation_config.json (an id or a list), else the tokenizer's eos token.
std::vector<std::int32_t> eos_ids(const fs::path& model_dir, const tokenizer::Tokenizer* tok) {
  std::vector<std::int32_t> ids;
  const fs::path gen = model_dir / "generation_config.json";
  if (fs::exists(gen)) {
    const auto j = nlohmann::json::parse(std::ifstream(gen), nullptr, false);
    if (j.is_object() && j.contains("eos_token_id")) {
      const auto& e = j["eos_token_id"];
      if (e.is_number_integer()) ids.push_back(e.get<std::int32_t>());
      if (e.is_array())
        for (const auto& v : e)
          if (v.is_number_integer()) ids.push_back(v.get<std::int32_t>());
    }
  }
  if (ids.empty() && tok && tok->special_tokens().eos) ids.push_back(*tok->special_tokens().eos);
  return ids;
}

std::string finish_name(engine::FinishReason r) { return std::string(engine::to_string(r)); }

}  // namespace

struct LLM::Impl {
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::unique_ptr<engine::Engine> engine;
  std::string mode;
  std::uint64_t next_id = 0;
};

LLM::LLM(const std::string& model_dir, LLMOptions options) : impl_(std::make_unique<Impl>()) {
  const fs::path dir(model_dir);
  std::optional<model::v4::NumericMode> mode;
  if (options.mode) mode = model::v4::parse_numeric_mode(*options.mode);
  auto opened = model::v4::open_paged_runner(dir, mode, options.device);
  impl_->mode = std::string(model::v4::numeric_mode_name(opened.mode));
  const fs::path tok_path = options.tokenizer.empty() ? dir : fs::path(options.tokenizer);
  const bool has_tok = fs::is_regular_file(tok_path) || fs::exists(tok_path / "tokenizer.json");
  DI_CHECK(has_tok || options.tokenizer.empty(), "tokenizer {}: no tokenizer.json there", options.tokenizer);
  if (has_tok) impl_->tok = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::load(tok_path));

  engine::EngineConfig config;
  config.scheduler.max_num_seqs = options.max_num_seqs;
  config.scheduler.max_num_batched_tokens = options.max_num_batched_tokens;
  const std::int64_t max_pos = opened.config->max_position_embeddings > 0 ? opened.config->max_position_embeddings : 8192;
  config.scheduler.max_model_len = options.max_model_len > 0
                                       ? options.max_model_len
                                       : static_cast<std::int32_t>(std::min<std::int64_t>(max_pos, 8192));
  const std::int32_t multiple = opened.runner->cache_spec().page_size_multiple();
  config.cache.page_size = std::max(1, (64 + multiple - 1) / multiple) * multiple;
  // Without an explicit count: room for four sequences of max_model_len (a memory budget sized
  // for real models would make millions of pages for a tiny one).
  const std::int32_t per_seq = (config.scheduler.max_model_len + config.cache.page_size - 1) / config.cache.page_size;
  config.cache.num_pages = options.num_pages > 0 ? options.num_pages : 4 * per_seq;
  config.cache.num_snapshot_slots = std::min(options.max_num_seqs, 16);
  config.cache.memory_bytes = options.cache_memory_bytes;
  config.cache.enable_prefix_caching = options.enable_prefix_caching;
  config.seed = options.seed;
  config.worker_threads = options.worker_threads;
  config.eos_token_ids = eos_ids(dir, impl_->tok.get());
  std::shared_ptr<const engine::Detokenizer> detok;
  if (impl_->tok) detok = std::make_shared<TokenizerDetokenizer>(impl_->tok);
  impl_->engine = std::make_unique<engine::Engine>(config, std::move(opened.runner), detok);
}

LLM::~LLM() = default;

bool LLM::has_tokenizer() const { return impl_->tok != nullptr; }
std::int32_t LLM::vocab_size() const { return impl_->engine->vocab_size(); }
std::string LLM::numeric_mode() const { return impl_->mode; }

std::vector<std::int32_t> LLM::encode(const std::string& text) const {
  DI_CHECK(impl_->tok, "a text prompt needs a tokenizer, and this model directory has no tokenizer.json");
  return impl_->tok->encode(text, true);
}

std::string LLM::decode(const std::vector<std::int32_t>& ids) const {
  DI_CHECK(impl_->tok, "decoding needs a tokenizer, and this model directory has no tokenizer.json");
  return impl_->tok->decode(ids, true);
}

std::vector<RequestResult> LLM::generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                                         const ProgressCallback& progress) {
  DI_CHECK(params.size() == 1 || params.size() == prompts.size(),
           "generate: {} sampling params for {} prompts (give one, or one per prompt)", params.size(), prompts.size());
  engine::Engine& engine = *impl_->engine;
  std::vector<RequestResult> results(prompts.size());
  std::unordered_map<std::string, std::size_t> index;
  std::size_t pending = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    RequestResult& r = results[i];
    const SamplingParams& p = params.size() == 1 ? params[0] : params[i];
    try {
      r.prompt = prompts[i].text;
      r.prompt_token_ids = prompts[i].text ? encode(*prompts[i].text) : prompts[i].token_ids;
      const std::string id = "llm-" + std::to_string(impl_->next_id++);
      engine.add_request(id, r.prompt_token_ids, p);
      index[id] = i;
      r.outputs.resize(static_cast<std::size_t>(p.n));
      for (std::size_t k = 0; k < r.outputs.size(); ++k) {
        r.outputs[k].index = static_cast<std::int32_t>(k);
        if (impl_->tok) r.outputs[k].text = std::string();
      }
      ++pending;
    } catch (const Error& e) {
      r.error = fmt::format("prompt {}: {}", i, e.what());
      r.outputs.clear();
    }
  }
  std::size_t finished = prompts.size() - pending;
  if (progress) progress(finished, prompts.size());
  while (pending > 0) {
    for (const engine::RequestOutput& out : engine.step()) {
      const auto it = index.find(out.request_id);
      if (it == index.end()) continue;
      RequestResult& r = results[it->second];
      for (const engine::CompletionOutput& c : out.completions) {
        CompletionResult& cr = r.outputs.at(static_cast<std::size_t>(c.index));
        cr.token_ids.insert(cr.token_ids.end(), c.token_ids.begin(), c.token_ids.end());
        if (cr.text) *cr.text += c.text;
        if (c.finish_reason != engine::FinishReason::kNone) cr.finish_reason = finish_name(c.finish_reason);
        if (c.stop_string) cr.stop_reason = *c.stop_string;
      }
      if (out.finished) {
        index.erase(it);
        --pending;
        ++finished;
      }
    }
    if (progress) progress(finished, prompts.size());
  }
  return results;
}

}  // namespace deepinfer
