// Building OpenAI response objects: completions and chat completions (whole and as stream
// chunks), usage, logprobs in both endpoints' shapes, and the model list.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation_backend.h"

namespace deepinfer::server {

struct ResponseMeta {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A fresh id: prefix + 32 random hex digits.
std::string make_response_id(const std::string& prefix);
int64_t unix_time_now();

// "stop", "length", "tool_calls" (a stop that ended tool calls) or "abort".
std::string finish_reason_name(FinishReason reason, bool tool_calls);
// vLLM's stop_reason: the stop string, the stop token id (not EOS), or null.
nlohmann::json stop_reason_json(const GenerationOutput& output);

struct UsageCounts {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  std::optional<int> reasoning_tokens;  // chat in thinking mode
  UsageCounts& operator+=(const UsageCounts& other);
};
nlohmann::json usage_json(const UsageCounts& usage);

// Logprobs of finite value; -inf (a token masked out) becomes -9999 as in vLLM, since JSON has
// no infinity.
double json_logprob(float logprob);

// /v1/completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, appended to as
// tokens arrive; text offsets count from `start_offset` (the echoed prompt's length).
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(std::size_t start_offset = 0) : offset_(start_offset) {}
  void append(const std::vector<TokenLogprobs>& logprobs, const TextCodec& codec);
  nlohmann::json take();  // returns what was appended since the last take
  bool empty() const { return tokens_.empty(); }

 private:
  std::size_t offset_;
  nlohmann::json tokens_ = nlohmann::json::array();
  nlohmann::json token_logprobs_ = nlohmann::json::array();
  nlohmann::json top_logprobs_ = nlohmann::json::array();
  nlohmann::json text_offset_ = nlohmann::json::array();
};

// /v1/chat/completions: entries of logprobs.content, [{token, logprob, bytes, top_logprobs}].
nlohmann::json chat_logprob_entries(const std::vector<TokenLogprobs>& logprobs, const TextCodec& codec);

nlohmann::json completion_choice(std::size_t index, const std::string& text, nlohmann::json logprobs,
                                 nlohmann::json finish_reason, nlohmann::json stop_reason);
nlohmann::json completion_object(const ResponseMeta& meta, nlohmann::json choices, const UsageCounts& usage);
nlohmann::json completion_chunk(const ResponseMeta& meta, nlohmann::json choices);

// A chat delta as OpenAI streams it: {"content"}, {"reasoning_content"}, {"tool_calls": [...]}.
nlohmann::json chat_delta_json(const ChatDelta& delta);
nlohmann::json chat_chunk_choice(std::size_t index, nlohmann::json delta, nlohmann::json logprobs,
                                 nlohmann::json finish_reason);
nlohmann::json chat_chunk(const ResponseMeta& meta, nlohmann::json choices);
nlohmann::json chat_completion_object(const ResponseMeta& meta, nlohmann::json choices, const UsageCounts& usage);

// A usage-only chunk (stream_options.include_usage): "choices": [].
nlohmann::json usage_chunk(const ResponseMeta& meta, const char* object, const UsageCounts& usage);

nlohmann::json model_list_json(const std::vector<std::string>& names, int64_t created, const std::string& root,
                               int max_model_len);
nlohmann::json model_json(const std::string& name, int64_t created, const std::string& root, int max_model_len);

}  // namespace deepinfer::server
