// Vocabulary construction, the token trie, and a reader for byte-level BPE tokenizer.json files.
#include "grammar/vocabulary.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "common/error.h"
#include "grammar/unicode.h"

namespace deepinfer::grammar {
namespace {

// chars[j] = number of plain JSON-string characters in tok[j:], or -1 when tok[j:] is not a
// sequence of complete such characters.
void plain_char_counts(std::string_view tok, std::vector<int>& chars) {
  chars.assign(tok.size() + 1, -1);
  chars[tok.size()] = 0;
  for (std::size_t j = tok.size(); j-- > 0;) {
    std::size_t pos = j;
    std::uint32_t cp = 0;
    if (!decode_utf8(tok, pos, cp) || cp < 0x20 || cp == '"' || cp == '\\') continue;
    if (chars[pos] >= 0) chars[j] = chars[pos] + 1;
  }
}

}  // namespace

const ByteSet& byte_family(int f) {
  static const std::array<ByteSet, kNumByteFamilies> kFamilies = [] {
    std::array<ByteSet, kNumByteFamilies> out;
    for (int b = 0x20; b <= 0x7E; ++b) {
      if (b != '"' && b != '\\') out[0].set(static_cast<std::uint8_t>(b));
    }
    for (int family : {1, 2, 3}) {
      out[family].set_range('a', 'z');
      out[family].set_range('A', 'Z');
      out[family].set_range('0', '9');
    }
    out[1].set('_');
    out[1].set('-');
    out[2].set('-');
    out[4].set_range('0', '9');
    out[4].set_range('a', 'f');
    out[4].set_range('A', 'F');
    out[5].set_range('0', '9');
    return out;
  }();
  return kFamilies[f];
}

TokenTrie::TokenTrie(const std::vector<std::string>& tokens, const std::vector<std::uint8_t>& excluded) {
  rank_.assign(tokens.size(), -1);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!excluded[i]) sorted_ids_.push_back(static_cast<std::int32_t>(i));
  }
  std::sort(sorted_ids_.begin(), sorted_ids_.end(),
            [&](std::int32_t a, std::int32_t b) { return tokens[a] < tokens[b]; });
  for (std::size_t r = 0; r < sorted_ids_.size(); ++r) rank_[sorted_ids_[r]] = static_cast<std::int32_t>(r);

  // Preorder construction: `open` holds the nodes of the current path, by depth.
  nodes_.push_back(Node{});
  text_ok_.push_back(1);
  text_chars_.push_back(0);
  std::vector<int> chars;
  std::vector<std::int32_t> parent{-1};
  std::vector<std::int32_t> open{0};
  std::string_view prev;
  auto close_deeper = [&](std::size_t depth, std::int32_t rank) {
    while (open.size() > depth + 1) {
      Node& n = nodes_[open.back()];
      n.subtree_end = static_cast<std::int32_t>(nodes_.size());
      n.tok_hi = rank;
      open.pop_back();
    }
  };
  for (std::size_t r = 0; r < sorted_ids_.size(); ++r) {
    std::string_view tok = tokens[sorted_ids_[r]];
    std::size_t lcp = 0;
    while (lcp < tok.size() && lcp < prev.size() && tok[lcp] == prev[lcp]) ++lcp;
    close_deeper(lcp, static_cast<std::int32_t>(r));
    for (std::size_t d = open.size() - 1; d < tok.size(); ++d) {
      Node n;
      n.depth = static_cast<std::uint16_t>(d + 1);
      n.byte = static_cast<std::uint8_t>(tok[d]);
      n.tok_lo = static_cast<std::int32_t>(r);
      parent.push_back(open.back());
      nodes_.push_back(n);
      text_ok_.push_back(1);
      text_chars_.push_back(0);
      open.push_back(static_cast<std::int32_t>(nodes_.size() - 1));
    }
    plain_char_counts(tok, chars);
    for (std::size_t d = 0; d < open.size(); ++d) {
      std::int32_t node = open[d];
      if (chars[d] < 0) {
        text_ok_[node] = 0;
      } else {
        text_chars_[node] = static_cast<std::uint8_t>(std::max<int>(text_chars_[node], std::min(chars[d], 255)));
      }
    }
    Node& last = nodes_[open.back()];
    last.exact_end = static_cast<std::int32_t>(r + 1);
    max_depth_ = std::max(max_depth_, static_cast<int>(tok.size()));
    prev = tok;
  }
  close_deeper(0, static_cast<std::int32_t>(sorted_ids_.size()));
  nodes_[0].subtree_end = static_cast<std::int32_t>(nodes_.size());
  nodes_[0].tok_hi = static_cast<std::int32_t>(sorted_ids_.size());
  for (auto& n : nodes_) {
    if (n.exact_end < n.tok_lo) n.exact_end = n.tok_lo;  // an inner node that is no token
  }
  // Bytes below each node, accumulated from the leaves up (children follow parents in preorder).
  below_.assign(nodes_.size(), ByteSet{});
  for (std::int32_t i = static_cast<std::int32_t>(nodes_.size()) - 1; i > 0; --i) {
    std::int32_t p = parent[i];
    below_[p].set(nodes_[i].byte);
    nodes_[p].height = static_cast<std::uint8_t>(std::max<int>(nodes_[p].height, std::min(nodes_[i].height + 1, 255)));
    below_[p] |= below_[i];
  }
  families_.assign(nodes_.size(), 0);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    for (int f = 0; f < kNumByteFamilies; ++f) {
      if (below_[i].subset_of(byte_family(f))) families_[i] |= static_cast<std::uint8_t>(1u << f);
    }
  }
}

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, int vocab_size, std::vector<std::int32_t> special_ids,
                       std::vector<std::int32_t> end_ids)
    : vocab_size_(vocab_size), tokens_(std::move(token_bytes)), end_ids_(std::move(end_ids)) {
  DI_CHECK(vocab_size_ >= num_tokens(), "vocabulary: logits width {} is smaller than the {} tokens", vocab_size_,
           num_tokens());
  excluded_.assign(tokens_.size(), 0);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].empty()) excluded_[i] = 1;
  }
  for (std::int32_t id : special_ids) {
    DI_CHECK(id >= 0 && id < num_tokens(), "vocabulary: special token id {} out of range", id);
    excluded_[id] = 1;
  }
  for (std::int32_t id : end_ids_) {
    DI_CHECK(id >= 0 && id < vocab_size_, "vocabulary: end token id {} out of range", id);
    if (id < num_tokens()) excluded_[id] = 1;
  }
  DI_CHECK(!end_ids_.empty(), "vocabulary: at least one end token id is needed");
  trie_ = std::make_unique<TokenTrie>(tokens_, excluded_);
}

