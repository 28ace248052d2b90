// deepinfer::LLM: the model executor (model/executor.h: CPU or GPU, memory plan), an optional
// tokenizer and the engine loop behind one generate() call that returns outputs in input order.
#include "deepinfer/llm.h"

#include <filesystem>
#include <unordered_map>

#include "common/error.h"
#include "engine/engine.h"
#include "model/open_engine.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::string finish_name(engine::FinishReason r) { return std::string(engine::to_string(r)); }

}  // namespace

struct LLM::Impl {
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::unique_ptr<engine::Engine> engine;
  std::string mode;
  std::uint64_t next_id = 0;

  // Request id -> index of its prompt, for the requests of one generate() call still running.
  using Index = std::unordered_map<std::string, std::size_t>;
  void add_request(const Prompt& prompt, const SamplingParams& p, std::size_t i, RequestResult& r, Index& index);
  void run_until_done(std::vector<RequestResult>& results, Index& index, const ProgressCallback& progress);
  void abort_all(Index& index) noexcept;
};

LLM::LLM(const std::string& model_dir, LLMOptions options) : impl_(std::make_unique<Impl>()) {
  OpenedEngine engine = open_engine(fs::path(model_dir), options);
  impl_->mode = engine.numeric_mode;
  impl_->tok = std::move(engine.tokenizer);
  impl_->engine = std::move(engine.engine);
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
  // Ids of the model's padded vocabulary (past the tokenizer's) have no text; others are errors.
  std::vector<std::int32_t> known;
  known.reserve(ids.size());
  for (std::int32_t id : ids) {
    DI_CHECK(id >= 0 && id < vocab_size(), "decode: token id {} is outside the model's vocabulary [0, {})", id,
             vocab_size());
    if (impl_->tok->is_valid_id(id)) known.push_back(id);
  }
  return impl_->tok->decode(known, true);
}

std::vector<RequestResult> LLM::generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                                         const ProgressCallback& progress, bool throw_on_rejected) {
  DI_CHECK(params.size() == 1 || params.size() == prompts.size(),
           "generate: {} sampling params for {} prompts (give one, or one per prompt)", params.size(), prompts.size());
  std::vector<RequestResult> results(prompts.size());
  Impl::Index index;
  try {
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      impl_->add_request(prompts[i], params.size() == 1 ? params[0] : params[i], i, results[i], index);
      if (throw_on_rejected && results[i].error) throw_error("{}", *results[i].error);
    }
    impl_->run_until_done(results, index, progress);
  } catch (...) {
    // Leave the engine empty for the next call: whatever this call queued is aborted and drained.
    impl_->abort_all(index);
    throw;
  }
  return results;
}

void LLM::Impl::add_request(const Prompt& prompt, const SamplingParams& p, std::size_t i, RequestResult& r,
                            Index& index) {
  try {
    r.prompt = prompt.text;
    if (prompt.text) DI_CHECK(tok, "a text prompt needs a tokenizer, and this model directory has no tokenizer.json");
    r.prompt_token_ids = prompt.text ? tok->encode(*prompt.text, true) : prompt.token_ids;
    const std::string id = "llm-" + std::to_string(next_id++);
    engine->add_request(id, r.prompt_token_ids, p);
    index[id] = i;
    r.outputs.resize(static_cast<std::size_t>(p.n));
    for (std::size_t k = 0; k < r.outputs.size(); ++k) {
      r.outputs[k].index = static_cast<std::int32_t>(k);
      if (tok) r.outputs[k].text = std::string();
    }
  } catch (const Error& e) {
    r.error = fmt::format("prompt {}: {}", i, e.what());
    r.outputs.clear();
  }
}

void LLM::Impl::run_until_done(std::vector<RequestResult>& results, Index& index, const ProgressCallback& progress) {
  const std::size_t total = results.size();
  std::size_t finished = total - index.size();
  if (progress) progress(finished, total);
  while (!index.empty()) {
    for (engine::RequestOutput& out : engine->step()) {
      const auto it = index.find(out.request_id);
      if (it == index.end()) continue;
      RequestResult& r = results[it->second];
      for (engine::CompletionOutput& c : out.completions) {
        CompletionResult& cr = r.outputs.at(static_cast<std::size_t>(c.index));
        cr.token_ids.insert(cr.token_ids.end(), c.token_ids.begin(), c.token_ids.end());
        if (cr.text) *cr.text += c.text;
        for (engine::SampleResult& lp : c.logprobs) cr.logprobs.push_back(std::move(lp));
        if (c.finish_reason != engine::FinishReason::kNone) cr.finish_reason = finish_name(c.finish_reason);
        if (c.stop_string) cr.stop_reason = *c.stop_string;
      }
      if (out.finished) {
        index.erase(it);
        ++finished;
      }
    }
    if (progress) progress(finished, total);
  }
}

void LLM::Impl::abort_all(Index& index) noexcept {
  try {
    for (const auto& [id, i] : index) engine->abort(id);
    // Aborted requests are reported (and forgotten) by the next step, which runs no model work
    // for them.
    while (!index.empty()) {
      for (const engine::RequestOutput& out : engine->step())
        if (out.finished) index.erase(out.request_id);
    }
  } catch (...) {
    index.clear();  // the engine itself failed; nothing more can be done for these requests
  }
}

}  // namespace deepinfer
