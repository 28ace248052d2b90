// The tokenizer of deepinfer: loads a Hugging Face tokenizer.json of the byte-level BPE kind
// (DeepSeek's, GPT-2's, Llama 3's ...) and encodes/decodes with ids identical to HF tokenizers.
// Immutable after loading; every const method is safe to call from many threads at once.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/token.h"

namespace deepinfer {
class ThreadPool;
}

namespace deepinfer::tokenizer {

// The special tokens named by tokenizer_config.json (each resolved to an id if present).
struct SpecialTokens {
  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  std::optional<TokenId> pad;
  std::optional<TokenId> unk;
};

struct EncodeOptions {
  // Add BOS/EOS as tokenizer_config.json's add_bos_token/add_eos_token say (transformers'
  // behaviour), else as tokenizer.json's post_processor says.
  bool add_special_tokens = false;
  // Encode the text of special added tokens as ordinary text instead of as the token (HF's
  // encode_special_tokens): for untrusted input that must not inject control tokens.
  bool split_special_tokens = false;
};

class Tokenizer {
 public:
  // path: a tokenizer.json file, or a model directory holding tokenizer.json (and, optionally,
  // tokenizer_config.json beside it, read for bos/eos/pad and add_bos_token/add_eos_token).
  // Throws deepinfer::Error naming the file and field on malformed or unsupported content.
  static Tokenizer load(const std::filesystem::path& path);

  // From in-memory texts (config_json may be empty); `source` names them in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             std::string_view source = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes text. Invalid UTF-8 is first replaced by U+FFFD per maximal invalid subpart, exactly
  // like Python's bytes.decode('utf-8', errors='replace') (HF's API only takes str).
  // add_special_tokens: add BOS/EOS as tokenizer_config.json's add_bos_token/add_eos_token say
  // (transformers' behaviour), else as tokenizer.json's post_processor says.
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = false) const;
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options) const;
  // Same, appending to out (no allocation once out has capacity).
  void encode_into(std::string_view text, bool add_special_tokens, std::vector<TokenId>& out) const;
  void encode_into(std::string_view text, const EncodeOptions& options, std::vector<TokenId>& out) const;
  // Encodes every text, spread over the pool's workers (and the calling thread).
  std::vector<std::vector<TokenId>> encode_batch(std::span<const std::string> texts, bool add_special_tokens,
                                                 ThreadPool& pool) const;

  // Decodes ids to text, like HF's decode: the tokens' bytes concatenated, invalid UTF-8 replaced
  // by U+FFFD. skip_special_tokens drops the added tokens marked special. Throws on an id
  // outside the vocabulary (HF silently drops those).
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // Largest id + 1 over the model vocabulary and the added tokens.
  std::size_t vocab_size() const;
  bool is_valid_id(TokenId id) const;
  // The exact bytes id decodes to (possibly a fragment of a UTF-8 character); empty for an id
  // that names no token. For grammar matching and streaming.
  std::string_view token_bytes(TokenId id) const;
  // The token's string as in tokenizer.json (byte-level spelling for model tokens).
  std::string_view token_string(TokenId id) const;
  // Id of a token string (an added token's content or a vocabulary entry's byte-level spelling).
  std::optional<TokenId> token_to_id(std::string_view token) const;
  bool is_special(TokenId id) const;
  const std::vector<AddedToken>& added_tokens() const;
  const SpecialTokens& special_tokens() const;

  // What encode(text, true) adds around the ids.
  const std::vector<TokenId>& prefix_tokens() const;
  const std::vector<TokenId>& suffix_tokens() const;

  struct Impl;  // opaque; defined in tokenizer_impl.h

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class TokenizerLoader;
};

}  // namespace deepinfer::tokenizer
