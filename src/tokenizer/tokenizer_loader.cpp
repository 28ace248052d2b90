// Builds a Tokenizer from tokenizer.json (+ tokenizer_config.json): validates that it is a
// byte-level BPE we reproduce exactly, assigns added-token ids the way HF does, and precomputes
// the per-id tables (string, decoded bytes, special flag).
#include <nlohmann/json.hpp>

#include <map>
#include <unordered_set>

#include "common/error.h"
#include "common/logging.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_impl.h"

namespace deepinfer::tokenizer {
namespace {

using nlohmann::json;

json parse_json(std::string_view text, std::string_view source) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw_error("{}: not valid JSON: {}", source, e.what());
  }
}

// Only normalizers that leave text unchanged are supported: null or (nested) empty Sequences.
void check_normalizer(const json& node, const std::string& where) {
  if (node.is_null()) return;
  const std::string& type = json_type(node, where);
  DI_CHECK(type == "Sequence", "{}: unsupported normalizer type '{}' (supported: none, Sequence of none)", where, type);
  const auto it = node.find("normalizers");
  DI_CHECK(it != node.end() && it->is_array(), "{}.normalizers: expected an array", where);
  for (std::size_t i = 0; i < it->size(); ++i) check_normalizer((*it)[i], fmt::format("{}.normalizers[{}]", where, i));
}

bool has_byte_level(const json& node) {
  if (!node.is_object()) return false;
  const auto type = node.find("type");
  if (type != node.end() && *type == "ByteLevel") return true;
  const auto children = node.find("pretokenizers");
  if (children == node.end() || !children->is_array()) return false;
  for (const auto& child : *children)
    if (has_byte_level(child)) return true;
  return false;
}

void check_decoder(const json& node, const std::string& where) {
  DI_CHECK(!node.is_null(), "{}: missing; a byte-level BPE tokenizer needs the ByteLevel decoder", where);
  const std::string& type = json_type(node, where);
  if (type == "Sequence") {
    const auto it = node.find("decoders");
    DI_CHECK(it != node.end() && it->is_array() && it->size() == 1, "{}: only a Sequence of one ByteLevel is supported",
             where);
    check_decoder((*it)[0], where + ".decoders[0]");
    return;
  }
  DI_CHECK(type == "ByteLevel", "{}: unsupported decoder type '{}' (supported: ByteLevel)", where, type);
}

// HF's AddedVocabulary::add_tokens as run by the deserializer: the "id" fields are not used; a
// token takes the id of an existing string with its content, else the next free id.
std::vector<AddedToken> assign_added_tokens(const json& list, const BpeModel& model, const std::string& where) {
  DI_CHECK(list.is_array(), "{}: expected an array", where);
  std::unordered_map<std::string, TokenId> content_to_id;
  std::map<TokenId, AddedToken> by_id;
  const auto model_size = static_cast<TokenId>(model.vocab().size());
  TokenId next_id = model_size;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item_where = fmt::format("{}[{}]", where, i);
    const json& item = list[i];
    DI_CHECK(item.is_object(), "{}: expected an object", item_where);
    const auto content = item.find("content");
    DI_CHECK(content != item.end() && content->is_string(), "{}.content: expected a string", item_where);
    AddedToken token;
    token.content = content->get<std::string>();
    token.special = json_bool(item, "special", false, item_where);
    token.normalized = json_bool(item, "normalized", !token.special, item_where);
    token.single_word = json_bool(item, "single_word", false, item_where);
    token.lstrip = json_bool(item, "lstrip", false, item_where);
    token.rstrip = json_bool(item, "rstrip", false, item_where);
    if (token.content.empty()) continue;
    if (const auto it = content_to_id.find(token.content); it != content_to_id.end()) {
      token.id = it->second;
    } else if (const auto vit = model.vocab().find(token.content); vit != model.vocab().end()) {
      token.id = vit->second;
    } else {
      token.id = next_id++;
    }
    if (const auto id_json = item.find("id"); id_json != item.end() && id_json->is_number_integer() &&
                                               id_json->get<std::int64_t>() != token.id) {
      log::warn("{}: token '{}' is listed with id {} but gets id {} (as in HF tokenizers)", item_where, token.content,
                id_json->get<std::int64_t>(), token.id);
    }
    content_to_id[token.content] = token.id;
    by_id[token.id] = std::move(token);
  }
  std::vector<AddedToken> tokens;
  tokens.reserve(by_id.size());
  for (auto& [id, token] : by_id) tokens.push_back(std::move(token));
  return tokens;
}

