// The pre-tokenizer of a byte-level BPE tokenizer.json: splits text into the words that BPE encodes
// one by one. Supports HF's Sequence, Split (regex or literal, every delimiter behaviour, invert),
// ByteLevel (prefix space, GPT-2 regex) and Digits.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/unicode_regex.h"

namespace deepinfer::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // config: the "pre_tokenizer" value of tokenizer.json (null means no pre-tokenization);
  // where: its location for error messages. Unsupported types throw naming the type.
  static PreTokenizer from_json(const nlohmann::json& config, std::string_view where);

  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Calls emit(word) for each word of text, in order, skipping empty words. Words are raw bytes
  // (byte-level mapping is implicit: BPE works in byte space). text must be valid UTF-8.
  void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;

 private:
  struct Step;
  void apply(std::size_t step, std::string_view piece, const std::function<void(std::string_view)>& emit) const;
  void add_json(const nlohmann::json& config, const std::string& where, bool& seen_byte_level);

  std::vector<Step> steps_;
};

}  // namespace deepinfer::tokenizer
