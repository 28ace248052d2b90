// POST /v1/chat/completions: messages through the backend's chat encoding; the output text split
// by the chat output parser into reasoning_content, content and tool_calls; whole or streamed as
// chat.completion.chunk deltas.
#include <map>

#include "encoding/special_tokens.h"
#include "server/api_error.h"
#include "server/endpoints.h"
#include "server/json_fields.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace deepinfer::server {
namespace {

struct ChatChoice {
  std::unique_ptr<ChatOutputParser> parser;
  std::string content;
  std::string reasoning;
  nlohmann::json tool_calls = nlohmann::json::array();  // whole calls, for the non-streamed message
  std::map<int, std::size_t> call_slots;  // tool call index -> position in tool_calls
  nlohmann::json logprobs = nlohmann::json::array();  // logprobs.content entries not yet sent
  int reasoning_tokens = 0;
  bool reasoning_done = false;
  bool finished = false;
  nlohmann::json finish_reason;
  std::string error;
};

struct ChatState {
  ResponseMeta meta;
  ChatRequest request;
  std::unique_ptr<GenerationSession> session;
  std::vector<ChatChoice> choices;
  bool thinking = false;  // the prompt opened a thinking block
  const TextCodec* codec = nullptr;

  // Folds one output into its choice; returns the delta to stream.
  ChatDelta consume(ChoiceOutput& item) {
    auto& choice = choices[item.choice];
    const auto& out = item.output;
    ChatDelta delta = choice.parser->feed(out.text);
    if (out.finished) append(delta, choice.parser->finish());
    name_tool_calls(choice, delta);
    if (thinking && !choice.reasoning_done) {
      if (delta.content.empty() && delta.tool_calls.empty()) choice.reasoning_tokens += static_cast<int>(out.token_ids.size());
      else choice.reasoning_done = true;
    }
    choice.content += delta.content;
    choice.reasoning += delta.reasoning;
    if (request.logprobs) {
      for (auto& entry : chat_logprob_entries(out.logprobs, *codec)) choice.logprobs.push_back(std::move(entry));
    }
    if (out.finished) {
      choice.finished = true;
      const bool calls = request.parse_tool_calls && choice.parser->saw_tool_calls();
      choice.finish_reason = finish_reason_name(out.finish_reason, calls);
      if (out.finish_reason == FinishReason::kError) choice.error = out.error_message;
    }
    return delta;
  }

  static void append(ChatDelta& into, ChatDelta&& more) {
    into.reasoning += more.reasoning;
    into.content += more.content;
    for (auto& call : more.tool_calls) into.tool_calls.push_back(std::move(call));
  }

