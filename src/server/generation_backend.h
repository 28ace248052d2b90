// The narrow interface between the HTTP server and whatever generates tokens: submit a request,
// receive its incremental outputs through a callback, abort it, read load statistics, and reach
// the tokenizer and chat encoding. The engine adapter implements it; unit tests use a fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::server {

// The sampling fields of an OpenAI request after validation, independent of any engine type.
struct SamplingOptions {
  int max_tokens = 16;  // resolved by the server against max_model_len before submission
  int min_tokens = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = -1;  // <= 0: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int logprobs = -1;  // -1: none; k >= 0: the sampled token's logprob plus the k most likely
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured-output constraint as the request spelled it ({"type": "json_schema", ...},
  // {"regex": ...}, ...); null when unconstrained. Only sent when the backend supports it.
  nlohmann::json structured_output;
};

struct GenerationRequest;
struct GenerationOutput;
using OutputCallback = std::function<void(GenerationOutput&&)>;

// One prompt to generate n completions of (a prompt list becomes several requests). With a seed,
// the backend derives each completion's seed from it as the offline API does, so the server and
// `deepinfer generate` sample alike.
struct GenerationRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingOptions sampling;
  int n = 1;
  // Called on the engine's thread for every step that produced something for a completion, the
  // last time with finished = true. It must not block: the server only pushes into a queue.
  OutputCallback on_output;
};

enum class FinishReason { kStop, kLength, kAbort, kError };

struct TopLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;  // most likely first
};

// What one engine step produced for one completion of a request.
struct GenerationOutput {
  int index = 0;                        // the completion, 0 .. n-1
  std::vector<int32_t> token_ids;       // tokens new in this step
  std::string text;                     // text released in this step (stop holdback applied)
  std::vector<TokenLogprobs> logprobs;  // one per new token when logprobs were requested
  int num_prompt_tokens = 0;
  int num_cached_prompt_tokens = 0;     // prompt tokens served from the prefix cache
  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;
  std::string stop_string;              // the stop string that ended the request, if one did
  std::optional<int32_t> stop_token_id; // the stop_token_ids entry that did (not EOS)
  std::string error_message;            // for FinishReason::kError
  std::chrono::steady_clock::time_point time{};  // set by the server when it receives this
};

// Tokenizer access for /tokenize, /detokenize, prompts given as text and logprob token strings.
// All methods are thread-safe.
class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  // The raw bytes a token stands for (may be part of a UTF-8 character).
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
};

// A chat prompt from the chat encoding: its token ids, and whether it opened a thinking block
// (the output then starts as reasoning).
struct EncodedChat {
  std::vector<int32_t> token_ids;
  bool thinking = false;
};

// A piece of one tool call, as OpenAI streams it: the first delta of a call carries id and name,
// later ones append to its arguments.
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Splits a chat completion's text stream into reasoning, content and tool calls.
class ChatOutputParser {
 public:
  virtual ~ChatOutputParser() = default;
  virtual ChatDelta feed(std::string_view text) = 0;
  // End of output: flushes anything held back.
  virtual ChatDelta finish() = 0;
  virtual bool saw_tool_calls() const = 0;
};

// The engine's view of the model and its load, for /v1/models and /metrics.
struct ModelInfo {
  std::string model_path;
  int max_model_len = 0;
  bool supports_structured_output = false;
  // Constraints can start after the reasoning (the backend gates them after the end-of-thinking
  // text); without it a constrained chat needs thinking off.
  bool structured_output_after_thinking = false;
  // The chat format's DSML tag spellings ({"block_open": ..., ...}, grammar/tool_calls.h), which
  // forced tool calls (tool_choice "required" or a named function) are constrained to; null
  // when the backend cannot force calls.
  nlohmann::json tool_call_tags;
};

struct BackendStats {
  int num_running = 0;
  int num_waiting = 0;
  double cache_usage = 0.0;         // fraction of cache pages in use, 0..1
  uint64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_cache_hits = 0;     // of those, tokens found
  uint64_t num_preemptions = 0;
};

// Thrown by submit() when the engine's waiting queue is full; the server answers 503.
class QueueFullError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  virtual const ModelInfo& model_info() const = 0;
  virtual const TextCodec& codec() const = 0;
  // Renders a chat request into a prompt. `request` is the body as the client sent it (key order
  // kept: tool schemas are written into the prompt in that order) after the server's edits
  // (tools dropped for tool_choice "none", default chat_template_kwargs filled in). Throws
  // deepinfer::Error for messages or options it cannot encode.
  virtual EncodedChat encode_chat(const nlohmann::ordered_json& request) const = 0;
  // A parser for one choice's output; tool_calls: parse tool-call blocks (else they stay content).
  virtual std::unique_ptr<ChatOutputParser> chat_output_parser(bool thinking, bool tool_calls) const = 0;
  // Queues a request without waiting for the engine. Throws QueueFullError, or deepinfer::Error
  // for sampling options the engine rejects. After it returns, on_output will be called until a
  // finished output arrives (also after abort()).
  virtual void submit(GenerationRequest request) = 0;
  // Asks the engine to stop a request and free its cache pages; unknown ids are ignored.
  virtual void abort(const std::string& request_id) = 0;
  virtual BackendStats stats() const = 0;
  virtual bool healthy() const = 0;
};

}  // namespace deepinfer::server
