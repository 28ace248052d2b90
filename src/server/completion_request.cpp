// Parsing of /v1/completions, /tokenize and /detokenize request bodies.
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_protocol.h"

namespace deepinfer::server {
namespace {

constexpr int kMaxLogprobs = 20;
constexpr std::size_t kMaxPrompts = 1024;

// prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...]
std::vector<PromptInput> parse_prompts(const JsonFields& body, int32_t vocab_size) {
  const auto* prompt = body.get("prompt");
  if (prompt == nullptr) bad_field("prompt", "is required");
  std::vector<PromptInput> prompts;
  if (prompt->is_string()) {
    prompts.push_back({false, prompt->get<std::string>(), {}});
    return prompts;
  }
  if (!prompt->is_array())
    bad_field("prompt", "must be a string, an array of strings, or an array of token ids, got {}",
              json_type_name(*prompt));
  if (prompt->empty()) bad_field("prompt", "must not be empty");
  if (prompt->size() > kMaxPrompts) bad_field("prompt", "may hold at most {} prompts, got {}", kMaxPrompts, prompt->size());
  if ((*prompt)[0].is_number()) {
    prompts.push_back({true, "", parse_token_ids(*prompt, "prompt", vocab_size)});
    return prompts;
  }
  for (std::size_t i = 0; i < prompt->size(); ++i) {
    const auto& p = (*prompt)[i];
    const auto path = fmt::format("prompt[{}]", i);
    if (p.is_string()) {
      prompts.push_back({false, p.get<std::string>(), {}});
    } else if (p.is_array()) {
      if (p.empty()) bad_field(path, "must not be empty");
      prompts.push_back({true, "", parse_token_ids(p, path, vocab_size)});
    } else {
      bad_field(path, "must be a string or an array of token ids, got {}", json_type_name(p));
    }
  }
  return prompts;
}

}  // namespace

CompletionRequest parse_completion_request(const nlohmann::json& body, int32_t vocab_size) {
  const JsonFields fields(body, "");
  CompletionRequest request;
  request.common = parse_generation_fields(fields, vocab_size);
  request.prompts = parse_prompts(fields, vocab_size);
  if (auto v = fields.integer("logprobs", 0, kMaxLogprobs)) request.common.sampling.logprobs = static_cast<int>(*v);
  request.echo = fields.boolean("echo").value_or(false);
  if (request.echo && request.common.sampling.logprobs >= 0)
    bad_field("echo", "cannot be combined with 'logprobs' (prompt logprobs are not supported)");
  if (const auto suffix = fields.string("suffix"); suffix && !suffix->empty())
    bad_field("suffix", "is not supported");
  request.add_special_tokens = fields.boolean("add_special_tokens").value_or(true);
  return request;
}

TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const nlohmann::ordered_json& ordered_body,
                                       const ChatDefaults& defaults) {
  const JsonFields fields(body, "");
  TokenizeRequest request;
  request.model = fields.string("model").value_or("");
  if (fields.has("messages")) {
    if (fields.has("prompt")) bad_field("prompt", "cannot be combined with 'messages'");
    request.is_chat = true;
    request.encode_request = chat_encode_request(fields, ordered_body, defaults);
    return request;
  }
  const auto prompt = fields.string("prompt");
  if (!prompt) bad_field("prompt", "is required (or 'messages')");
  request.prompt = *prompt;
  request.add_special_tokens = fields.boolean("add_special_tokens").value_or(true);
  return request;
}

DetokenizeRequest parse_detokenize_request(const nlohmann::json& body, int32_t vocab_size) {
  const JsonFields fields(body, "");
  DetokenizeRequest request;
  request.model = fields.string("model").value_or("");
  const auto* tokens = fields.get("tokens");
  if (tokens == nullptr) bad_field("tokens", "is required");
  request.tokens = parse_token_ids(*tokens, "tokens", vocab_size);
  return request;
}

}  // namespace deepinfer::server
