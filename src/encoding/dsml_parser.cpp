// Incremental DSML tool-call block parser (see dsml_parser.h). Every decision depends only on
// the text seen so far and is taken only once the text settles it, so the calls produced do not
// depend on how the output was chunked.
#include "encoding/dsml_parser.h"

#include "encoding/marker_scan.h"
#include "encoding/python_json.h"

#include <array>

namespace deepinfer::encoding {

namespace {

// Longer names are not tool or parameter names (OpenAI allows 64 bytes); the cap also bounds
// how much text a half-written tag can hold back.
constexpr std::size_t kMaxNameBytes = 256;

enum class Match { kYes, kPartial, kNo };

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Matches pieces of a tag at text[pos...], answering kPartial when the text ends first.
struct Cursor {
  std::string_view text;
  std::size_t pos = 0;

  Match literal(std::string_view expected) {
    const std::size_t n = std::min(expected.size(), text.size() - pos);
    if (text.substr(pos, n) != expected.substr(0, n)) return Match::kNo;
    if (n < expected.size()) return Match::kPartial;
    pos += n;
    return Match::kYes;
  }
  Match spaces() {
    while (pos < text.size() && is_space(text[pos])) ++pos;
    return pos < text.size() ? Match::kYes : Match::kPartial;
  }
  // The rest of a quoted attribute value whose opening quote is consumed.
  Match quoted(std::string& value) {
    const std::size_t start = pos;
    for (; pos < text.size() && text[pos] != '"'; ++pos) {
      const char c = text[pos];
      if (c == '<' || c == '>' || c == '\n' || pos - start >= kMaxNameBytes) return Match::kNo;
    }
    if (pos == text.size()) return Match::kPartial;
    value.assign(text.substr(start, pos - start));
    ++pos;
    return Match::kYes;
  }
};

struct TagHeader {
  Match match = Match::kNo;
  std::size_t length = 0;
  std::string name;
  bool is_string = true;
};

// `open` name="NAME" [string="true|false"] ">" with optional whitespace between the pieces.
TagHeader match_header(std::string_view text, std::string_view open, bool with_string_flag) {
  Cursor c{text};
  TagHeader h;
  const auto ok = [&](Match m) {
    h.match = m;
    return m == Match::kYes;
  };
  if (!ok(c.literal(open)) || !ok(c.spaces()) || !ok(c.literal("name=\"")) ||
      !ok(c.quoted(h.name))) {
    return h;
  }
  if (with_string_flag) {
    std::string flag;
    if (!ok(c.spaces()) || !ok(c.literal("string=\"")) || !ok(c.quoted(flag))) return h;
    if (flag != "true" && flag != "false") return TagHeader{};
    h.is_string = flag == "true";
  }
  if (!ok(c.spaces()) || !ok(c.literal(">"))) return h;
  if (h.name.empty()) return TagHeader{};
  h.length = c.pos;
  return h;
}

// A non-string parameter's value as JSON text: itself when it parses, else as a JSON string
// (the model broke the typing; a string keeps what it wrote). A NUL byte disqualifies the text:
// nlohmann's lexer reads it as the end of input and would accept "1\0junk".
std::string json_value_text(const std::string& raw) {
  const std::size_t first = raw.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && raw.find('\0') == std::string::npos) {
    const std::string trimmed = raw.substr(first, raw.find_last_not_of(" \t\r\n") - first + 1);
    if (!nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false).is_discarded()) {
      return trimmed;
    }
  }
  return json_quote(raw);
}

}  // namespace

void append_tool_delta(std::vector<ToolCallDelta>& out, int index, std::string_view arguments) {
  if (!out.empty() && out.back().index == index) {
    out.back().arguments += arguments;
    return;
  }
  ToolCallDelta delta;
  delta.index = index;
  delta.arguments = arguments;
  out.push_back(std::move(delta));
}

DsmlBlockParser::DsmlBlockParser(const DsmlTags& tags, int first_index, std::string id_prefix)
    : tags_(tags), id_prefix_(std::move(id_prefix)), next_index_(first_index) {}

void DsmlBlockParser::emit(std::vector<ToolCallDelta>& out, std::string_view arguments) {
  if (!arguments.empty()) append_tool_delta(out, index_, arguments);
}

DsmlBlockParser::Step DsmlBlockParser::advance(std::string_view text, bool at_end,
                                               std::vector<ToolCallDelta>& out) {
  std::size_t pos = 0;
  while (true) {
    std::optional<Step> step;
    switch (state_) {
      case State::kBetweenCalls: step = between_calls(text, pos, at_end, out); break;
      case State::kInvokeBody: step = invoke_body(text, pos, at_end, out); break;
      case State::kValue: step = value(text, pos, at_end, out); break;
    }
    if (step) return *step;
  }
}

