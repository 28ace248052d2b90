// `deepinfer tokenize` and `deepinfer detokenize`: JSON Lines filters over stdin/stdout for
// checking the tokenizer against other implementations and for scripting. A bad line is reported
// on stderr with its number, written as `null` so output lines stay aligned with input lines,
// and the stream goes on; the exit code is 1 if any line failed.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

using nlohmann::json;

// Runs convert on each stdin line; convert returns the output JSON or throws Error.
int for_each_line(const char* command, const std::function<std::string(const json&)>& convert) {
  std::string line;
  std::string out;
  std::size_t line_number = 0;
  std::size_t failures = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    try {
      json value;
      try {
        value = json::parse(line);
      } catch (const json::exception& e) {
        throw_error("not JSON: {}", e.what());
      }
      out = convert(value);
    } catch (const Error& e) {
      ++failures;
      std::fflush(stdout);
      std::fprintf(stderr, "deepinfer %s: line %zu: %s\n", command, line_number, e.what());
      out = "null";
    }
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  if (failures > 0) {
    std::fprintf(stderr, "deepinfer %s: %zu of %zu lines failed\n", command, failures, line_number);
    return 1;
  }
  return 0;
}

std::string type_name(const json& value) { return value.type_name(); }

}  // namespace

void register_tokenize(CLI::App& app) {
  struct Options {
    std::string tokenizer;
    bool add_special_tokens = false;
    bool split_special_tokens = false;
    bool skip_special_tokens = false;
  };
  auto options = std::make_shared<Options>();

  auto* tokenize = app.add_subcommand(
      "tokenize", "Encode text: stdin has one JSON string per line; stdout gets one JSON array of token ids per line");
  tokenize->add_option("--tokenizer", options->tokenizer, "tokenizer.json or a model directory holding it")->required();
  tokenize->add_flag("--add-special-tokens", options->add_special_tokens,
                     "add BOS/EOS as tokenizer_config.json (or the post_processor) says");
  tokenize->add_flag("--split-special-tokens", options->split_special_tokens,
                     "encode the text of special tokens as plain text (for untrusted input)");
  set_handler(tokenize, [options] {
    const auto tok = tokenizer::Tokenizer::load(options->tokenizer);
    const tokenizer::EncodeOptions encode_options{.add_special_tokens = options->add_special_tokens,
                                                  .split_special_tokens = options->split_special_tokens};
    std::vector<tokenizer::TokenId> ids;
    return for_each_line("tokenize", [&](const json& value) {
      DI_CHECK(value.is_string(), "expected a JSON string, got {}", type_name(value));
      ids.clear();
      tok.encode_into(value.get_ref<const std::string&>(), encode_options, ids);
      return json(ids).dump();
    });
  });

  auto* detokenize = app.add_subcommand(
      "detokenize", "Decode ids: stdin has one JSON array of token ids per line; stdout gets one JSON string per line");
  detokenize->add_option("--tokenizer", options->tokenizer, "tokenizer.json or a model directory holding it")
      ->required();
  detokenize->add_flag("--skip-special-tokens", options->skip_special_tokens, "leave out special tokens");
  set_handler(detokenize, [options] {
    const auto tok = tokenizer::Tokenizer::load(options->tokenizer);
    std::vector<tokenizer::TokenId> ids;
    return for_each_line("detokenize", [&](const json& value) {
      DI_CHECK(value.is_array(), "expected a JSON array of token ids, got {}", type_name(value));
      ids.clear();
      for (std::size_t i = 0; i < value.size(); ++i) {
        const json& id = value[i];
        DI_CHECK(id.is_number_integer(), "element {}: expected an integer token id, got {}", i, id.dump());
        const auto n = id.get<std::int64_t>();
        DI_CHECK(n >= 0 && n < static_cast<std::int64_t>(tok.vocab_size()) &&
                     tok.is_valid_id(static_cast<tokenizer::TokenId>(n)),
                 "element {}: token id {} is not in the vocabulary (size {})", i, n, tok.vocab_size());
        ids.push_back(static_cast<tokenizer::TokenId>(n));
      }
      return json(tok.decode(ids, options->skip_special_tokens)).dump();
    });
  });
}

}  // namespace deepinfer::cli
