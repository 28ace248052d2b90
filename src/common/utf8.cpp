// UTF-8 scanning per Unicode 15 table 3-7 (well-formed byte sequences).
#include "common/utf8.h"

namespace deepinfer::utf8 {
namespace {

// For a lead byte: the sequence length and the allowed range of the second byte (the other
// continuation bytes are always 80..BF). length 0 marks a byte that cannot start a sequence.
struct LeadInfo {
  unsigned char length;
  unsigned char second_lo;
  unsigned char second_hi;
};

constexpr LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Sequence scan(std::string_view text, std::size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  const LeadInfo info = lead_info(lead);
  if (info.length == 1) return {SequenceStatus::kValid, 1};
  if (info.length == 0) return {SequenceStatus::kInvalid, 1};
  for (std::size_t i = 1; i < info.length; ++i) {
    if (pos + i >= text.size()) return {SequenceStatus::kTruncated, i};
    const auto b = static_cast<unsigned char>(text[pos + i]);
    const unsigned char lo = (i == 1) ? info.second_lo : 0x80;
    const unsigned char hi = (i == 1) ? info.second_hi : 0xBF;
    if (b < lo || b > hi) return {SequenceStatus::kInvalid, i};
  }
  return {SequenceStatus::kValid, info.length};
}

bool is_valid(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    // ASCII runs dominate real text: skip them eight bytes at a time.
    while (pos + 8 <= text.size()) {
      unsigned long long word = 0;
      for (int i = 0; i < 8; ++i) word |= static_cast<unsigned long long>(static_cast<unsigned char>(text[pos + i])) << (8 * i);
      if (word & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    const Sequence seq = scan(text, pos);
    if (seq.status != SequenceStatus::kValid) return false;
    pos += seq.length;
  }
  return true;
}

void append_lossy(std::string& out, std::string_view text) {
  std::size_t pos = 0;
  std::size_t run_start = 0;  // start of the current run of valid bytes, copied in one go
  while (pos < text.size()) {
    const Sequence seq = scan(text, pos);
    if (seq.status == SequenceStatus::kValid) {
      pos += seq.length;
      continue;
    }
    out.append(text.substr(run_start, pos - run_start));
    out.append(kReplacement);
    pos += seq.length;
    run_start = pos;
  }
  out.append(text.substr(run_start));
}

std::string to_valid(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  append_lossy(out, text);
  return out;
}

std::size_t incomplete_tail_length(std::string_view text) {
  // A completable tail is at most 3 bytes long and starts at a lead byte.
  const std::size_t n = text.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const std::size_t pos = n - back;
    const auto b = static_cast<unsigned char>(text[pos]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: the lead is further back
    const Sequence seq = scan(text, pos);
    return seq.status == SequenceStatus::kTruncated ? back : 0;
  }
  return 0;
}

char32_t decode_valid(std::string_view text, std::size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const auto cont = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i]) & 0x3F); };
  char32_t cp = 0;
  if (b0 < 0xE0) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    pos += 2;
  } else if (b0 < 0xF0) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    pos += 3;
  } else {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    pos += 4;
  }
  return cp;
}

void append_code_point(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace deepinfer::utf8
