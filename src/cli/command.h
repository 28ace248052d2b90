// Each `deepinfer` subcommand lives in its own file and registers itself on the CLI11 app through
// one function declared here; main.cpp calls them all. A command returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace deepinfer::cli {

// Sets `run` as the handler of `subcommand`: when chosen, main() calls it and exits with its
// result; a deepinfer::Error it throws becomes one line on stderr and exit code 1.
void set_handler(CLI::App* subcommand, std::function<int()> run);

void register_version(CLI::App& app);
// `tokenize` and `detokenize` (tokenize_command.cpp).
void register_tokenize(CLI::App& app);
// `inspect` (inspect_command.cpp) and `make-tiny` (make_tiny_command.cpp).
void register_inspect(CLI::App& app);
void register_make_tiny(CLI::App& app);
// `eval-logits` (eval_logits_command.cpp) and `perplexity` (perplexity_command.cpp).
void register_eval_logits(CLI::App& app);
void register_perplexity(CLI::App& app);
// `generate` (generate_command.cpp): offline generation through deepinfer::LLM.
void register_generate(CLI::App& app);
// `serve` (serve_command.cpp): the OpenAI-compatible HTTP server; built where cpp-httplib is.
void register_serve(CLI::App& app);

}  // namespace deepinfer::cli
