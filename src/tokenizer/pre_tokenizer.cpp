// Pre-tokenization steps, applied depth-first so words stream out in order without building the
// intermediate lists HF keeps; the split rules follow NormalizedString::split exactly.
#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <optional>
#include <string>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"

namespace deepinfer::tokenizer {
namespace {

// GPT-2's word regex, used by the ByteLevel pre-tokenizer when use_regex is set.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Piece {
  std::size_t start;
  std::size_t end;
  bool flag;  // before the behaviour: "is a match"; after: "remove"
};

SplitBehavior parse_behavior(const nlohmann::json& value, const std::string& where) {
  DI_CHECK(value.is_string(), "{}.behavior: expected a string, got {}", where, value.dump());
  const auto& name = value.get_ref<const std::string&>();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw_error("{}.behavior: unknown split behavior '{}'", where, name);
}

// Applies a delimiter behaviour to the match list of HF's Pattern::find_matches (which covers the
// whole piece); on return each entry's flag means "drop this slice".
void apply_behavior(SplitBehavior behavior, std::vector<Piece>& pieces) {
  std::vector<Piece> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto& p : pieces) p.flag = false;
      return;
    case SplitBehavior::kRemoved:
      return;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& p : pieces) {
        const bool merge = behavior == SplitBehavior::kContiguous ? p.flag == previous_match : p.flag && !previous_match;
        if (merge && !out.empty()) out.back().end = p.end;
        else out.push_back({p.start, p.end, false});
        previous_match = p.flag;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->flag && !previous_match && !out.empty()) out.back().start = it->start;
        else out.push_back({it->start, it->end, false});
        previous_match = it->flag;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  pieces.swap(out);
}

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { kSplit, kPrefixSpace } kind = Kind::kSplit;
  std::optional<UnicodeRegex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool on_byte_level_text = false;  // after a ByteLevel step HF matches the mapped characters
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

PreTokenizer PreTokenizer::from_json(const nlohmann::json& config, std::string_view where) {
  PreTokenizer result;
  bool seen_byte_level = false;
  if (!config.is_null()) result.add_json(config, std::string(where), seen_byte_level);
  return result;
}

void PreTokenizer::add_json(const nlohmann::json& config, const std::string& where, bool& seen_byte_level) {
  const std::string& type = json_type(config, where);
  if (type == "Sequence") {
    const auto it = config.find("pretokenizers");
    DI_CHECK(it != config.end() && it->is_array(), "{}.pretokenizers: expected an array", where);
    for (std::size_t i = 0; i < it->size(); ++i)
      add_json((*it)[i], fmt::format("{}.pretokenizers[{}]", where, i), seen_byte_level);
    return;
  }
  if (type == "Split") {
    const auto pattern_it = config.find("pattern");
    DI_CHECK(pattern_it != config.end() && pattern_it->is_object() && pattern_it->size() == 1,
             "{}.pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}", where);
    const std::string kind = pattern_it->begin().key();
    const nlohmann::json& text = pattern_it->front();  // front(), not begin().value(): no temporary iterator (gcc 13 -Wdangling-reference)
    DI_CHECK((kind == "Regex" || kind == "String") && text.is_string(),
             "{}.pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}, got {}", where, pattern_it->dump());
    Step step;
    step.regex.emplace(text.get<std::string>(), where + ".pattern",
                       UnicodeRegex::Options{.literal = kind == "String", .anchored = false});
    DI_CHECK(config.contains("behavior"), "{}: missing field 'behavior'", where);
    step.behavior = parse_behavior(config["behavior"], where);
    step.invert = json_bool(config, "invert", false, where);
    step.on_byte_level_text = seen_byte_level;
    steps_.push_back(std::move(step));
    return;
  }
  if (type == "Digits") {
    Step step;
    step.regex.emplace(R"(\p{N})", where, UnicodeRegex::Options{});
    step.behavior = json_bool(config, "individual_digits", false, where) ? SplitBehavior::kIsolated
                                                                              : SplitBehavior::kContiguous;
    step.on_byte_level_text = seen_byte_level;
    steps_.push_back(std::move(step));
    return;
  }
  if (type == "ByteLevel") {
    DI_CHECK(!seen_byte_level, "{}: a second ByteLevel pre-tokenizer is not supported", where);
    if (json_bool(config, "add_prefix_space", true, where)) {
      Step step;
      step.kind = Step::Kind::kPrefixSpace;
      steps_.push_back(std::move(step));
    }
    if (json_bool(config, "use_regex", true, where)) {
      Step step;
      step.regex.emplace(kGpt2Pattern, where + " (GPT-2 regex)", UnicodeRegex::Options{});
      steps_.push_back(std::move(step));
    }
    seen_byte_level = true;
    return;
  }
  throw_error("{}: unsupported pre_tokenizer type '{}' (supported: Sequence, Split, ByteLevel, Digits)", where, type);
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& emit) const {
  if (!text.empty()) apply(0, text, emit);
}

void PreTokenizer::apply(std::size_t index, std::string_view piece,
                         const std::function<void(std::string_view)>& emit) const {
  if (index == steps_.size()) {
    emit(piece);
    return;
  }
  const Step& step = steps_[index];
  if (step.kind == Step::Kind::kPrefixSpace) {
    if (piece.front() == ' ') {
      apply(index + 1, piece, emit);
    } else {
      const std::string prefixed = " " + std::string(piece);
      apply(index + 1, prefixed, emit);
    }
    return;
  }
  // After ByteLevel, HF matches the regex against the mapped characters (one per byte).
  std::string mapped;
  std::string_view subject = piece;
  if (step.on_byte_level_text) {
    mapped = bytes_to_byte_level(piece);
    subject = mapped;
  }
  // Scratch per recursion depth; a deque so growing it never moves the buffers of outer frames.
  thread_local std::deque<std::vector<MatchSpan>> match_stack;
  thread_local std::deque<std::vector<Piece>> piece_stack;
  if (match_stack.size() <= index) {
    match_stack.resize(index + 1);
    piece_stack.resize(index + 1);
  }
  std::vector<MatchSpan>& matches = match_stack[index];
  std::vector<Piece>& pieces = piece_stack[index];
  step.regex->find_all(subject, matches);
  // HF's find_matches: alternating gaps and matches covering the piece.
  pieces.clear();
  std::size_t prev = 0;
  for (const MatchSpan& m : matches) {
    if (prev != m.start) pieces.push_back({prev, m.start, step.invert});
    pieces.push_back({m.start, m.end, !step.invert});
    prev = m.end;
  }
  if (prev != subject.size()) pieces.push_back({prev, subject.size(), step.invert});
  apply_behavior(step.behavior, pieces);
  // Mapped offsets -> byte offsets: each byte became one character (of 1 or 2 UTF-8 bytes).
  std::vector<std::size_t> byte_of;
  if (step.on_byte_level_text) {
    byte_of.resize(subject.size() + 1);
    std::size_t b = 0;
    for (std::size_t i = 0; i < subject.size(); ++i) {
      byte_of[i] = b;
      if (i + 1 == subject.size() || (static_cast<unsigned char>(subject[i + 1]) & 0xC0) != 0x80) ++b;
    }
    byte_of[subject.size()] = b;
  }
  for (const Piece& p : pieces) {
    if (p.flag || p.start == p.end) continue;
    if (step.on_byte_level_text) {
      apply(index + 1, piece.substr(byte_of[p.start], byte_of[p.end] - byte_of[p.start]), emit);
    } else {
      apply(index + 1, piece.substr(p.start, p.end - p.start), emit);
    }
  }
}

}  // namespace deepinfer::tokenizer
