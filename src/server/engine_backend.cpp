// The engine thread, the request/abort inbox, and the tokenizer and chat-encoding adapters.
#include "server/engine_backend.h"

#include "common/error.h"
#include "common/logging.h"
#include "encoding/chat_encoder.h"
#include "encoding/chat_json.h"
#include "encoding/output_parser.h"
#include "encoding/special_tokens.h"
#include "server/openai_response.h"
#include "tokenizer/incremental_detokenizer.h"

namespace deepinfer::server {
namespace {

class TokenizerCodec : public TextCodec {
 public:
  explicit TokenizerCodec(std::shared_ptr<const tokenizer::Tokenizer> tok) : tok_(std::move(tok)) {}
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    return tok_->encode(text, add_special_tokens);
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    return tok_->decode(ids, skip_special_tokens);
  }
  std::string token_bytes(int32_t id) const override { return std::string(tok_->token_bytes(id)); }
  int32_t vocab_size() const override { return static_cast<int32_t>(tok_->vocab_size()); }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
};

class StreamingDetokenizer : public engine::Detokenizer {
 public:
  explicit StreamingDetokenizer(std::shared_ptr<const tokenizer::Tokenizer> tok) : tok_(std::move(tok)) {}

  std::unique_ptr<engine::DetokenizerStream> open(std::span<const std::int32_t>, bool skip_special_tokens) const override {
    // A model's vocabulary is padded past the tokenizer's (129,280 vs 128,815 for DeepSeek):
    // such ids have no text, and a model that samples one must not take the engine down.
    class Stream : public engine::DetokenizerStream {
     public:
      Stream(const tokenizer::Tokenizer& tok, bool skip) : tok_(tok), detok_(tok, skip) {}
      std::string push(std::int32_t token) override { return tok_.is_valid_id(token) ? detok_.push(token) : ""; }
      std::string finish() override { return detok_.finish(); }

     private:
      const tokenizer::Tokenizer& tok_;
      tokenizer::IncrementalDetokenizer detok_;
    };
    return std::make_unique<Stream>(*tok_, skip_special_tokens);
  }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
};

class EncodingChatParser : public ChatOutputParser {
 public:
  explicit EncodingChatParser(encoding::ParserOptions options) : parser_(std::move(options)) {}
  ChatDelta feed(std::string_view text) override { return convert(parser_.feed(text)); }
  ChatDelta finish() override { return convert(parser_.finish()); }
  bool saw_tool_calls() const override { return !parser_.result().tool_calls.empty(); }

 private:
  static ChatDelta convert(encoding::OutputDelta&& delta) {
    ChatDelta out;
    out.reasoning = std::move(delta.reasoning_content);
    out.content = std::move(delta.content);
    for (auto& call : delta.tool_calls)
      out.tool_calls.push_back({call.index, std::move(call.id), std::move(call.name), std::move(call.arguments)});
    return out;
  }

  encoding::OutputParser parser_;
};

FinishReason from_engine(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kLength: return FinishReason::kLength;
    case engine::FinishReason::kAbort: return FinishReason::kAbort;
    case engine::FinishReason::kError: return FinishReason::kError;
    default: return FinishReason::kStop;
  }
}

GenerationOutput to_output(engine::CompletionOutput& completion, const engine::RequestOutput& request) {
  GenerationOutput out;
  out.index = completion.index;
  out.token_ids = std::move(completion.token_ids);
  out.text = std::move(completion.text);
  for (const auto& sample : completion.logprobs) {
    TokenLogprobs lp{sample.token, sample.logprob, {}};
    for (const auto& top : sample.top) lp.top.push_back({top.token, top.logprob});
    out.logprobs.push_back(std::move(lp));
  }
  out.num_prompt_tokens = request.num_prompt_tokens;
  out.num_cached_prompt_tokens = request.num_cached_tokens;
  out.finished = completion.finish_reason != engine::FinishReason::kNone;
  out.finish_reason = from_engine(completion.finish_reason);
  if (completion.stop_string) out.stop_string = *completion.stop_string;
  out.stop_token_id = completion.stop_token;
  if (out.finish_reason == FinishReason::kError) out.error_message = "the engine failed this sequence";
  return out;
}

// The constraint itself; to_structured_output_args adds where it starts.
engine::StructuredOutputArgs constraint_args(const nlohmann::json& c) {
  auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  if (c.contains("tool_calls")) return {"tool_calls", text(c["tool_calls"])};  // a spec text (key order kept)
  if (c.contains("type")) {  // response_format
    if (c["type"] == "json_object") return {"json_object", ""};
    const auto& spec = c.value("json_schema", nlohmann::json::object());
    if (!spec.contains("schema")) return {"json_object", ""};
    return {"json", text(spec["schema"])};
  }
  if (c.contains("regex")) return {"regex", c["regex"].get<std::string>()};
  if (c.contains("grammar")) return {"ebnf", c["grammar"].get<std::string>()};
  if (c.contains("ebnf")) return {"ebnf", c["ebnf"].get<std::string>()};
  if (c.contains("structured_outputs")) {
    const auto& so = c["structured_outputs"];
    if (so.contains("json")) return {"json", text(so["json"])};
    if (so.contains("regex") && so["regex"].is_string()) return {"regex", so["regex"].get<std::string>()};
    if (so.contains("choice") && so["choice"].is_array()) return {"choice", so["choice"].dump()};
    if (so.contains("grammar") && so["grammar"].is_string()) return {"ebnf", so["grammar"].get<std::string>()};
    if (so.value("json_object", false)) return {"json_object", ""};
  }
  throw_error("structured_outputs: expected one of json, regex, choice, grammar or json_object");
}

}  // namespace

