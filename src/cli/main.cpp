// The `deepinfer` binary: parses the command line and runs one subcommand.
#include <cstdio>
#include <exception>
#include <map>

#include "cli/command.h"
#include "common/error.h"

namespace deepinfer::cli {
namespace {

std::map<CLI::App*, std::function<int()>>& handlers() {
  static std::map<CLI::App*, std::function<int()>> table;
  return table;
}

}  // namespace

void set_handler(CLI::App* subcommand, std::function<int()> run) { handlers()[subcommand] = std::move(run); }

}  // namespace deepinfer::cli

int main(int argc, char** argv) {
  using namespace deepinfer;
  CLI::App app{"deepinfer: inference engine for the DeepSeek-V4 model family", "deepinfer"};
  app.require_subcommand(1);
  cli::register_version(app);
  cli::register_tokenize(app);
  cli::register_inspect(app);
  cli::register_make_tiny(app);
  cli::register_eval_logits(app);
  cli::register_perplexity(app);
  cli::register_generate(app);
#ifdef DEEPINFER_HAVE_SERVER
  cli::register_serve(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands()) {
      const auto it = cli::handlers().find(sub);
      if (it != cli::handlers().end()) return it->second();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepinfer: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
