// OpenAI response objects, field for field as api.openai.com returns them (plus vLLM's
// stop_reason and DeepSeek's reasoning_content).
#include "server/openai_response.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

namespace deepinfer::server {
namespace {

nlohmann::json bytes_json(const std::string& bytes) {
  nlohmann::json out = nlohmann::json::array();
  for (const unsigned char c : bytes) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

std::string make_response_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string finish_reason_name(FinishReason reason, bool tool_calls) {
  switch (reason) {
    case FinishReason::kStop: return tool_calls ? "tool_calls" : "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "stop";
}

nlohmann::json stop_reason_json(const GenerationOutput& output) {
  if (output.finish_reason != FinishReason::kStop) return nullptr;
  if (!output.stop_string.empty()) return output.stop_string;
  if (output.stop_token_id) return *output.stop_token_id;
  return nullptr;
}

UsageCounts& UsageCounts::operator+=(const UsageCounts& other) {
  prompt_tokens += other.prompt_tokens;
  completion_tokens += other.completion_tokens;
  cached_tokens += other.cached_tokens;
  if (other.reasoning_tokens) reasoning_tokens = reasoning_tokens.value_or(0) + *other.reasoning_tokens;
  return *this;
}

nlohmann::json usage_json(const UsageCounts& usage) {
  nlohmann::json out = {{"prompt_tokens", usage.prompt_tokens},
                        {"completion_tokens", usage.completion_tokens},
                        {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
                        {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
  if (usage.reasoning_tokens) out["completion_tokens_details"] = {{"reasoning_tokens", *usage.reasoning_tokens}};
  return out;
}

double json_logprob(float logprob) {
  if (std::isnan(logprob)) return -9999.0;
  return std::max(static_cast<double>(logprob), -9999.0);
}

void CompletionLogprobs::append(const std::vector<TokenLogprobs>& logprobs, const TextCodec& codec) {
  for (const auto& entry : logprobs) {
    const std::string token = codec.token_bytes(entry.token_id);
    tokens_.push_back(token);
    token_logprobs_.push_back(json_logprob(entry.logprob));
    // vLLM's shape: the top candidates and the sampled token, keyed by their text.
    nlohmann::json top = nlohmann::json::object();
    for (const auto& candidate : entry.top) top[codec.token_bytes(candidate.token_id)] = json_logprob(candidate.logprob);
    if (!top.contains(token)) top[token] = json_logprob(entry.logprob);
    top_logprobs_.push_back(std::move(top));
    text_offset_.push_back(offset_);
    offset_ += token.size();
  }
}

nlohmann::json CompletionLogprobs::take() {
  nlohmann::json out = {{"tokens", std::move(tokens_)},
                        {"token_logprobs", std::move(token_logprobs_)},
                        {"top_logprobs", std::move(top_logprobs_)},
                        {"text_offset", std::move(text_offset_)}};
  tokens_ = nlohmann::json::array();
  token_logprobs_ = nlohmann::json::array();
  top_logprobs_ = nlohmann::json::array();
  text_offset_ = nlohmann::json::array();
  return out;
}

nlohmann::json chat_logprob_entries(const std::vector<TokenLogprobs>& logprobs, const TextCodec& codec) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& entry : logprobs) {
    const std::string token = codec.token_bytes(entry.token_id);
    nlohmann::json top = nlohmann::json::array();
    for (const auto& candidate : entry.top) {
      const std::string text = codec.token_bytes(candidate.token_id);
      top.push_back({{"token", text}, {"logprob", json_logprob(candidate.logprob)}, {"bytes", bytes_json(text)}});
    }
    entries.push_back({{"token", token},
                       {"logprob", json_logprob(entry.logprob)},
                       {"bytes", bytes_json(token)},
                       {"top_logprobs", std::move(top)}});
  }
  return entries;
}

nlohmann::json completion_choice(std::size_t index, const std::string& text, nlohmann::json logprobs,
                                 nlohmann::json finish_reason, nlohmann::json stop_reason) {
  return {{"index", index},
          {"text", text},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", std::move(finish_reason)},
          {"stop_reason", std::move(stop_reason)}};
}

nlohmann::json completion_object(const ResponseMeta& meta, nlohmann::json choices, const UsageCounts& usage) {
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(usage)}};
}

nlohmann::json completion_chunk(const ResponseMeta& meta, nlohmann::json choices) {
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", std::move(choices)}};
}

nlohmann::json chat_delta_json(const ChatDelta& delta) {
  nlohmann::json out = nlohmann::json::object();
  if (!delta.reasoning.empty()) out["reasoning_content"] = delta.reasoning;
  if (!delta.content.empty()) out["content"] = delta.content;
  if (!delta.tool_calls.empty()) {
    nlohmann::json calls = nlohmann::json::array();
    for (const auto& call : delta.tool_calls) {
      nlohmann::json function = {{"arguments", call.arguments}};
      nlohmann::json item = {{"index", call.index}};
      if (!call.id.empty()) {
        item["id"] = call.id;
        item["type"] = "function";
        function["name"] = call.name;
      }
      item["function"] = std::move(function);
      calls.push_back(std::move(item));
    }
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

nlohmann::json chat_chunk_choice(std::size_t index, nlohmann::json delta, nlohmann::json logprobs,
                                 nlohmann::json finish_reason) {
  return {{"index", index},
          {"delta", std::move(delta)},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", std::move(finish_reason)}};
}

nlohmann::json chat_chunk(const ResponseMeta& meta, nlohmann::json choices) {
  return {{"id", meta.id},
          {"object", "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", std::move(choices)}};
}

nlohmann::json chat_completion_object(const ResponseMeta& meta, nlohmann::json choices, const UsageCounts& usage) {
  return {{"id", meta.id},
          {"object", "chat.completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(usage)}};
}

nlohmann::json usage_chunk(const ResponseMeta& meta, const char* object, const UsageCounts& usage) {
  return {{"id", meta.id},
          {"object", object},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", nlohmann::json::array()},
          {"usage", usage_json(usage)}};
}

nlohmann::json model_json(const std::string& name, int64_t created, const std::string& root, int max_model_len) {
  return {{"id", name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "deepinfer"},
          {"root", root},
          {"parent", nullptr},
          {"max_model_len", max_model_len}};
}

nlohmann::json model_list_json(const std::vector<std::string>& names, int64_t created, const std::string& root,
                               int max_model_len) {
  nlohmann::json data = nlohmann::json::array();
  for (const auto& name : names) data.push_back(model_json(name, created, root, max_model_len));
  return {{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace deepinfer::server
