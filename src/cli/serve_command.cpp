// `deepinfer serve`: the OpenAI-compatible HTTP server. Opens the model like `generate` does,
// starts the engine thread (EngineBackend) and the HTTP thread pool (HttpServer), and runs until
// SIGINT/SIGTERM. Flags follow vLLM's names where they mean the same.
#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/command.h"
#include "cli/model_options.h"
#include "common/error.h"
#include "deepinfer/llm.h"
#include "grammar/engine_constraint.h"
#include "model/deepseek_v4/paged_runner.h"
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
  sub->add_option("--device", e.device, "cpu, cuda or cuda:N")->capture_default_str();
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
  sub->add_option("--num-cache-pages", e.num_pages, "Cache pages (0: room for four max_model_len sequences)");
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

// EOS ids from generation_config.json (an id or a list), else the tokenizer's eos token.
std::vector<std::int32_t> eos_ids(const std::filesystem::path& model_dir, const tokenizer::Tokenizer& tok) {
  std::vector<std::int32_t> ids;
  if (std::ifstream in(model_dir / "generation_config.json"); in) {
    const auto j = nlohmann::json::parse(in, nullptr, false);
    const auto e = j.is_object() ? j.value("eos_token_id", nlohmann::json()) : nlohmann::json();
    for (const auto& v : e.is_array() ? e : nlohmann::json::array({e}))
      if (v.is_number_integer()) ids.push_back(v.get<std::int32_t>());
  }
  if (ids.empty() && tok.special_tokens().eos) ids.push_back(*tok.special_tokens().eos);
  DI_CHECK(!ids.empty(), "{}: neither generation_config.json nor the tokenizer names an EOS token", model_dir.string());
  return ids;
}

// The engine the way deepinfer::LLM builds it (src/model/llm.cpp), behind the engine backend.
std::unique_ptr<server::EngineBackend> open_backend(ServeOptions& o) {
  const std::filesystem::path dir(o.model.model_dir);
  auto opened = model::v4::open_paged_runner(dir, o.model.numeric_mode(), o.engine.device);
  const io::ModelConfig& model_config = *opened.config;
  auto tokenizer = std::make_shared<const tokenizer::Tokenizer>(
      tokenizer::Tokenizer::load(o.engine.tokenizer.empty() ? dir : std::filesystem::path(o.engine.tokenizer)));
  const LLMOptions& e = o.engine;
  engine::EngineConfig config;
  config.scheduler.max_num_seqs = e.max_num_seqs;
  config.scheduler.max_num_batched_tokens = e.max_num_batched_tokens;
  const std::int64_t max_pos = model_config.max_position_embeddings > 0 ? model_config.max_position_embeddings : 8192;
  config.scheduler.max_model_len =
      e.max_model_len > 0 ? e.max_model_len : static_cast<std::int32_t>(std::min<std::int64_t>(max_pos, 8192));
  const std::int32_t multiple = opened.runner->cache_spec().page_size_multiple();
  config.cache.page_size = std::max(1, (64 + multiple - 1) / multiple) * multiple;
  const std::int32_t per_seq = (config.scheduler.max_model_len + config.cache.page_size - 1) / config.cache.page_size;
  config.cache.num_pages = e.num_pages > 0 ? e.num_pages : 4 * per_seq;
  config.cache.num_snapshot_slots = std::min(e.max_num_seqs, 16);
  config.cache.enable_prefix_caching = e.enable_prefix_caching;
  config.seed = e.seed;
  config.worker_threads = e.worker_threads;
  config.eos_token_ids = eos_ids(dir, *tokenizer);
  server::EngineBackendOptions backend;
  backend.model_path = o.model.model_dir;
  backend.chat_format = chat_format_for(o.chat_format, model_config);
  backend.max_queued_requests = o.max_queued_requests;
  auto engine = std::make_unique<engine::Engine>(config, std::move(opened.runner), server::make_detokenizer(tokenizer));
  // Structured outputs: grammar constraints over the tokenizer's vocabulary; a thinking chat's
  // constraint starts after "</think>" (so_args.start_after), however many tokens spell it.
  engine->set_constraint_factory(
      grammar::make_grammar_constraint_factory(*tokenizer, engine->vocab_size(), config.eos_token_ids));
  backend.structured_outputs = true;
  backend.structured_outputs_after_thinking = true;
  return std::make_unique<server::EngineBackend>(std::move(engine), tokenizer, backend);
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