void build_id_tables(Tokenizer::Impl& impl) {
  std::size_t size = impl.model.id_to_token().size();
  for (const AddedToken& t : impl.added.tokens()) size = std::max(size, static_cast<std::size_t>(t.id) + 1);
  impl.id_flags.assign(size, 0);
  for (const auto& [token, id] : impl.model.vocab()) impl.id_flags[id] = Tokenizer::Impl::kValidId;
  std::unordered_set<std::string_view> special_contents;
  for (const AddedToken& t : impl.added.tokens()) {
    impl.id_flags[t.id] = Tokenizer::Impl::kValidId;
    impl.added_to_id[t.content] = t.id;
    if (t.special) special_contents.insert(t.content);
  }
  impl.bytes_offsets.assign(size + 1, 0);
  impl.bytes_arena.reserve(size * 6);
  for (std::size_t id = 0; id < size; ++id) {
    impl.bytes_offsets[id] = static_cast<std::uint32_t>(impl.bytes_arena.size());
    const std::string_view token = impl.token_string(static_cast<TokenId>(id));
    impl.bytes_arena += decode_byte_level_token(token);
    // HF decides "special" by the token's string, so a vocabulary entry spelled like a special
    // added token is skipped too.
    if (special_contents.count(token)) impl.id_flags[id] |= Tokenizer::Impl::kSpecialId;
  }
  impl.bytes_offsets[size] = static_cast<std::uint32_t>(impl.bytes_arena.size());
}

// A special token named in tokenizer_config.json: a string, {"content": ...}, or null.
std::optional<TokenId> config_token(const json& config, const char* key, const Tokenizer::Impl& impl,
                                    const std::string& where) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  std::string content;
  if (it->is_string()) {
    content = it->get<std::string>();
  } else {
    DI_CHECK(it->is_object() && it->contains("content") && (*it)["content"].is_string(),
             "{}.{}: expected a string or an object with 'content'", where, key);
    content = (*it)["content"].get<std::string>();
  }
  const auto id = impl.token_to_id(content);
  if (!id) log::warn("{}.{}: token '{}' is not in the vocabulary; ignored", where, key, content);
  return id;
}

// tokenizer.json's post_processor, for add_special_tokens when tokenizer_config.json is silent.
void apply_post_processor(const json& node, const std::string& where, Tokenizer::Impl& impl) {
  if (node.is_null()) return;
  const std::string& type = json_type(node, where);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const auto it = node.find("processors");
    DI_CHECK(it != node.end() && it->is_array(), "{}.processors: expected an array", where);
    for (std::size_t i = 0; i < it->size(); ++i)
      apply_post_processor((*it)[i], fmt::format("{}.processors[{}]", where, i), impl);
    return;
  }
  DI_CHECK(type == "TemplateProcessing", "{}: unsupported post_processor type '{}' (supported: ByteLevel, "
           "TemplateProcessing, Sequence)", where, type);
  const auto single = node.find("single");
  const auto specials = node.find("special_tokens");
  DI_CHECK(single != node.end() && single->is_array(), "{}.single: expected an array", where);
  DI_CHECK(specials != node.end() && specials->is_object(), "{}.special_tokens: expected an object", where);
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single->size(); ++i) {
    const json& piece = (*single)[i];
    const std::string piece_where = fmt::format("{}.single[{}]", where, i);
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    DI_CHECK(piece.contains("SpecialToken") && piece["SpecialToken"].contains("id"),
             "{}: expected Sequence or SpecialToken", piece_where);
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    const auto entry = specials->find(name);
    DI_CHECK(entry != specials->end() && entry->contains("ids") && (*entry)["ids"].is_array(),
             "{}: special token '{}' missing from special_tokens", piece_where, name);
    for (const auto& id : (*entry)["ids"]) {
      DI_CHECK(id.is_number_unsigned(), "{}.special_tokens['{}'].ids: expected token ids", where, name);
      (seen_sequence ? impl.suffix : impl.prefix).push_back(id.get<TokenId>());
    }
  }
}

