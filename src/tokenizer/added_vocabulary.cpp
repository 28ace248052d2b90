// Added-token extraction, a port of HF tokenizers' AddedVocabulary::find_matches semantics onto
// a byte trie (the tokens are few and short; a first-byte filter skips most positions).
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

namespace deepinfer::tokenizer {

AddedVocabulary::AddedVocabulary() = default;
AddedVocabulary::~AddedVocabulary() = default;
AddedVocabulary::AddedVocabulary(AddedVocabulary&&) noexcept = default;
AddedVocabulary& AddedVocabulary::operator=(AddedVocabulary&&) noexcept = default;

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  bool needs_classes = false;
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (static_cast<std::size_t>(t.id) >= index_of_id_.size()) index_of_id_.resize(t.id + 1, -1);
    index_of_id_[t.id] = static_cast<std::int32_t>(i);
    if (t.content.empty()) continue;
    (t.normalized ? normalized_trie_ : raw_trie_).insert(t.content, static_cast<std::int32_t>(i));
    needs_classes |= t.single_word || t.lstrip || t.rstrip;
  }
  if (needs_classes) {
    // Rust regex's Unicode \w and \s, which HF uses for these flags.
    word_char_.emplace(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", "added token word class",
                       UnicodeRegex::Options{.literal = false, .anchored = true});
    space_char_.emplace(R"(\p{White_Space})", "added token space class",
                        UnicodeRegex::Options{.literal = false, .anchored = true});
  }
}

const AddedToken* AddedVocabulary::find(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= index_of_id_.size() || index_of_id_[id] < 0) return nullptr;
  return &tokens_[index_of_id_[id]];
}

void AddedVocabulary::Trie::insert(std::string_view content, std::int32_t token) {
  std::uint32_t node = 0;
  for (const char c : content) {
    const auto b = static_cast<unsigned char>(c);
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), b,
                               [](const auto& child, unsigned char key) { return child.first < key; });
    if (it == children.end() || it->first != b) {
      const auto child = static_cast<std::uint32_t>(nodes.size());
      it = children.insert(it, {b, child});
      nodes.emplace_back();  // invalidates `children`; not used below
      node = child;
    } else {
      node = it->second;
    }
  }
  nodes[node].token = token;
  first_byte[static_cast<unsigned char>(content[0])] = true;
}

std::optional<std::pair<std::int32_t, std::size_t>> AddedVocabulary::Trie::longest_at(std::string_view text,
                                                                                      std::size_t pos) const {
  std::optional<std::pair<std::int32_t, std::size_t>> best;
  std::uint32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    const auto& children = nodes[node].children;
    const auto it = std::lower_bound(children.begin(), children.end(), b,
                                     [](const auto& child, unsigned char key) { return child.first < key; });
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token >= 0) best = std::pair{nodes[node].token, i + 1 - pos};
  }
  return best;
}

bool AddedVocabulary::is_word_char_before(std::string_view text, std::size_t end) const {
  if (end == 0) return false;
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return word_char_->matches_at(text.substr(0, end), start);
}

bool AddedVocabulary::is_word_char_at(std::string_view text, std::size_t pos) const {
  return pos < text.size() && word_char_->matches_at(text, pos);
}

std::size_t AddedVocabulary::whitespace_start_before(std::string_view text, std::size_t end) const {
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!space_char_->matches_at(text.substr(0, end), start)) break;
    end = start;
  }
  return end;
}

std::size_t AddedVocabulary::whitespace_end_after(std::string_view text, std::size_t start) const {
  while (start < text.size() && space_char_->matches_at(text, start)) {
    ++start;
    while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  }
  return start;
}

void AddedVocabulary::split(std::string_view text, bool skip_special, std::vector<Segment>& out) const {
  if (raw_trie_.empty() && normalized_trie_.empty()) {
    if (!text.empty()) out.push_back({text, std::nullopt});
    return;
  }
  thread_local std::vector<Segment> first_pass;
  first_pass.clear();
  split_with(raw_trie_, text, skip_special, first_pass);
  for (const Segment& segment : first_pass) {
    if (segment.token) out.push_back(segment);
    else split_with(normalized_trie_, segment.text, skip_special, out);
  }
}

// HF's find_matches: iterate the leftmost-longest non-overlapping matches; a match that is
// skipped (a special token under skip_special, or failing its single_word test) stays text and its
// span is not searched again; lstrip/rstrip widen the match over neighbouring whitespace.
void AddedVocabulary::split_with(const Trie& trie, std::string_view text, bool skip_special,
                                 std::vector<Segment>& out) const {
  if (text.empty()) return;
  if (trie.empty()) {
    out.push_back({text, std::nullopt});
    return;
  }
  std::size_t start_offset = 0;  // end of the last emitted segment
  std::size_t pos = 0;           // where the match search resumes
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto match = trie.longest_at(text, pos);
    if (!match) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[match->first];
    std::size_t start = pos;
    std::size_t stop = pos + match->second;
    pos = stop;
    if (skip_special && token.special) continue;
    if (token.single_word) {
      const bool start_space = start == 0 || !is_word_char_before(text, start);
      const bool stop_space = stop == text.size() || !is_word_char_at(text, stop);
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(whitespace_start_before(text, start), start_offset);
    if (token.rstrip) stop = whitespace_end_after(text, stop);
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), std::nullopt});
    out.push_back({text.substr(start, stop - start), token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), std::nullopt});
}

}  // namespace deepinfer::tokenizer
