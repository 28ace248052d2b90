// The OpenAI endpoints as plain functions from a request body to a reply, independent of the
// HTTP library: http_server.cpp routes to them, unit tests call them directly.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/generation_backend.h"
#include "server/generation_session.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "server/server_config.h"

namespace deepinfer::server {

struct EndpointContext {
  GenerationBackend& backend;
  ServerMetrics& metrics;
  const ServerConfig& config;
  const std::atomic<bool>& stopping;  // set when the server shuts down
  // Per request (the HTTP layer fills it in a copy): true once the client closed its connection,
  // so a non-streamed request stops waiting and frees its pages. Unset: never.
  std::function<bool()> client_gone = nullptr;
};

// A streamed response body (server-sent events). The HTTP layer calls next() until it returns
// true, writing what it appended after each call; cancel() when the client is gone.
class EventStream {
 public:
  virtual ~EventStream() = default;
  // Waits up to `timeout` for progress and appends SSE bytes to `out`; true once the stream is
  // complete (its last bytes, `data: [DONE]`, appended).
  virtual bool next(std::string& out, std::chrono::milliseconds timeout) = 0;
  virtual void cancel() = 0;
};

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::shared_ptr<EventStream> stream;  // set for streamed responses; body is then empty
};

// Each throws ApiError for a request it rejects.
Reply handle_completions(const EndpointContext& ctx, std::string_view body);
Reply handle_chat_completions(const EndpointContext& ctx, std::string_view body);
Reply handle_tokenize(const EndpointContext& ctx, std::string_view body);
Reply handle_detokenize(const EndpointContext& ctx, std::string_view body);
Reply handle_models(const EndpointContext& ctx);
Reply handle_model(const EndpointContext& ctx, const std::string& name);

// Shared by the generation endpoints.
// The name to echo in responses; 404 if the request names a model this server does not serve.
std::string resolve_model_name(const EndpointContext& ctx, const std::string& requested);
// The generation budget of a prompt: the requested max_tokens (or the default when unset, capped
// by the context left), with 400s for a prompt or total over max_model_len.
int resolve_max_tokens(const EndpointContext& ctx, std::size_t prompt_tokens, std::optional<int> requested,
                       std::optional<int> default_tokens, const char* prompt_field);
// The chat encoding's prompt; its errors become 400s.
EncodedChat encode_chat_request(const EndpointContext& ctx, const nlohmann::ordered_json& request);
// Submits `n` choices of one prompt; turns backend refusals into 503 / 400.
void submit_choices(GenerationSession& session, const std::vector<int32_t>& prompt, const SamplingOptions& sampling,
                    int n);
// Waits for every choice of a non-streamed request, calling `consume` on each output; a 503 if
// the server begins stopping first. A client that went away ends the wait with an error (the
// session then aborts its sequences); nobody reads the reply.
void collect_outputs(const EndpointContext& ctx, GenerationSession& session,
                     const std::function<void(ChoiceOutput&)>& consume);
std::string reply_json(const nlohmann::json& value);
// Puts the JSON schema of a structured-output constraint back in the client's key order (as
// text, from the body parsed with order kept): properties are generated in declared order.
void keep_schema_order(nlohmann::json& constraint, std::string_view body);
// A stream chunk as an SSE event, with the usage field stream_options asks for (null, or the
// running totals with continuous_usage_stats).
std::string chunk_event(nlohmann::json chunk, const StreamOptions& options, const std::function<UsageCounts()>& usage);
// The end of a stream: the usage chunk when include_usage is set, then `data: [DONE]`.
std::string stream_tail(const ResponseMeta& meta, const char* object, const StreamOptions& options,
                        const UsageCounts& usage);

// A streamed generation. State owns the session (`session`) and renders the events:
// stream_opening() once, stream_output(item) per output, stream_closing() after the last.
template <typename State>
class SessionStream : public EventStream {
 public:
  explicit SessionStream(std::unique_ptr<State> state) : state_(std::move(state)) {}

  bool next(std::string& out, std::chrono::milliseconds timeout) override {
    if (!started_) {
      started_ = true;
      out += state_->stream_opening();
    }
    for (auto& item : state_->session->wait(timeout)) out += state_->stream_output(item);
    if (!state_->session->all_finished()) return false;
    out += state_->stream_closing();
    return true;
  }

  void cancel() override { state_->session->abort_unfinished(); }

 private:
  std::unique_ptr<State> state_;
  bool started_ = false;
};

}  // namespace deepinfer::server
