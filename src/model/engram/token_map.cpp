// The compressed token map of V4.1 Engram. Unicode normalisation comes from utf8proc; the
// remaining steps follow HF tokenizers' normalizers one by one (see token_map.h).
#include "model/engram/token_map.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <unordered_map>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model::engram {
namespace {

std::vector<utf8proc_int32_t> utf8proc_codepoints(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) throw_error("engram token map: cannot normalise token text ({})", utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  std::vector<utf8proc_int32_t> cps;
  for (utf8proc_ssize_t i = 0; i < n;) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(out + i, n - i, &cp);
    if (len <= 0) throw_error("engram token map: utf8proc produced invalid UTF-8");
    cps.push_back(cp);
    i += len;
  }
  return cps;
}

std::string encode_utf8(const std::vector<utf8proc_int32_t>& cps) {
  std::string out;
  out.reserve(cps.size() * 2);
  utf8proc_uint8_t buf[4];
  for (const auto cp : cps) {
    const utf8proc_ssize_t len = utf8proc_encode_char(cp, buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(len));
  }
  return out;
}

bool is_mark(utf8proc_int32_t cp) {
  const auto cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

// Rust's char::is_whitespace (the Unicode White_Space property), which tokenizers' Strip uses.
bool is_white_space(utf8proc_int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

constexpr utf8proc_int32_t kSentinel = 0xE000;  // HF's private-use stand-in for a lone space

}  // namespace

std::string normalize_token_text(std::string_view utf8) {
  // NFKC, then NFD of the result (tokenizers runs them as two normalizers).
  const std::string nfkc = encode_utf8(utf8proc_codepoints(utf8, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  const auto nfd = utf8proc_codepoints(nfkc, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  // StripAccents (drops General_Category Mark), Lowercase, then [ \t\r\n]+ -> " ".
  std::vector<utf8proc_int32_t> cps;
  cps.reserve(nfd.size());
  for (const auto cp : nfd) {
    if (is_mark(cp)) continue;
    const auto lower = utf8proc_tolower(cp);
    const bool collapsible = lower == ' ' || lower == '\t' || lower == '\r' || lower == '\n';
    if (collapsible) {
      if (!cps.empty() && cps.back() == ' ') continue;
      cps.push_back(' ');
    } else {
      cps.push_back(lower);
    }
  }
  // A text that is exactly one space becomes the sentinel (so Strip keeps it); Strip; the
  // sentinel (and any U+E000 the token had) becomes a space.
  if (cps.size() == 1 && cps[0] == ' ') cps[0] = kSentinel;
  std::size_t begin = 0, end = cps.size();
  while (begin < end && is_white_space(cps[begin])) ++begin;
  while (end > begin && is_white_space(cps[end - 1])) --end;
  std::vector<utf8proc_int32_t> stripped(cps.begin() + static_cast<std::ptrdiff_t>(begin),
                                         cps.begin() + static_cast<std::ptrdiff_t>(end));
  for (auto& cp : stripped)
    if (cp == kSentinel) cp = ' ';
  return encode_utf8(stripped);
}

CompressedTokenMap build_compressed_token_map(const tokenizer::Tokenizer& tokenizer) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  CompressedTokenMap map;
  const std::size_t n = tokenizer.vocab_size();
  map.ids.resize(n);
  std::unordered_map<std::string, std::int32_t> key_to_id;
  key_to_id.reserve(n);
  for (std::size_t id = 0; id < n; ++id) {
    const auto token = static_cast<tokenizer::TokenId>(id);
    // HF decodes an id that names no token to "" (it has no text to normalise).
    std::string text;
    if (tokenizer.is_valid_id(token)) text = tokenizer.decode(std::span(&token, 1), /*skip_special_tokens=*/false);
    std::string key;
    if (text.find(kReplacement) != std::string::npos) {
      key = std::string(tokenizer.token_string(token));
    } else {
      key = normalize_token_text(text);
      if (key.empty()) key = std::move(text);
    }
    const auto [it, inserted] = key_to_id.try_emplace(std::move(key), static_cast<std::int32_t>(key_to_id.size()));
    map.ids[id] = it->second;
  }
  map.size = static_cast<std::int64_t>(key_to_id.size());
  return map;
}

std::uint64_t token_map_fingerprint(const std::vector<std::int32_t>& ids) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto v : ids) {
    const auto u = static_cast<std::uint32_t>(v);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

}  // namespace deepinfer::model::engram