bool Vocabulary::is_end(std::int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

namespace {

// The GPT-2 byte <-> printable code point table used by byte-level BPE vocabularies.
std::unordered_map<std::uint32_t, std::uint8_t> byte_level_decoder() {
  std::vector<int> bytes;
  for (int b = '!'; b <= '~'; ++b) bytes.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bytes.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bytes.push_back(b);
  std::vector<std::uint32_t> cps(bytes.begin(), bytes.end());
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bytes.begin(), bytes.end(), b) == bytes.end()) {
      bytes.push_back(b);
      cps.push_back(static_cast<std::uint32_t>(256 + extra++));
    }
  }
  std::unordered_map<std::uint32_t, std::uint8_t> out;
  for (std::size_t i = 0; i < bytes.size(); ++i) out[cps[i]] = static_cast<std::uint8_t>(bytes[i]);
  return out;
}

std::int32_t eos_from_config(const std::filesystem::path& config_path, const nlohmann::json& added) {
  std::ifstream in(config_path);
  if (!in) return -1;
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded() || !config.contains("eos_token")) return -1;
  const auto& eos = config["eos_token"];
  std::string content = eos.is_string() ? eos.get<std::string>() : eos.value("content", "");
  for (const auto& t : added) {
    if (t.value("content", "") == content) return t.value("id", -1);
  }
  return -1;
}

}  // namespace

std::shared_ptr<const Vocabulary> Vocabulary::load_hf_tokenizer_json(const std::string& path, int vocab_size,
                                                                      std::vector<std::int32_t> end_ids) {
  std::ifstream in(path);
  DI_CHECK(in.good(), "vocabulary: cannot open {}", path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  DI_CHECK(!j.is_discarded(), "vocabulary: {} is not valid JSON", path);
  DI_CHECK(j.contains("model") && j["model"].value("type", "") == "BPE" && j["model"].contains("vocab"),
           "vocabulary: {}: only BPE models are supported", path);
  DI_CHECK(j.contains("decoder") && j["decoder"].is_object() && j["decoder"].value("type", "") == "ByteLevel",
           "vocabulary: {}: only byte-level BPE (decoder ByteLevel) is supported", path);
  const nlohmann::json added = j.value("added_tokens", nlohmann::json::array());
  std::unordered_map<std::string, std::int32_t> added_ids;
  std::int32_t max_id = -1;
  for (const auto& t : added) {
    added_ids[t.value("content", "")] = t.value("id", -1);
    max_id = std::max(max_id, t.value("id", -1));
  }
  for (const auto& [text, id] : j["model"]["vocab"].items()) max_id = std::max(max_id, id.get<std::int32_t>());
  std::vector<std::string> tokens(max_id + 1);
  std::vector<std::int32_t> special;
  auto decoder = byte_level_decoder();
  for (const auto& [text, id_json] : j["model"]["vocab"].items()) {
    auto id = id_json.get<std::int32_t>();
    DI_CHECK(id >= 0, "vocabulary: {}: negative token id for '{}'", path, text);
    std::string bytes;
    std::size_t pos = 0;
    bool ok = true;
    while (ok && pos < text.size()) {
      std::uint32_t cp = 0;
      auto it = decode_utf8(text, pos, cp) ? decoder.find(cp) : decoder.end();
      ok = it != decoder.end();
      if (ok) bytes += static_cast<char>(it->second);
    }
    if (!ok) {
      DI_CHECK(added_ids.contains(text), "vocabulary: {}: token {} '{}' is not byte-level encoded", path, id, text);
      continue;
    }
    tokens[id] = std::move(bytes);
  }
  for (const auto& [text, id] : added_ids) {
    if (id >= 0) special.push_back(id);
  }
  if (end_ids.empty()) {
    std::int32_t eos = eos_from_config(std::filesystem::path(path).parent_path() / "tokenizer_config.json", added);
    DI_CHECK(eos >= 0, "vocabulary: {}: no end token id given and no eos_token in tokenizer_config.json", path);
    end_ids.push_back(eos);
  }
  if (vocab_size == 0) vocab_size = max_id + 1;
  return std::make_shared<const Vocabulary>(std::move(tokens), vocab_size, std::move(special), std::move(end_ids));
}

}  // namespace deepinfer::grammar
