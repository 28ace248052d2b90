// `deepinfer serve`: the OpenAI-compatible HTTP server. Opens the model like `generate` does,
// starts the engine thread (EngineBackend) and the HTTP thread pool (HttpServer), and runs until
// SIGINT/SIGTERM. Flags follow vLLM's names where they mean the same.
#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/command.h"
#include "cli/model_options.h"
#include "common/error.h"
#include "deepinfer/llm.h"
#include "model/open_engine.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

struct ServeOptions {
  ModelOptions model;
  LLMOptions engine;  // the engine knobs `generate` and the offline API have, under the same names
  std::string chat_format = "auto";
  std::string default_chat_template_kwargs;
  server::ServerConfig server;
  int max_queued_requests = 10000;
  int http_timeout_s = 30;
};

void add_flags(CLI::App* sub, ServeOptions& o) {
  o.model.add_to(sub);
  auto& e = o.engine;
  sub->add_option("--tokenizer", e.tokenizer, "tokenizer.json or its directory (default: the model directory)");
  add_executor_flags(sub, e);
  sub->add_option("--host", o.server.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", o.server.port, "Port (0: any free port)")->capture_default_str();
  sub->add_option("--api-key", o.server.api_key, "Require 'Authorization: Bearer KEY' on the API");
  sub->add_option("--served-model-name", o.server.served_model_names,
                  "Model name(s) clients use; the first is reported (default: the model directory)");
  sub->add_option("--max-model-len", e.max_model_len,
                  "Prompt + output tokens per sequence (0: min(max_position_embeddings, 8192))");
  sub->add_option("--max-num-seqs", e.max_num_seqs, "Sequences running at once")->capture_default_str();
  sub->add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "Tokens per engine step")
      ->capture_default_str();
  sub->add_option("--num-cache-pages", e.num_pages,
                  "Cache pages (0: planned from --gpu-memory-utilization on a GPU, four max_model_len sequences on "
                  "the CPU)");
  sub->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", e.enable_prefix_caching,
                "Reuse the cache pages of shared prompt prefixes (default on)");
  sub->add_option("--seed", e.seed, "Seeds the seeds of requests that bring none")->capture_default_str();
  sub->add_option("--worker-threads", e.worker_threads, "Engine threads for per-sequence host work")
      ->capture_default_str();
  sub->add_option("--max-queued-requests", o.max_queued_requests,
                  "Sequences that may wait beyond --max-num-seqs; more get 503")->capture_default_str();
  sub->add_option("--chat-format", o.chat_format, "auto (from the model), deepseek_v3, deepseek_v4 or deepseek_v41")
      ->capture_default_str();
  sub->add_option("--default-chat-template-kwargs", o.default_chat_template_kwargs,
                  "JSON object of chat_template_kwargs defaults, e.g. '{\"thinking\": false}'");
  sub->add_option("--http-threads", o.server.http_threads, "HTTP worker threads (one per open connection)")
      ->capture_default_str();
  sub->add_option("--timeout-keep-alive", o.server.keep_alive_timeout_s, "Seconds an idle connection is kept")
      ->capture_default_str();
  sub->add_option("--http-timeout", o.http_timeout_s,
                  "Seconds a client may stall while sending its request or reading the response")
      ->capture_default_str();
  sub->add_option("--max-request-body-bytes", o.server.max_body_bytes, "Larger request bodies get 413")
      ->capture_default_str();
}

encoding::ChatFormat chat_format_for(const std::string& flag, const io::ModelConfig& config) {
  if (flag != "auto") return encoding::parse_chat_format(flag);
  return config.arch == io::ModelArch::kDeepseekV41 ? encoding::ChatFormat::kDeepSeekV41
                                                    : encoding::ChatFormat::kDeepSeekV4;
}

nlohmann::json parse_kwargs(const std::string& text) {
  if (text.empty()) return nlohmann::json::object();
  auto value = nlohmann::json::parse(text, nullptr, false);
  DI_CHECK(!value.is_discarded() && value.is_object(),
           "--default-chat-template-kwargs: expected a JSON object, got '{}'", text);
  return value;
}

// The engine the way deepinfer::LLM builds it (open_engine), behind the engine backend; serve
// also needs a tokenizer and EOS ids.
std::unique_ptr<server::EngineBackend> open_backend(ServeOptions& o) {
  if (!o.model.mode.empty()) o.engine.mode = o.model.mode;
  OpenedEngine engine = open_engine(std::filesystem::path(o.model.model_dir), o.engine,
                                    {.require_tokenizer = true, .require_eos = true});
  server::EngineBackendOptions backend;
  backend.model_path = o.model.model_dir;
  backend.chat_format = chat_format_for(o.chat_format, *engine.model_config);
  backend.max_queued_requests = o.max_queued_requests;
  backend.structured_outputs = engine.structured_outputs;
  backend.structured_outputs_after_thinking = engine.structured_outputs;
  return std::make_unique<server::EngineBackend>(std::move(engine.engine), std::move(engine.tokenizer), backend);
}

// Serves until SIGINT or SIGTERM, which a dedicated thread waits for (blocked in every other
// thread, so neither the engine nor an HTTP worker is interrupted).
int run_serve(ServeOptions& o) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  o.server.chat_defaults.chat_template_kwargs = parse_kwargs(o.default_chat_template_kwargs);
  o.server.read_timeout_s = o.http_timeout_s;
  o.server.write_timeout_s = o.http_timeout_s;
  if (o.server.served_model_names.empty()) o.server.served_model_names.push_back(o.model.model_dir);
  auto backend = open_backend(o);
  server::HttpServer http(o.server, *backend);
  const int port = http.bind();
  fmt::print("deepinfer serve: {} (max_model_len {}) listening on http://{}:{}\n",
             o.server.served_model_names.front(), backend->model_info().max_model_len, o.server.host, port);
  std::fflush(stdout);

  std::thread waiter([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    http.stop();
  });
  http.serve();
  pthread_kill(waiter.native_handle(), SIGTERM);  // releases the waiter if serve() ended by itself
  waiter.join();
  return 0;
}

}  // namespace

void register_serve(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, ...)");
  add_flags(sub, *options);
  set_handler(sub, [options] { return run_serve(*options); });
}

}  // namespace deepinfer::cli
