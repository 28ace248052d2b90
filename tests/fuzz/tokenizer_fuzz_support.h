// Shared by the tokenizer fuzz targets: a small byte-level BPE tokenizer.json in DeepSeek's shape
// (its pre-tokenizer regexes, added tokens with every flag), so fuzzing needs no model files.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tokenizer/byte_level.h"

namespace deepinfer::tokenizer::fuzz {

// with_strip_flags: include added tokens with lstrip/rstrip (which swallow whitespace, so decode no
// longer round-trips the text).
inline std::string mini_tokenizer_json(bool with_strip_flags) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  const std::vector<std::string> merges = {"Ġ t", "Ġ a", "i n", "Ġ Ġ", "h e", "Ġt he", "e r", "o n", "ä ¸", "ä¸ Ń",
                                           "Ġ ĠĠ", "1 2", "12 3", "ð Ł", "ðŁ ĺ"};
  for (const auto& m : merges) {
    const auto space = m.find(' ');
    const std::string joined = m.substr(0, space) + m.substr(space + 1);
    if (!vocab.contains(joined)) {
      const auto id = vocab.size();
      vocab[joined] = id;
    }
  }
  const auto next = vocab.size();
  json added = json::array();
  const auto add = [&](const std::string& content, bool special, bool normalized, json flags) {
    json token = {{"id", next + added.size()}, {"content", content}, {"single_word", false}, {"lstrip", false},
                  {"rstrip", false}, {"normalized", normalized}, {"special", special}};
    token.update(flags);
    added.push_back(token);
  };
  add("<｜begin▁of▁sentence｜>", true, false, json::object());
  add("<｜User｜>", false, true, json::object());
  add("<｜Assistant｜>", false, true, json::object());
  add("<think>", false, true, json::object());
  add("word", false, true, {{"single_word", true}});
  if (with_strip_flags) {
    add("[M]", true, false, {{"lstrip", true}});
    add("<t>", false, true, {{"rstrip", true}});
  }
  const json pre_tokenizer = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "Split"},
         {"pattern", {{"Regex", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "Split"},
         {"pattern",
          {{"Regex",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
            "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  const json root = {{"version", "1.0"},
                     {"added_tokens", added},
                     {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
                     {"pre_tokenizer", pre_tokenizer},
                     {"post_processor", {{"type", "ByteLevel"}}},
                     {"decoder", {{"type", "ByteLevel"}}},
                     {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  return root.dump();
}

}  // namespace deepinfer::tokenizer::fuzz
