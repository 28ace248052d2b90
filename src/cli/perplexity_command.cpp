// `deepinfer perplexity`: perplexity of the model on a text file. The text is tokenised, cut into
// consecutive windows of --context tokens that each start with BOS, and every text token is scored
// by the log-probability the model gives it after the window's earlier tokens:
// ppl = exp(mean over scored tokens of -log p(token | prefix)).
#include <cmath>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "cli/model_options.h"
#include "common/error.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/executor.h"
#include "ops/backend.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DI_CHECK(in.good(), "--input {}: cannot open the file", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// -log softmax(row)[target], in double.
double token_nll(const float* row, std::int64_t vocab, std::int32_t target) {
  const float mx = *std::max_element(row, row + vocab);
  double sum = 0;
  for (std::int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
  return std::log(sum) + mx - row[target];
}

struct Totals {
  double nll = 0;
  std::int64_t tokens = 0;
};

// Scores window = [prefix..., tokens...] where every position but the last predicts the next one.
void score_window(model::SequenceModel& m, ops::Backend& be, const std::vector<std::int32_t>& window, int chunk,
                  Totals& totals) {
  const std::int64_t vocab = m.config().vocab_size;
  auto seq = m.new_sequence();
  for (std::size_t p = 0; p + 1 < window.size(); p += static_cast<std::size_t>(chunk)) {
    const std::size_t n = std::min(static_cast<std::size_t>(chunk), window.size() - 1 - p);
    Tensor logits = be.empty(Shape{static_cast<std::int64_t>(n), vocab}, DType::kF32);
    const model::v4::Model::Chunk c{seq.get(), std::span(window).subspan(p, n), static_cast<std::int32_t>(n)};
    m.forward({&c, 1}, logits);
    Tensor host = Tensor::empty(logits.shape(), DType::kF32);
    be.copy(logits, host);
    for (std::size_t i = 0; i < n; ++i) {
      totals.nll += token_nll(host.data<float>() + i * static_cast<std::size_t>(vocab), vocab, window[p + i + 1]);
      ++totals.tokens;
    }
  }
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto* sub = app.add_subcommand("perplexity", "Perplexity of the model on a text file");
  struct Options {
    ModelOptions model;
    std::string input;
    std::string tokenizer;
    int context = 512;
    int chunk = 256;
    std::int64_t max_tokens = 0;
    std::string device = "cpu";
  };
  auto opts = std::make_shared<Options>();
  opts->model.add_to(sub);
  sub->add_option("--input", opts->input, "UTF-8 text file to score")->required();
  sub->add_option("--tokenizer", opts->tokenizer, "tokenizer.json or its directory (default: the model directory)");
  sub->add_option("--context", opts->context, "Tokens per window, BOS included")->check(CLI::Range(2, 1 << 20));
  sub->add_option("--chunk", opts->chunk, "Tokens per forward pass")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--max-tokens", opts->max_tokens, "Score at most this many text tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--device", opts->device, "Backend: cpu, cuda or cuda:N")->capture_default_str();
  set_handler(sub, [opts] {
    const auto tok = tokenizer::Tokenizer::load(opts->tokenizer.empty() ? opts->model.model_dir : opts->tokenizer);
    std::vector<std::int32_t> ids;
    for (const auto id : tok.encode(read_file(opts->input), false)) ids.push_back(static_cast<std::int32_t>(id));
    if (opts->max_tokens > 0 && static_cast<std::int64_t>(ids.size()) > opts->max_tokens)
      ids.resize(static_cast<std::size_t>(opts->max_tokens));
    DI_CHECK(!ids.empty(), "--input {}: the text has no tokens", opts->input);
    const auto bos = tok.special_tokens().bos;
    DI_CHECK(bos.has_value(), "the tokenizer names no BOS token; perplexity windows start with BOS");

    auto backend = model::make_backend(opts->device);
    auto loaded = model::load_checkpoint(opts->model.model_dir, opts->model.numeric_mode(), *backend);
    Totals totals;
    std::int64_t windows = 0;
    const auto per_window = static_cast<std::size_t>(opts->context - 1);
    for (std::size_t start = 0; start < ids.size(); start += per_window, ++windows) {
      std::vector<std::int32_t> window = {static_cast<std::int32_t>(*bos)};
      const std::size_t end = std::min(ids.size(), start + per_window);
      window.insert(window.end(), ids.begin() + static_cast<std::ptrdiff_t>(start),
                    ids.begin() + static_cast<std::ptrdiff_t>(end));
      score_window(*loaded.model, *backend, window, opts->chunk, totals);
    }
    const double mean = totals.nll / static_cast<double>(totals.tokens);
    fmt::print("perplexity {:.4f} over {} tokens in {} windows of <= {} (mean nll {:.6f}, mode {})\n", std::exp(mean),
               totals.tokens, windows, opts->context, mean,
               model::v4::numeric_mode_name(loaded.model->numerics().mode));
    return 0;
  });
}

}  // namespace deepinfer::cli
