// A compiled PCRE2 regular expression over UTF-8 text with Unicode character classes (UTF + UCP),
// JIT-compiled when the platform allows, iterated the way HF tokenizers' Oniguruma binding does.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

struct MatchSpan {
  std::size_t start;
  std::size_t end;
};

class UnicodeRegex {
 public:
  struct Options {
    bool literal = false;   // match the pattern text verbatim (HF's Split with a String pattern)
    bool anchored = false;  // match only at the start offset (for matches_at)
  };
  // `what` names the pattern in error messages (e.g. "pre_tokenizer.pretokenizers[2].pattern").
  UnicodeRegex(std::string_view pattern, std::string_view what, Options options);
  UnicodeRegex(std::string_view pattern, std::string_view what) : UnicodeRegex(pattern, what, Options{}) {}
  ~UnicodeRegex();
  UnicodeRegex(UnicodeRegex&&) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&&) noexcept;
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // All matches in text, in order, replacing out's contents. An empty match right after a
  // non-empty one is dropped and the search moves on by one character, exactly like the onig
  // crate's find_iter. text must be valid UTF-8 (it is not re-checked).
  void find_all(std::string_view text, std::vector<MatchSpan>& out) const;

  // Whether the pattern matches starting at text[pos]; needs Options::anchored.
  bool matches_at(std::string_view text, std::size_t pos) const;

 private:
  struct Compiled;
  std::string pattern_;
  std::string what_;
  std::unique_ptr<Compiled> compiled_;
};

// The pattern with its Unicode classes widened to Oniguruma's (what UnicodeRegex compiles).
std::string to_oniguruma_classes(std::string_view pattern);

}  // namespace deepinfer::tokenizer
