// OpenAI request types after validation: /v1/completions, /v1/chat/completions, /tokenize and
// /detokenize. Parsing throws ApiError (400) naming the first offending field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation_backend.h"

namespace deepinfer::server {

class JsonFields;

struct StreamOptions {
  bool include_usage = false;
  bool continuous_usage_stats = false;  // vLLM: usage on every chunk
};

// Fields both generation endpoints share.
struct GenerationFields {
  std::string model;  // "" when the request left it out
  SamplingOptions sampling;
  std::optional<int> max_tokens;  // unset: up to max_model_len
  int n = 1;
  bool stream = false;
  StreamOptions stream_options;
};

// One prompt: text to tokenise, or token ids as given.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> token_ids;
};

struct CompletionRequest {
  GenerationFields common;
  std::vector<PromptInput> prompts;
  bool echo = false;
  bool add_special_tokens = true;
};

struct ChatRequest {
  GenerationFields common;
  // What the chat encoding gets: the body in its original key order, with tools removed when
  // tool_choice is "none" and the server's default chat_template_kwargs merged in.
  nlohmann::ordered_json encode_request;
  bool parse_tool_calls = false;  // tools given and tool_choice != "none"
  std::string tool_choice = "auto";  // "auto", "none", "required" or "function"
  std::string tool_choice_function;  // the function's name when tool_choice is "function"
  bool parallel_tool_calls = true;   // with a forced call: one or more calls (false: exactly one)
  bool logprobs = false;
  int top_logprobs = 0;
};

struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;
  nlohmann::ordered_json encode_request;  // with is_chat, as in ChatRequest
  bool add_special_tokens = true;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Server-wide defaults for chat_template_kwargs (--default-chat-template-kwargs, e.g.
// {"thinking": false}); a request's own keys win.
struct ChatDefaults {
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
};

// vocab_size bounds token ids given in prompts, stop_token_ids and logit_bias. The chat and
// tokenize parsers also take the body parsed with its key order kept (ordered_body).
CompletionRequest parse_completion_request(const nlohmann::json& body, int32_t vocab_size);
ChatRequest parse_chat_request(const nlohmann::json& body, const nlohmann::ordered_json& ordered_body,
                               int32_t vocab_size, const ChatDefaults& defaults);
TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const nlohmann::ordered_json& ordered_body,
                                       const ChatDefaults& defaults);
DetokenizeRequest parse_detokenize_request(const nlohmann::json& body, int32_t vocab_size);

// Shared pieces, exposed for the chat/completion parsers and their tests.
GenerationFields parse_generation_fields(const JsonFields& body, int32_t vocab_size);
std::vector<int32_t> parse_token_ids(const nlohmann::json& value, const std::string& path, int32_t vocab_size);
// Type checks of chat messages and tools, so a malformed one is a 400 naming its field; the chat
// encoding checks what the formats need beyond that.
void validate_messages(const nlohmann::json& messages);
void validate_tools(const nlohmann::json& tools);
// The chat fields both /v1/chat/completions and /tokenize take: messages, tools, thinking
// switches. Returns the body for the encoding with the defaults merged in.
nlohmann::ordered_json chat_encode_request(const JsonFields& body, const nlohmann::ordered_json& ordered_body,
                                           const ChatDefaults& defaults);

}  // namespace deepinfer::server
