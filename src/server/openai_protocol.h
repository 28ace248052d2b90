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
  ChatPrompt prompt;
  bool parse_tool_calls = false;  // tools given and tool_choice != "none"
  std::string tool_choice = "auto";  // "auto", "none", "required" or "function"
  std::string tool_choice_function;  // the function's name when tool_choice is "function"
  bool logprobs = false;
  int top_logprobs = 0;
};

struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;
  ChatPrompt chat;
  bool add_special_tokens = true;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Defaults the server applies to chat requests (--default-chat-template-kwargs).
struct ChatDefaults {
  bool thinking = false;
  std::string reasoning_effort;
};

// vocab_size bounds token ids given in prompts, stop_token_ids and logit_bias.
CompletionRequest parse_completion_request(const nlohmann::json& body, int32_t vocab_size);
ChatRequest parse_chat_request(const nlohmann::json& body, int32_t vocab_size, const ChatDefaults& defaults);
TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const ChatDefaults& defaults);
DetokenizeRequest parse_detokenize_request(const nlohmann::json& body, int32_t vocab_size);

// Shared pieces, exposed for the chat/completion parsers and their tests.
GenerationFields parse_generation_fields(const JsonFields& body, int32_t vocab_size);
std::vector<int32_t> parse_token_ids(const nlohmann::json& value, const std::string& path, int32_t vocab_size);
// Validates OpenAI chat messages and returns them normalised for the chat encoding.
nlohmann::json normalize_messages(const nlohmann::json& messages);
nlohmann::json normalize_tools(const nlohmann::json& tools);
// Resolves thinking mode and effort from chat_template_kwargs, reasoning_effort and DeepSeek's
// {"thinking": {"type": "enabled"}} spelling.
void parse_chat_mode(const JsonFields& body, const ChatDefaults& defaults, ChatPrompt& prompt);

}  // namespace deepinfer::server
