// Pieces the endpoints share (model names, context-length checks, submission and collection of
// choices) and the small endpoints: /v1/models, /tokenize, /detokenize.
#include "server/api_error.h"
#include "server/endpoints.h"
#include "server/json_fields.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace deepinfer::server {
namespace {

const std::vector<std::string>& served_names(const EndpointContext& ctx) { return ctx.config.served_model_names; }

int64_t server_start_time() {
  static const int64_t start = unix_time_now();
  return start;
}

}  // namespace

std::string reply_json(const nlohmann::json& value) { return dump_json(value); }

std::string chunk_event(nlohmann::json chunk, const StreamOptions& options, const std::function<UsageCounts()>& usage) {
  if (options.include_usage) chunk["usage"] = options.continuous_usage_stats ? usage_json(usage()) : nlohmann::json();
  return sse_event(chunk);
}

std::string stream_tail(const ResponseMeta& meta, const char* object, const StreamOptions& options,
                        const UsageCounts& usage) {
  std::string out;
  if (options.include_usage) out += sse_event(usage_chunk(meta, object, usage));
  out += kSseDone;
  return out;
}

std::string resolve_model_name(const EndpointContext& ctx, const std::string& requested) {
  const auto& names = served_names(ctx);
  if (requested.empty()) return names.front();
  for (const auto& name : names)
    if (name == requested) return name;
  throw ApiError(404, fmt::format("The model '{}' does not exist.", shorten(requested)), "model", "model_not_found");
}

int resolve_max_tokens(const EndpointContext& ctx, std::size_t prompt_tokens, std::optional<int> requested,
                       std::optional<int> default_tokens, const char* prompt_field) {
  const auto max_len = static_cast<std::size_t>(ctx.backend.model_info().max_model_len);
  if (prompt_tokens == 0) bad_field(prompt_field, "must not be empty (0 tokens)");
  if (prompt_tokens >= max_len)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} tokens, "
                               "leaving no room for a completion. Please reduce the length of the prompt.",
                               max_len, prompt_tokens),
                   prompt_field, "context_length_exceeded");
  const auto room = static_cast<int>(max_len - prompt_tokens);
  if (requested) {
    if (static_cast<std::size_t>(*requested) > max_len - prompt_tokens)
      throw ApiError(400,
                     fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                 "({} in the prompt, {} for the completion). Please reduce the prompt or max_tokens.",
                                 max_len, prompt_tokens + static_cast<std::size_t>(*requested), prompt_tokens,
                                 *requested),
                     "max_tokens", "context_length_exceeded");
    return *requested;
  }
  return default_tokens ? std::min(*default_tokens, room) : room;
}

void submit_choices(GenerationSession& session, const std::vector<int32_t>& prompt, const SamplingOptions& sampling,
                    int n) {
  try {
    session.submit(prompt, sampling, n);
  } catch (const QueueFullError& e) {
    throw ApiError(503, fmt::format("The server is overloaded: {}. Retry later.", e.what()), "", "queue_full");
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

void keep_schema_order(nlohmann::json& constraint, std::string_view body) {
  if (constraint.is_null()) return;
  const nlohmann::ordered_json ordered = parse_ordered_json_body(body);
  if (constraint.value("type", "") == "json_schema" && constraint.contains("json_schema") &&
      constraint["json_schema"].contains("schema")) {
    constraint["json_schema"]["schema"] = ordered.at("response_format").at("json_schema").at("schema").dump();
  } else if (constraint.contains("structured_outputs") && constraint["structured_outputs"].contains("json")) {
    constraint["structured_outputs"]["json"] = ordered.at("structured_outputs").at("json").dump();
  }
}

void collect_outputs(const EndpointContext& ctx, GenerationSession& session,
                     const std::function<void(ChoiceOutput&)>& consume) {
  while (!session.all_finished()) {
    if (ctx.stopping.load()) throw ApiError(503, "The server is shutting down.", "", "shutting_down");
    if (ctx.client_gone && ctx.client_gone())
      throw ApiError(499, "The client closed the connection before the response was ready.", "", "client_closed");
    for (auto& item : session.wait(std::chrono::milliseconds(100))) consume(item);
  }
}

Reply handle_models(const EndpointContext& ctx) {
  const auto& info = ctx.backend.model_info();
  return {200, "application/json",
          reply_json(model_list_json(served_names(ctx), server_start_time(), info.model_path, info.max_model_len)),
          nullptr};
}

Reply handle_model(const EndpointContext& ctx, const std::string& name) {
  const auto& info = ctx.backend.model_info();
  const std::string found = resolve_model_name(ctx, name);
  return {200, "application/json", reply_json(model_json(found, server_start_time(), info.model_path, info.max_model_len)),
          nullptr};
}

EncodedChat encode_chat_request(const EndpointContext& ctx, const nlohmann::ordered_json& request) {
  try {
    return ctx.backend.encode_chat(request);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

Reply handle_tokenize(const EndpointContext& ctx, std::string_view body) {
  const auto request = parse_tokenize_request(parse_json_body(body), parse_ordered_json_body(body), ctx.config.chat_defaults);
  resolve_model_name(ctx, request.model);
  const std::vector<int32_t> tokens = request.is_chat ? encode_chat_request(ctx, request.encode_request).token_ids
                                                      : ctx.backend.codec().encode(request.prompt, request.add_special_tokens);
  nlohmann::json strs = nlohmann::json::array();
  for (const auto id : tokens) strs.push_back(ctx.backend.codec().token_bytes(id));
  const nlohmann::json out = {{"count", tokens.size()},
                              {"max_model_len", ctx.backend.model_info().max_model_len},
                              {"tokens", tokens},
                              {"token_strs", std::move(strs)}};
  return {200, "application/json", reply_json(out), nullptr};
}

Reply handle_detokenize(const EndpointContext& ctx, std::string_view body) {
  const auto& codec = ctx.backend.codec();
  const auto request = parse_detokenize_request(parse_json_body(body), codec.vocab_size());
  resolve_model_name(ctx, request.model);
  try {
    return {200, "application/json", reply_json({{"prompt", codec.decode(request.tokens, false)}}), nullptr};
  } catch (const Error& e) {  // an id the tokenizer does not have
    throw ApiError(400, e.what(), "tokens");
  }
}

}  // namespace deepinfer::server
