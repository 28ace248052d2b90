// POST /v1/completions: prompts (text or token ids, one or many) x n choices, returned whole or
// streamed as text_completion chunks.
#include "server/api_error.h"
#include "server/endpoints.h"
#include "server/json_fields.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace deepinfer::server {
namespace {

constexpr int kDefaultCompletionTokens = 16;  // OpenAI's and vLLM's default for this endpoint

struct CompletionChoice {
  std::string echo;  // the prompt text, sent first when echo is set
  std::string text;
  CompletionLogprobs logprobs;
  bool finished = false;
  nlohmann::json finish_reason;
  nlohmann::json stop_reason;
  std::string error;
};

// State shared by the streamed and the whole response.
struct CompletionState {
  ResponseMeta meta;
  CompletionRequest request;
  std::unique_ptr<GenerationSession> session;
  std::vector<CompletionChoice> choices;
  const TextCodec* codec = nullptr;

  // Folds one output into its choice; returns the choice's new text.
  std::string consume(ChoiceOutput& item) {
    auto& choice = choices[item.choice];
    const auto& out = item.output;
    choice.text += out.text;
    if (request.common.sampling.logprobs >= 0) choice.logprobs.append(out.logprobs, *codec);
    if (out.finished) {
      choice.finished = true;
      choice.finish_reason = finish_reason_name(out.finish_reason, false);
      choice.stop_reason = stop_reason_json(out);
      if (out.finish_reason == FinishReason::kError) choice.error = out.error_message;
    }
    return out.text;
  }

  UsageCounts usage() const {
    UsageCounts usage;
    for (std::size_t i = 0; i < choices.size(); ++i) {
      // Prompt tokens count once per prompt, not per choice (as OpenAI bills them).
      if (i % static_cast<std::size_t>(request.common.n) == 0) {
        usage.prompt_tokens += session->prompt_tokens(i);
        usage.cached_tokens += session->cached_tokens(i);
      }
      usage.completion_tokens += session->completion_tokens(i);
    }
    return usage;
  }

  std::string chunk(std::size_t index, const std::string& text, nlohmann::json logprobs, nlohmann::json finish,
                    nlohmann::json stop) const {
    auto choice = completion_choice(index, text, std::move(logprobs), std::move(finish), std::move(stop));
    return chunk_event(completion_chunk(meta, nlohmann::json::array({std::move(choice)})), request.common.stream_options,
                       [this] { return usage(); });
  }

  // SessionStream's hooks.
  std::string stream_opening() const {
    std::string out;
    for (std::size_t i = 0; i < choices.size(); ++i)
      if (!choices[i].echo.empty()) out += chunk(i, choices[i].echo, nullptr, nullptr, nullptr);
    return out;
  }

  std::string stream_output(ChoiceOutput& item) {
    const std::string text = consume(item);
    auto& choice = choices[item.choice];
    std::string out;
    if (!choice.error.empty()) out += sse_event(error_body(500, choice.error));
    const bool has_logprobs = !choice.logprobs.empty();
    // Like vLLM, a chunk per step that made tokens, even when their text is still held back (a
    // partial character) or empty (a token without text), so clients can count and time tokens.
    if (item.output.token_ids.empty() && !has_logprobs && !item.output.finished) return out;
    const bool last = item.output.finished;
    out += chunk(item.choice, text, has_logprobs ? choice.logprobs.take() : nlohmann::json(nullptr),
                 last ? choice.finish_reason : nlohmann::json(nullptr), last ? choice.stop_reason : nlohmann::json(nullptr));
    return out;
  }

  std::string stream_closing() const { return stream_tail(meta, "text_completion", request.common.stream_options, usage()); }
};

Reply complete_whole(const EndpointContext& ctx, CompletionState& s) {
  collect_outputs(ctx, *s.session, [&](ChoiceOutput& item) { s.consume(item); });
  nlohmann::json choices = nlohmann::json::array();
  for (std::size_t i = 0; i < s.choices.size(); ++i) {
    auto& c = s.choices[i];
    if (!c.error.empty()) throw ApiError(500, fmt::format("generation failed: {}", c.error));
    nlohmann::json logprobs = s.request.common.sampling.logprobs >= 0 ? c.logprobs.take() : nlohmann::json(nullptr);
    choices.push_back(completion_choice(i, c.echo + c.text, std::move(logprobs), c.finish_reason, c.stop_reason));
  }
  return {200, "application/json", reply_json(completion_object(s.meta, std::move(choices), s.usage())), nullptr};
}

}  // namespace

Reply handle_completions(const EndpointContext& ctx, std::string_view body) {
  const auto& codec = ctx.backend.codec();
  auto state = std::make_unique<CompletionState>();
  state->request = parse_completion_request(parse_json_body(body), codec.vocab_size());
  auto& request = state->request;
  if (!request.common.sampling.structured_output.is_null() && !ctx.backend.model_info().supports_structured_output)
    throw ApiError(400, "structured outputs (response_format, regex, grammar) are not enabled on this server",
                   "response_format");
  keep_schema_order(request.common.sampling.structured_output, body);
  state->codec = &codec;
  state->meta = {make_response_id("cmpl-"), unix_time_now(), resolve_model_name(ctx, request.common.model)};
  // Tokenise and check every prompt before anything reaches the engine.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> budgets;
  std::vector<std::string> echoes;
  for (std::size_t i = 0; i < request.prompts.size(); ++i) {
    const auto& p = request.prompts[i];
    prompts.push_back(p.is_tokens ? p.token_ids : codec.encode(p.text, request.add_special_tokens));
    const std::string field = request.prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
    budgets.push_back(resolve_max_tokens(ctx, prompts.back().size(), request.common.max_tokens,
                                         kDefaultCompletionTokens, field.c_str()));
    if (!request.echo) continue;
    try {
      echoes.push_back(p.is_tokens ? codec.decode(p.token_ids, false) : p.text);
    } catch (const Error& e) {  // an id the tokenizer does not have
      throw ApiError(400, e.what(), field);
    }
  }
  state->session = std::make_unique<GenerationSession>(ctx.backend, ctx.metrics, state->meta.id);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    SamplingOptions sampling = request.common.sampling;
    sampling.max_tokens = budgets[i];
    submit_choices(*state->session, prompts[i], sampling, request.common.n);
    for (int j = 0; j < request.common.n; ++j) {
      CompletionChoice choice;
      if (request.echo) choice.echo = echoes[i];
      state->choices.push_back(std::move(choice));
    }
  }
  if (!request.common.stream) return complete_whole(ctx, *state);
  return {200, "text/event-stream", "", std::make_shared<SessionStream<CompletionState>>(std::move(state))};
}

}  // namespace deepinfer::server