std::shared_ptr<const engine::Detokenizer> make_detokenizer(std::shared_ptr<const tokenizer::Tokenizer> tokenizer) {
  return std::make_shared<StreamingDetokenizer>(std::move(tokenizer));
}

engine::StructuredOutputArgs to_structured_output_args(const nlohmann::json& c) {
  engine::StructuredOutputArgs args = constraint_args(c);
  if (c.contains("start_after")) args.start_after = c["start_after"].get<std::string>();
  // vLLM's structured_outputs.disable_any_whitespace: compact JSON.
  if (c.contains("structured_outputs")) args.disable_any_whitespace = c["structured_outputs"].value("disable_any_whitespace", false);
  return args;
}

engine::SamplingParams to_engine_params(const SamplingOptions& o, int n) {
  engine::SamplingParams p;
  p.n = n;
  p.temperature = o.temperature;
  p.top_p = o.top_p;
  p.top_k = o.top_k;
  p.min_p = o.min_p;
  p.repetition_penalty = o.repetition_penalty;
  p.presence_penalty = o.presence_penalty;
  p.frequency_penalty = o.frequency_penalty;
  p.logit_bias = o.logit_bias;
  p.stop_token_ids = o.stop_token_ids;
  p.stop = o.stop;
  p.include_stop_str_in_output = o.include_stop_str_in_output;
  p.max_tokens = o.max_tokens;
  p.min_tokens = o.min_tokens;
  p.ignore_eos = o.ignore_eos;
  p.skip_special_tokens = o.skip_special_tokens;
  if (o.logprobs >= 0) p.logprobs = o.logprobs;
  p.seq_seed = o.seed;
  if (!o.structured_output.is_null()) p.so_args = to_structured_output_args(o.structured_output);
  return p;
}

EngineBackend::EngineBackend(std::unique_ptr<engine::Engine> engine,
                             std::shared_ptr<const tokenizer::Tokenizer> tokenizer, EngineBackendOptions options)
    : engine_(std::move(engine)),
      tokenizer_(std::move(tokenizer)),
      codec_(std::make_unique<TokenizerCodec>(tokenizer_)),
      options_(std::move(options)) {
  DI_CHECK(engine_ != nullptr && tokenizer_ != nullptr, "server: the engine backend needs an engine and a tokenizer");
  info_.model_path = options_.model_path;
  info_.max_model_len = engine_->config().scheduler.max_model_len;
  info_.supports_structured_output = options_.structured_outputs;
  info_.structured_output_after_thinking = options_.structured_outputs && options_.structured_outputs_after_thinking;
  if (options_.structured_outputs && options_.chat_format != encoding::ChatFormat::kDeepSeekV3) {
    const encoding::DsmlTags& t = encoding::dsml_tags(options_.chat_format);
    info_.tool_call_tags = {{"block_open", t.block_open},   {"block_close", t.block_close},
                            {"invoke_open", t.invoke_open}, {"invoke_close", t.invoke_close},
                            {"param_open", t.param_open},   {"param_close", t.param_close}};
  }
  max_in_flight_ = engine_->config().scheduler.max_num_seqs + std::max(options_.max_queued_requests, 0);
  publish_stats();
  thread_ = std::thread([this] { loop(); });
}

EngineBackend::~EngineBackend() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

EncodedChat EngineBackend::encode_chat(const nlohmann::ordered_json& request) const {
  const auto messages = encoding::messages_from_json(request.at("messages"));
  const auto options = encoding::encode_options_from_request(request, options_.chat_format);
  const auto result = encoding::encode_chat(messages, options);
  return {tokenizer_->encode(result.prompt, false), result.thinking_open};
}

std::unique_ptr<ChatOutputParser> EngineBackend::chat_output_parser(bool thinking, bool tool_calls) const {
  encoding::ParserOptions options;
  options.format = options_.chat_format;
  options.thinking_open = thinking;
  options.tool_calls = tool_calls;
  options.tool_call_id_prefix = make_response_id("call_") + "_";
  return std::make_unique<EncodingChatParser>(std::move(options));
}

