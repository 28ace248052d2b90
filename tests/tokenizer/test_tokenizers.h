// Test helpers for tokenizer users: the real DeepSeek tokenizer (skipping when it is absent),
// patched copies of it, small synthetic tokenizers, and the gzip'd JSON Lines fixtures.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer::testing {

// DEEPINFER_TOKENIZER_DIR if set, else <source>/../shared/models/deepseek-tokenizer, if it exists.
std::optional<std::filesystem::path> deepseek_tokenizer_dir();

// Loaded once per process; call after DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER().
const Tokenizer& deepseek_tokenizer();
// The parsed tokenizer.json of the DeepSeek tokenizer (for patching).
const nlohmann::json& deepseek_tokenizer_json();

// A copy of the DeepSeek tokenizer.json with a patch applied: top-level keys replace, keys of
// "model" update the model, "added_tokens" are appended (tools/make_tokenizer_fixtures.py).
Tokenizer patched_deepseek_tokenizer(const nlohmann::json& patch);

// A small byte-level BPE tokenizer.json: the 256 byte tokens, then `merges` ("a b" in byte-level
// spelling; their concatenations join the vocabulary), with the given pre_tokenizer and
// added_tokens (JSON). Good for exact, hand-checkable behaviour.
std::string tiny_tokenizer_json(const std::vector<std::string>& merges, const nlohmann::json& pre_tokenizer,
                                const nlohmann::json& added_tokens = nlohmann::json::array());

// Lines of tests/tokenizer/fixtures/<name> (gzip'd JSON Lines), parsed.
std::vector<nlohmann::json> read_fixture(const std::string& name);

// Raw bytes of a hex string.
std::string from_hex(const std::string& hex);

}  // namespace deepinfer::tokenizer::testing

#define DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER()                                                            \
  do {                                                                                                    \
    if (!::deepinfer::tokenizer::testing::deepseek_tokenizer_dir())                                       \
      GTEST_SKIP() << "DeepSeek tokenizer not found (set DEEPINFER_TOKENIZER_DIR or put shared/ beside " \
                      "the checkout)";                                                                    \
  } while (false)
