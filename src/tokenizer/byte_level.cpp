// The byte <-> character table of GPT-2's encoder.py (bytes_to_unicode), as HF tokenizers builds it.
#include "tokenizer/byte_level.h"

#include <array>

#include "common/utf8.h"

namespace deepinfer::tokenizer {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<short, 512> char_to_byte{};  // every alphabet character is below U+0200

  Tables() {
    char_to_byte.fill(-1);
    const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t c = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      byte_to_char[b] = c;
      char_to_byte[c] = static_cast<short>(b);
    }
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return tables().byte_to_char[b]; }

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  const Tables& t = tables();
  std::string bytes;
  bytes.reserve(token.size());
  std::size_t pos = 0;
  while (pos < token.size()) {
    const char32_t c = utf8::decode_valid(token, pos);
    if (c >= t.char_to_byte.size() || t.char_to_byte[c] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(t.char_to_byte[c]));
  }
  return bytes;
}

std::string decode_byte_level_token(std::string_view token) {
  if (auto bytes = byte_level_to_bytes(token)) return std::move(*bytes);
  return std::string(token);
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char b : bytes) utf8::append_code_point(out, byte_to_char(static_cast<unsigned char>(b)));
  return out;
}

}  // namespace deepinfer::tokenizer