  // The first delta of each call carries its id and name (one is made up if the parser gave
  // none); later ones only arguments. Whole calls accumulate for the non-streamed message.
  static void name_tool_calls(ChatChoice& choice, ChatDelta& delta) {
    for (auto& call : delta.tool_calls) {
      auto [slot, first] = choice.call_slots.try_emplace(call.index, choice.tool_calls.size());
      if (first) {
        if (call.id.empty()) call.id = make_response_id("chatcmpl-tool-");
        choice.tool_calls.push_back(
            {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", ""}}}});
      } else {
        call.id.clear();
        call.name.clear();
      }
      auto& arguments = choice.tool_calls[slot->second]["function"]["arguments"].get_ref<std::string&>();
      arguments += call.arguments;
    }
  }

  UsageCounts usage() const {
    UsageCounts usage;
    usage.prompt_tokens = session->prompt_tokens(0);
    usage.cached_tokens = session->cached_tokens(0);
    if (thinking) usage.reasoning_tokens = 0;
    for (std::size_t i = 0; i < choices.size(); ++i) {
      usage.completion_tokens += session->completion_tokens(i);
      if (thinking) *usage.reasoning_tokens += choices[i].reasoning_tokens;
    }
    return usage;
  }

  nlohmann::json take_logprobs(ChatChoice& choice) const {
    if (!request.logprobs) return nullptr;
    nlohmann::json out = {{"content", std::move(choice.logprobs)}};
    choice.logprobs = nlohmann::json::array();
    return out;
  }

  std::string chunk(nlohmann::json choice) const {
    return chunk_event(chat_chunk(meta, nlohmann::json::array({std::move(choice)})), request.common.stream_options,
                       [this] { return usage(); });
  }

  // SessionStream's hooks. OpenAI opens every choice with its role.
  std::string stream_opening() const {
    std::string out;
    for (std::size_t i = 0; i < choices.size(); ++i)
      out += chunk(chat_chunk_choice(i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
    return out;
  }

  std::string stream_output(ChoiceOutput& item) {
    const ChatDelta delta = consume(item);
    auto& choice = choices[item.choice];
    std::string out;
    if (!choice.error.empty()) out += sse_event(error_body(500, choice.error));
    const bool has_logprobs = request.logprobs && !choice.logprobs.empty();
    if (delta.empty() && !has_logprobs && !item.output.finished) return out;
    out += chunk(chat_chunk_choice(item.choice, chat_delta_json(delta),
                                   has_logprobs ? take_logprobs(choice) : nlohmann::json(nullptr),
                                   item.output.finished ? choice.finish_reason : nlohmann::json(nullptr)));
    return out;
  }

  std::string stream_closing() const {
    return stream_tail(meta, "chat.completion.chunk", request.common.stream_options, usage());
  }
};

Reply chat_whole(const EndpointContext& ctx, ChatState& s) {
  collect_outputs(ctx, *s.session, [&](ChoiceOutput& item) { s.consume(item); });
  nlohmann::json choices = nlohmann::json::array();
  for (std::size_t i = 0; i < s.choices.size(); ++i) {
    auto& c = s.choices[i];
    if (!c.error.empty()) throw ApiError(500, fmt::format("generation failed: {}", c.error));
    const bool has_calls = !c.tool_calls.empty();
    nlohmann::json message = {{"role", "assistant"},
                              {"content", c.content.empty() && has_calls ? nlohmann::json() : nlohmann::json(c.content)}};
    if (s.thinking) message["reasoning_content"] = c.reasoning;
    if (has_calls) message["tool_calls"] = c.tool_calls;
    choices.push_back(
        {{"index", i}, {"message", std::move(message)}, {"logprobs", s.take_logprobs(c)}, {"finish_reason", c.finish_reason}});
  }
  return {200, "application/json", reply_json(chat_completion_object(s.meta, std::move(choices), s.usage())), nullptr};
}

void check_supported(const EndpointContext& ctx, const ChatRequest& request) {
  if (!request.common.sampling.structured_output.is_null() && !ctx.backend.model_info().supports_structured_output)
    throw ApiError(400, "structured outputs (response_format, regex, grammar) are not enabled on this server",
                   "response_format");
  if (request.tool_choice != "required" && request.tool_choice != "function") return;
  if (ctx.backend.model_info().tool_call_tags.is_null())
    throw ApiError(400, "tool_choice 'required' or a named function needs a DSML chat format and structured outputs",
                   "tool_choice");
  if (!request.common.sampling.structured_output.is_null())
    throw ApiError(400, "a forced tool call (tool_choice) cannot be combined with response_format, regex or grammar",
                   "tool_choice");
}

// The output constraint of a forced tool call: one DSML block calling the request's tools (or
// the named one) with arguments that match their schemas (grammar/tool_calls.h).
nlohmann::json forced_tool_calls(const EndpointContext& ctx, const ChatRequest& request) {
  nlohmann::ordered_json spec = {{"tags", ctx.backend.model_info().tool_call_tags},
                                 {"tools", request.encode_request.at("tools")},
                                 {"parallel", request.parallel_tool_calls}};
  if (request.tool_choice == "function") spec["function"] = request.tool_choice_function;
  return {{"tool_calls", spec.dump()}};
}

}  // namespace

Reply handle_chat_completions(const EndpointContext& ctx, std::string_view body) {
  const auto& codec = ctx.backend.codec();
  auto state = std::make_unique<ChatState>();
  state->request = parse_chat_request(parse_json_body(body), parse_ordered_json_body(body), codec.vocab_size(),
                                      ctx.config.chat_defaults);
  auto& request = state->request;
  check_supported(ctx, request);
  state->codec = &codec;
  state->meta = {make_response_id("chatcmpl-"), unix_time_now(), resolve_model_name(ctx, request.common.model)};
  const EncodedChat prompt = encode_chat_request(ctx, request.encode_request);
  state->thinking = prompt.thinking;
  SamplingOptions sampling = request.common.sampling;
  keep_schema_order(sampling.structured_output, body);
  if (request.tool_choice == "required" || request.tool_choice == "function")
    sampling.structured_output = forced_tool_calls(ctx, request);
  if (prompt.thinking && !sampling.structured_output.is_null()) {
    if (!ctx.backend.model_info().structured_output_after_thinking)
      throw ApiError(400,
                     "structured outputs cannot follow the reasoning on this server: turn thinking off "
                     "(chat_template_kwargs: {\"thinking\": false})",
                     "response_format");
    sampling.structured_output["start_after"] = std::string(encoding::tokens::kThinkEnd);  // reasoning stays free
  }
  sampling.max_tokens =
      resolve_max_tokens(ctx, prompt.token_ids.size(), request.common.max_tokens, std::nullopt, "messages");
  state->session = std::make_unique<GenerationSession>(ctx.backend, ctx.metrics, state->meta.id);
  submit_choices(*state->session, prompt.token_ids, sampling, request.common.n);
  for (int i = 0; i < request.common.n; ++i) {
    ChatChoice choice;
    choice.parser = ctx.backend.chat_output_parser(prompt.thinking, request.parse_tool_calls);
    state->choices.push_back(std::move(choice));
  }
  if (!request.common.stream) return chat_whole(ctx, *state);
  return {200, "text/event-stream", "", std::make_shared<SessionStream<ChatState>>(std::move(state))};
}

}  // namespace deepinfer::server
