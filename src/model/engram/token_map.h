// V4.1 Engram's compressed token map (MODEL_SPEC B4.7 step 1): every token id decoded alone and
// normalised (NFKC -> NFD -> strip accents -> lowercase -> whitespace collapse -> strip), tokens
// with equal keys sharing one id, exactly as HF transformers' build_compressed_token_map.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::model::engram {

struct CompressedTokenMap {
  std::vector<std::int32_t> ids;  // token id -> compressed id (len(tokenizer) entries)
  std::int64_t size = 0;          // number of distinct compressed ids
};

// The normalisation HF applies to one decoded token (tokenizers' NFKC, NFD, StripAccents,
// Lowercase, Replace([ \t\r\n]+ -> " "), a lone " " protected from Strip, Strip). Valid UTF-8 in;
// throws deepinfer::Error otherwise.
std::string normalize_token_text(std::string_view utf8);

// The map for a tokenizer: ids 0..vocab_size()-1; the key of a token is its normalised decode,
// the decode itself where that is empty, or its raw vocabulary string where the decode holds
// U+FFFD (a partial UTF-8 byte sequence). Compressed ids in order of first appearance.
CompressedTokenMap build_compressed_token_map(const tokenizer::Tokenizer& tokenizer);

// 64-bit FNV-1a over the ids as little-endian int32: a compact fingerprint for fixtures.
std::uint64_t token_map_fingerprint(const std::vector<std::int32_t>& ids);

}  // namespace deepinfer::model::engram
