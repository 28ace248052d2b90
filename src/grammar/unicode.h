// Unicode code point sets and their lowering to UTF-8 byte-level grammar expressions, shared by the
// regex, EBNF and JSON-schema front ends.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

inline constexpr std::uint32_t kMaxCodepoint = 0x10FFFF;

struct CodepointRange {
  std::uint32_t lo;
  std::uint32_t hi;  // inclusive
};

// A normalized (sorted, disjoint, non-adjacent) set of code points.
class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet single(std::uint32_t cp) { return range(cp, cp); }
  static CodepointSet range(std::uint32_t lo, std::uint32_t hi);
  static CodepointSet all();  // every scalar value (surrogates excluded)

  void add(std::uint32_t lo, std::uint32_t hi);
  void add(const CodepointSet& other);
  CodepointSet complement() const;  // within all()
  CodepointSet minus(const CodepointSet& other) const;
  bool contains(std::uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<CodepointRange>& ranges() const { return ranges_; }

 private:
  void normalize();
  std::vector<CodepointRange> ranges_;
};

// Decodes one UTF-8 scalar at text[pos], advancing pos. Returns false on malformed input.
bool decode_utf8(std::string_view text, std::size_t& pos, std::uint32_t& cp);
void append_utf8(std::string& out, std::uint32_t cp);

// An expression matching exactly the UTF-8 encodings of the code points in set.
ExprId codepoints_to_expr(Grammar& g, const CodepointSet& set);

}  // namespace deepinfer::grammar