DsmlBlockParser::Element DsmlBlockParser::next_element(std::string_view text, std::size_t& pos,
                                                       bool at_end, std::string_view close_tag,
                                                       std::string_view open_tag,
                                                       bool with_string_flag) const {
  while (pos < text.size() && is_space(text[pos])) ++pos;
  if (pos == text.size()) return Element{at_end ? Element::kFail : Element::kNeedMore, {}};
  const std::string_view rest = text.substr(pos);
  Cursor close{rest};
  const Match closed = close.literal(close_tag);
  if (closed == Match::kYes) {
    pos += close.pos;
    return Element{Element::kClose, {}};
  }
  TagHeader header = match_header(rest, open_tag, with_string_flag);
  if (header.match == Match::kYes) {
    pos += header.length;
    return Element{Element::kHeader, std::move(header.name), header.is_string};
  }
  const bool partial = closed == Match::kPartial || header.match == Match::kPartial;
  return Element{!at_end && partial ? Element::kNeedMore : Element::kFail, {}};
}

std::optional<DsmlBlockParser::Step> DsmlBlockParser::between_calls(
    std::string_view text, std::size_t& pos, bool at_end, std::vector<ToolCallDelta>& out) {
  Element element = next_element(text, pos, at_end, tags_.block_close, tags_.invoke_open, false);
  switch (element.kind) {
    case Element::kNeedMore: return Step{Status::kNeedMore, pos};
    case Element::kFail: return fail(pos, out);
    case Element::kClose: return Step{Status::kClosed, pos};
    case Element::kHeader: break;
  }
  committed_ = true;
  call_open_ = true;
  index_ = next_index_++;
  args_started_ = false;
  keys_.clear();
  ToolCallDelta first;
  first.index = index_;
  first.id = id_prefix_ + std::to_string(index_);
  first.name = std::move(element.name);
  out.push_back(std::move(first));
  state_ = State::kInvokeBody;
  return std::nullopt;
}

std::optional<DsmlBlockParser::Step> DsmlBlockParser::invoke_body(
    std::string_view text, std::size_t& pos, bool at_end, std::vector<ToolCallDelta>& out) {
  Element element = next_element(text, pos, at_end, tags_.invoke_close, tags_.param_open, true);
  switch (element.kind) {
    case Element::kNeedMore: return Step{Status::kNeedMore, pos};
    case Element::kFail: return fail(pos, out);
    case Element::kClose:
      close_call(out);
      state_ = State::kBetweenCalls;
      return std::nullopt;
    case Element::kHeader: break;
  }
  key_ = std::move(element.name);
  value_is_string_ = element.is_string;
  value_skipped_ = !keys_.insert(key_).second;
  raw_value_.clear();
  if (!value_skipped_ && value_is_string_) {
    emit(out, (args_started_ ? ", " : "{") + json_quote(key_) + ": \"");
    args_started_ = true;
  }
  state_ = State::kValue;
  return std::nullopt;
}

std::optional<DsmlBlockParser::Step> DsmlBlockParser::value(std::string_view text,
                                                            std::size_t& pos, bool at_end,
                                                            std::vector<ToolCallDelta>& out) {
  const std::string_view rest = text.substr(pos);
  const std::size_t end = rest.find(tags_.param_close);
  if (end != std::string_view::npos) {
    add_value_text(rest.substr(0, end), out);
    pos += end + tags_.param_close.size();
    close_value(out);
    state_ = State::kInvokeBody;
    return std::nullopt;
  }
  if (at_end) {  // output stopped inside the value: keep what was written
    add_value_text(rest, out);
    pos = text.size();
    close_value(out);
    state_ = State::kInvokeBody;
    return fail(pos, out);
  }
  const std::array<std::string_view, 1> close = {tags_.param_close};
  const std::size_t settled = rest.size() - partial_marker_length(rest, close);
  add_value_text(rest.substr(0, settled), out);
  pos += settled;
  return Step{Status::kNeedMore, pos};
}

void DsmlBlockParser::add_value_text(std::string_view text, std::vector<ToolCallDelta>& out) {
  if (value_skipped_ || text.empty()) return;
  if (!value_is_string_) {
    raw_value_ += text;
    return;
  }
  std::string escaped;
  append_json_escaped(escaped, text);
  emit(out, escaped);
}

void DsmlBlockParser::close_value(std::vector<ToolCallDelta>& out) {
  if (value_skipped_) return;
  if (value_is_string_) {
    emit(out, "\"");
    return;
  }
  emit(out, (args_started_ ? ", " : "{") + json_quote(key_) + ": " + json_value_text(raw_value_));
  args_started_ = true;
}

void DsmlBlockParser::close_call(std::vector<ToolCallDelta>& out) {
  emit(out, args_started_ ? "}" : "{}");
  call_open_ = false;
}

DsmlBlockParser::Step DsmlBlockParser::fail(std::size_t pos, std::vector<ToolCallDelta>& out) {
  if (call_open_) close_call(out);
  return Step{Status::kFailed, pos};
}

}  // namespace deepinfer::encoding
