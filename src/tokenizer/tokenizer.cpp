// Encode and decode: added tokens split out first, then pre-tokenization into words and BPE per
// word, in the order HF tokenizers' TokenizerImpl::encode runs them.
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <functional>
#include <sstream>

#include "common/error.h"
#include "common/thread_pool.h"
#include "common/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace deepinfer::tokenizer {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  DI_CHECK(in.good(), "{}: cannot open file", path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  DI_CHECK(!in.bad(), "{}: read error", path.string());
  return std::move(buffer).str();
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  DI_CHECK(std::filesystem::exists(path, ec), "tokenizer path {} does not exist", path.string());
  std::filesystem::path json_path = path;
  if (std::filesystem::is_directory(path, ec)) {
    json_path = path / "tokenizer.json";
    DI_CHECK(std::filesystem::exists(json_path, ec), "{}: no tokenizer.json in this directory", path.string());
  }
  const std::filesystem::path config_path = json_path.parent_path() / "tokenizer_config.json";
  const std::string config = std::filesystem::exists(config_path, ec) ? read_file(config_path) : std::string();
  return TokenizerLoader::build(read_file(json_path), config, json_path.string());
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json, std::string_view source) {
  return TokenizerLoader::build(tokenizer_json, config_json, source);
}

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens, std::vector<TokenId>& out) const {
  encode_into(text, EncodeOptions{.add_special_tokens = add_special_tokens, .split_special_tokens = false}, out);
}

void Tokenizer::encode_into(std::string_view text, const EncodeOptions& options, std::vector<TokenId>& out) const {
  const bool add_special_tokens = options.add_special_tokens;
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::to_valid(text);
    text = repaired;
  }
  if (add_special_tokens) out.insert(out.end(), impl_->prefix.begin(), impl_->prefix.end());
  thread_local std::vector<Segment> segments;
  segments.clear();
  impl_->added.split(text, options.split_special_tokens, segments);
  const BpeModel& model = impl_->model;
  WordCache& cache = model.thread_cache();
  const std::function<void(std::string_view)> encode_word = [&](std::string_view word) {
    model.encode_word(word, out, cache);
  };
  for (const Segment& segment : segments) {
    if (segment.token) out.push_back(*segment.token);
    else impl_->pre_tokenizer.split(segment.text, encode_word);
  }
  if (add_special_tokens) out.insert(out.end(), impl_->suffix.begin(), impl_->suffix.end());
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, options, ids);
  return ids;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return encode(text, EncodeOptions{.add_special_tokens = add_special_tokens, .split_special_tokens = false});
}

std::vector<std::vector<TokenId>> Tokenizer::encode_batch(std::span<const std::string> texts, bool add_special_tokens,
                                                          ThreadPool& pool) const {
  std::vector<std::vector<TokenId>> result(texts.size());
  pool.parallel_for(texts.size(), [&](std::size_t i) { result[i] = encode(texts[i], add_special_tokens); });
  return result;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const TokenId id : ids) {
    DI_CHECK(is_valid_id(id), "decode: token id {} is not in the vocabulary (size {})", id, vocab_size());
    if (skip_special_tokens && (impl_->id_flags[id] & Impl::kSpecialId)) continue;
    bytes.append(token_bytes(id));
  }
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::to_valid(bytes);
}

std::size_t Tokenizer::vocab_size() const { return impl_->id_flags.size(); }

bool Tokenizer::is_valid_id(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->id_flags.size() && (impl_->id_flags[id] & Impl::kValidId);
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_flags.size()) return {};
  const std::uint32_t begin = impl_->bytes_offsets[id];
  return std::string_view(impl_->bytes_arena).substr(begin, impl_->bytes_offsets[id + 1] - begin);
}

std::string_view Tokenizer::Impl::token_string(TokenId id) const {
  if (const AddedToken* token = added.find(id)) return token->content;
  const auto& model_tokens = model.id_to_token();
  if (id < 0 || static_cast<std::size_t>(id) >= model_tokens.size()) return {};
  return model_tokens[id];
}

std::optional<TokenId> Tokenizer::Impl::token_to_id(std::string_view token) const {
  if (const auto it = added_to_id.find(token); it != added_to_id.end()) return it->second;
  if (const auto it = model.vocab().find(token); it != model.vocab().end()) return it->second;
  return std::nullopt;
}

std::string_view Tokenizer::token_string(TokenId id) const { return impl_->token_string(id); }

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }

bool Tokenizer::is_special(TokenId id) const { return is_valid_id(id) && (impl_->id_flags[id] & Impl::kSpecialId); }

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added.tokens(); }
const SpecialTokens& Tokenizer::special_tokens() const { return impl_->specials; }
const std::vector<TokenId>& Tokenizer::prefix_tokens() const { return impl_->prefix; }
const std::vector<TokenId>& Tokenizer::suffix_tokens() const { return impl_->suffix; }

}  // namespace deepinfer::tokenizer