bool is_known(const Tokenizer::Impl& impl, TokenId id) {
  return id >= 0 && static_cast<std::size_t>(id) < impl.id_flags.size() && impl.id_flags[id] != 0;
}

}  // namespace

Tokenizer TokenizerLoader::build(std::string_view tokenizer_json, std::string_view config_json,
                                 std::string_view source_view) {
  const std::string source(source_view);
  try {
    return build_checked(tokenizer_json, config_json, source);
  } catch (const json::exception& e) {
    // A field of an unexpected JSON type that no explicit check caught.
    throw_error("{}: unexpected content: {}", source, e.what());
  }
}

Tokenizer TokenizerLoader::build_checked(std::string_view tokenizer_json, std::string_view config_json,
                                         const std::string& source) {
  const json root = parse_json(tokenizer_json, source);
  DI_CHECK(root.is_object(), "{}: expected a JSON object at the top level", source);
  if (const auto version = root.find("version"); version != root.end()) {
    DI_CHECK(*version == "1.0", "{}: unknown tokenizer.json version {}", source, version->dump());
  }
  for (const char* key : {"truncation", "padding"}) {
    if (root.contains(key) && !root[key].is_null()) log::warn("{}: '{}' is ignored (lengths are the engine's job)", source, key);
  }
  const auto field = [&](const char* key) -> const json& {
    static const json null_json;
    const auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  check_normalizer(field("normalizer"), source + ": normalizer");
  DI_CHECK(root.contains("model"), "{}: missing field 'model'", source);
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->pre_tokenizer = PreTokenizer::from_json(field("pre_tokenizer"), source + ": pre_tokenizer");
  DI_CHECK(has_byte_level(field("pre_tokenizer")),
           "{}: pre_tokenizer has no ByteLevel step: not a byte-level BPE tokenizer (unsupported)", source);
  check_decoder(field("decoder"), source + ": decoder");
  impl->model = BpeModel::from_json(root["model"], source + ": model");
  impl->added = AddedVocabulary(assign_added_tokens(field("added_tokens").is_null() ? json::array() : field("added_tokens"),
                                                    impl->model, source + ": added_tokens"));
  build_id_tables(*impl);

  const std::string config_source = source + " (tokenizer_config.json)";
  const json config = config_json.empty() ? json::object() : parse_json(config_json, config_source);
  DI_CHECK(config.is_object(), "{}: expected a JSON object", config_source);
  impl->specials.bos = config_token(config, "bos_token", *impl, config_source);
  impl->specials.eos = config_token(config, "eos_token", *impl, config_source);
  impl->specials.pad = config_token(config, "pad_token", *impl, config_source);
  impl->specials.unk = config_token(config, "unk_token", *impl, config_source);
  if (config.contains("add_bos_token") || config.contains("add_eos_token")) {
    // transformers' LlamaTokenizerFast replaces the post-processor with bos/eos from the config.
    if (json_bool(config, "add_bos_token", false, config_source)) {
      DI_CHECK(impl->specials.bos.has_value(), "{}: add_bos_token is set but bos_token is missing", config_source);
      impl->prefix.push_back(*impl->specials.bos);
    }
    if (json_bool(config, "add_eos_token", false, config_source)) {
      DI_CHECK(impl->specials.eos.has_value(), "{}: add_eos_token is set but eos_token is missing", config_source);
      impl->suffix.push_back(*impl->specials.eos);
    }
  } else {
    apply_post_processor(field("post_processor"), source + ": post_processor", *impl);
  }
  for (const TokenId id : impl->prefix) DI_CHECK(is_known(*impl, id), "{}: special token id {} to add is not in the vocabulary", source, id);
  for (const TokenId id : impl->suffix) DI_CHECK(is_known(*impl, id), "{}: special token id {} to add is not in the vocabulary", source, id);
  return Tokenizer(std::move(impl));
}

}  // namespace deepinfer::tokenizer
