// Internal: the state behind Tokenizer, shared by tokenizer.cpp (encode/decode) and
// tokenizer_loader.cpp (building it from tokenizer.json).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

struct Tokenizer::Impl {
  BpeModel model;
  PreTokenizer pre_tokenizer;
  AddedVocabulary added;

  // Per id, over the whole id range: the bytes it decodes to (in one arena) and flags. Token
  // strings: an added token's content first (as HF's id_to_token), else the model's.
  std::string bytes_arena;
  std::vector<std::uint32_t> bytes_offsets;  // size vocab_size + 1
  std::vector<std::uint8_t> id_flags;        // kValidId | kSpecialId
  StringIdMap added_to_id;  // added token content -> id

  std::string_view token_string(TokenId id) const;
  std::optional<TokenId> token_to_id(std::string_view token) const;

  SpecialTokens specials;
  std::vector<TokenId> prefix;  // added by add_special_tokens
  std::vector<TokenId> suffix;

  static constexpr std::uint8_t kValidId = 1;
  static constexpr std::uint8_t kSpecialId = 2;
};

class TokenizerLoader {
 public:
  static Tokenizer build(std::string_view tokenizer_json, std::string_view config_json, std::string_view source);

 private:
  static Tokenizer build_checked(std::string_view tokenizer_json, std::string_view config_json,
                                 const std::string& source);
};

}  // namespace deepinfer::tokenizer