void EngineBackend::submit(GenerationRequest request) {
  DI_CHECK(!failed_.load(), "the engine has failed; restart the server");
  // Validated here, on the caller's thread, so a bad request is refused before it is queued.
  to_engine_params(request.sampling, request.n).validate(engine_->vocab_size(), engine_->config().max_logprobs);
  if (in_flight_.fetch_add(request.n) + request.n > max_in_flight_) {
    in_flight_.fetch_sub(request.n);
    throw QueueFullError(fmt::format("{} sequences are running or waiting", max_in_flight_));
  }
  {
    std::lock_guard lock(mutex_);
    inbox_adds_.push_back(std::move(request));
  }
  wake_.notify_one();
}

void EngineBackend::abort(const std::string& request_id) {
  {
    std::lock_guard lock(mutex_);
    inbox_aborts_.push_back(request_id);
  }
  wake_.notify_one();
}

BackendStats EngineBackend::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void EngineBackend::loop() {
  for (;;) {
    std::vector<GenerationRequest> adds;
    std::vector<std::string> aborts;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || engine_busy_ || !inbox_adds_.empty() || !inbox_aborts_.empty(); });
      if (stopping_) break;
      adds.swap(inbox_adds_);
      aborts.swap(inbox_aborts_);
    }
    for (auto& request : adds) add(request);
    for (const auto& id : aborts) abort_now(id);
    if (engine_->has_unfinished() && !failed_.load()) step_once();
    else publish_stats();
    std::lock_guard lock(mutex_);
    engine_busy_ = engine_->has_unfinished() && !failed_.load();
  }
  std::vector<std::string> ids;
  for (const auto& [id, active] : active_) ids.push_back(id);
  for (const auto& id : ids) finish_all(id, FinishReason::kAbort, "");
}

void EngineBackend::add(GenerationRequest& request) {
  const auto n = static_cast<std::size_t>(request.n);
  Active active{std::move(request.on_output), std::vector<bool>(n, false), request.n};
  const std::string id = request.request_id;
  active_.emplace(id, std::move(active));
  try {
    engine_->add_request(id, std::move(request.prompt_token_ids), to_engine_params(request.sampling, request.n));
  } catch (const std::exception& e) {
    finish_all(id, FinishReason::kError, e.what());
  }
}

void EngineBackend::abort_now(const std::string& request_id) {
  if (active_.count(request_id) == 0) return;
  engine_->abort(request_id);  // frees its pages now; the engine's own report is ignored below
  finish_all(request_id, FinishReason::kAbort, "");
}

void EngineBackend::finish_all(const std::string& request_id, FinishReason reason, const std::string& message) {
  const auto it = active_.find(request_id);
  if (it == active_.end()) return;
  Active& active = it->second;
  for (std::size_t i = 0; i < active.finished.size(); ++i) {
    if (active.finished[i]) continue;
    GenerationOutput out;
    out.index = static_cast<int>(i);
    out.finished = true;
    out.finish_reason = reason;
    out.error_message = message;
    in_flight_.fetch_sub(1);
    active.on_output(std::move(out));
  }
  active_.erase(it);
}

void EngineBackend::step_once() {
  std::vector<engine::RequestOutput> outputs;
  try {
    outputs = engine_->step();
  } catch (const std::exception& e) {
    // A failed step leaves the engine in an unknown state: fail everything, refuse new work.
    log::error("server: engine step failed: {}", e.what());
    failed_.store(true);
    std::vector<std::string> ids;
    for (const auto& [id, active] : active_) ids.push_back(id);
    for (const auto& id : ids) finish_all(id, FinishReason::kError, fmt::format("engine step failed: {}", e.what()));
    return;
  }
  publish_stats();  // before the outputs go out, so a client never sees stats older than its tokens
  for (auto& request : outputs) {
    const auto it = active_.find(request.request_id);
    if (it == active_.end()) continue;  // aborted: already reported
    Active& active = it->second;
    for (auto& completion : request.completions) {
      const auto index = static_cast<std::size_t>(completion.index);
      if (index >= active.finished.size() || active.finished[index]) continue;
      GenerationOutput out = to_output(completion, request);
      if (out.finished) {
        active.finished[index] = true;
        active.unfinished--;
        in_flight_.fetch_sub(1);
      }
      active.on_output(std::move(out));
    }
    if (active.unfinished == 0) active_.erase(it);
  }
}

void EngineBackend::publish_stats() {
  const auto& scheduler = engine_->scheduler();
  BackendStats stats;
  stats.num_running = scheduler.num_running();
  {
    std::lock_guard lock(mutex_);
    stats.num_waiting = scheduler.num_waiting() + static_cast<int>(inbox_adds_.size());
  }
  const auto& pages = scheduler.page_pool();
  stats.cache_usage = pages.num_blocks() == 0 ? 0.0 : static_cast<double>(pages.num_in_use()) / pages.num_blocks();
  if (const auto* prefix = scheduler.prefix_cache()) {
    stats.prefix_cache_queries = static_cast<uint64_t>(prefix->stats().query_tokens);
    stats.prefix_cache_hits = static_cast<uint64_t>(prefix->stats().hit_tokens);
  }
  stats.num_preemptions = static_cast<uint64_t>(scheduler.stats().preemptions);
  std::lock_guard lock(stats_mutex_);
  stats_ = stats;
}

}  // namespace deepinfer::server
