// Code point sets and the UTF-8 range splitting that turns them into byte-range sequences.
#include "grammar/unicode.h"

#include <algorithm>

namespace deepinfer::grammar {

CodepointSet CodepointSet::range(std::uint32_t lo, std::uint32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

CodepointSet CodepointSet::all() {
  CodepointSet s;
  s.add(0, 0xD7FF);
  s.add(0xE000, kMaxCodepoint);
  return s;
}

void CodepointSet::add(std::uint32_t lo, std::uint32_t hi) {
  if (lo > hi) return;
  ranges_.push_back({lo, std::min(hi, kMaxCodepoint)});
  normalize();
}

void CodepointSet::add(const CodepointSet& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalize();
}

void CodepointSet::normalize() {
  std::sort(ranges_.begin(), ranges_.end(),
            [](const CodepointRange& a, const CodepointRange& b) { return a.lo < b.lo; });
  std::vector<CodepointRange> out;
  for (const auto& r : ranges_) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  ranges_ = std::move(out);
}

CodepointSet CodepointSet::complement() const { return all().minus(*this); }

CodepointSet CodepointSet::minus(const CodepointSet& other) const {
  CodepointSet out;
  for (auto r : ranges_) {
    std::uint32_t lo = r.lo;
    for (const auto& o : other.ranges_) {
      if (o.hi < lo || o.lo > r.hi) continue;
      if (o.lo > lo) out.ranges_.push_back({lo, o.lo - 1});
      if (o.hi >= r.hi) {
        lo = r.hi + 1;
        break;
      }
      lo = o.hi + 1;
    }
    if (lo <= r.hi) out.ranges_.push_back({lo, r.hi});
  }
  out.normalize();
  return out;
}

bool CodepointSet::contains(std::uint32_t cp) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), cp,
                             [](std::uint32_t v, const CodepointRange& r) { return v < r.lo; });
  return it != ranges_.begin() && std::prev(it)->hi >= cp;
}

bool decode_utf8(std::string_view text, std::size_t& pos, std::uint32_t& cp) {
  auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(text[i]); };
  if (pos >= text.size()) return false;
  std::uint8_t b0 = byte(pos);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || pos + len > text.size()) return false;
  cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int i = 1; i < len; ++i) {
    std::uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr std::uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLen[len] || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  pos += len;
  return true;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Emits byte-range sequences for [lo, hi], where both ends encode to the same length. The range
// is split until every byte position varies independently (the classic utf8-ranges split).
void emit_same_length(Grammar& g, std::uint32_t lo, std::uint32_t hi, std::vector<ExprId>& out) {
  std::string a;
  std::string b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  int n = static_cast<int>(a.size());
  for (int i = 1; i < n; ++i) {
    std::uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        emit_same_length(g, lo, lo | m, out);
        emit_same_length(g, (lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        emit_same_length(g, lo, (hi & ~m) - 1, out);
        emit_same_length(g, hi & ~m, hi, out);
        return;
      }
    }
  }
  std::vector<ExprId> parts;
  for (int i = 0; i < n; ++i) {
    ByteSet s;
    s.set_range(static_cast<std::uint8_t>(a[i]), static_cast<std::uint8_t>(b[i]));
    parts.push_back(g.bytes(s));
  }
  out.push_back(g.seq(std::move(parts)));
}

}  // namespace

ExprId codepoints_to_expr(Grammar& g, const CodepointSet& set) {
  CodepointSet scalars = set.minus(CodepointSet::range(0xD800, 0xDFFF));
  std::vector<ExprId> options;
  ByteSet ascii;
  static constexpr std::uint32_t kLenMax[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
  for (const auto& r : scalars.ranges()) {
    std::uint32_t lo = r.lo;
    for (int len = 0; len < 4 && lo <= r.hi; ++len) {
      if (lo > kLenMax[len]) continue;
      std::uint32_t hi = std::min(r.hi, kLenMax[len]);
      if (len == 0) {
        ascii.set_range(static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi));
      } else {
        emit_same_length(g, lo, hi, options);
      }
      lo = hi + 1;
    }
  }
  if (!ascii.empty()) options.insert(options.begin(), g.bytes(ascii));
  if (options.empty()) {
    ByteSet none;
    return g.bytes(none);  // matches nothing
  }
  return g.alt(std::move(options));
}

}  // namespace deepinfer::grammar
