// The output parser's outer state machine: reasoning until "</think>", then content; DSML
// tool-call blocks handed to DsmlBlockParser; the end-of-sentence text ends the output. A block
// that fails before its first call is committed goes back, verbatim, to the text it came from.
#include "encoding/output_parser.h"

#include "encoding/dsml_parser.h"
#include "encoding/marker_scan.h"
#include "encoding/special_tokens.h"

#include <array>

namespace deepinfer::encoding {

OutputParser::OutputParser(ParserOptions options)
    : options_(std::move(options)),
      state_(options_.thinking_open ? State::kReasoning : State::kContent) {
  if (options_.format == ChatFormat::kDeepSeekV3) options_.tool_calls = false;
  if (options_.tool_calls) {
    // The reference strips the "\n\n" the encoder writes before a block; models sometimes write
    // one newline or none.
    const std::string& open = dsml_tags(options_.format).block_open;
    block_starts_ = {"\n\n" + open, "\n" + open, open};
  }
  reasoning_markers_.push_back(tokens::kThinkEnd);
  for (const std::string& start : block_starts_) {
    reasoning_markers_.push_back(start);
    content_markers_.push_back(start);
  }
}

OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

OutputDelta OutputParser::feed(std::string_view text) {
  if (state_ == State::kDone) return {};
  pending_.append(text);
  return process(/*at_end=*/false);
}

OutputDelta OutputParser::finish() {
  if (state_ == State::kDone) return {};
  return process(/*at_end=*/true);
}

OutputDelta OutputParser::process(bool at_end) {
  OutputDelta delta;
  // Nothing the model writes after its end-of-sentence token belongs to the message.
  if (const std::size_t eos = pending_.find(tokens::kEos); eos != std::string::npos) {
    pending_.resize(eos);
    at_end = true;
  }
  std::size_t visible = pending_.size();
  if (!at_end) {
    const std::array<std::string_view, 1> eos = {tokens::kEos};
    visible -= partial_marker_length(pending_, eos);
  }
  const std::size_t used = run(std::string_view(pending_).substr(0, visible), at_end, delta);
  pending_.erase(0, used);
  if (at_end) {
    pending_.clear();
    state_ = State::kDone;
  }
  // Accumulate into the result.
  result_.reasoning_content += delta.reasoning_content;
  result_.content += delta.content;
  for (const ToolCallDelta& call : delta.tool_calls) {
    if (call.index == static_cast<int>(result_.tool_calls.size())) {
      ParsedToolCall parsed;
      parsed.id = call.id;
      parsed.name = call.name;
      result_.tool_calls.push_back(std::move(parsed));
    }
    result_.tool_calls[static_cast<std::size_t>(call.index)].arguments += call.arguments;
  }
  return delta;
}

std::size_t OutputParser::run(std::string_view view, bool at_end, OutputDelta& delta) {
  std::size_t pos = 0;
  while (true) {
    const std::string_view rest = view.substr(pos);
    std::size_t used = 0;
    const State before = state_;
    if (state_ == State::kReasoning || state_ == State::kContent) {
      used = scan_text(rest, at_end, delta);
    } else if (state_ == State::kBlock) {
      used = scan_block(rest, at_end, delta);
    } else {
      return view.size();
    }
    pos += used;
    // Stop when a pass made no progress and left the state alone: the rest needs more text.
    if (state_ == before && (used == 0 || pos == view.size())) return pos;
  }
}

void OutputParser::emit_text(std::string_view text, State kind, OutputDelta& delta) {
  if (text.empty()) return;
  if (kind == State::kReasoning) {
    delta.reasoning_content += text;
  } else {
    delta.content += text;
  }
}

std::size_t OutputParser::scan_text(std::string_view rest, bool at_end, OutputDelta& delta) {
  const bool reasoning = state_ == State::kReasoning;
  std::size_t skipped = 0;
  if (reasoning && reasoning_start_) {
    // A model that repeats the "<think>" its prompt ended with: not part of the reasoning.
    const std::string_view open = tokens::kThinkStart;
    if (rest.starts_with(open)) {
      skipped = open.size();
      rest.remove_prefix(skipped);
    } else if (!at_end && open.starts_with(rest)) {
      return 0;  // "<thi" could still be it
    }
    reasoning_start_ = false;
  }
  const std::vector<std::string_view>& markers = reasoning ? reasoning_markers_ : content_markers_;
  const MarkerHit hit = find_first_marker(rest, markers);
  if (hit.pos == std::string_view::npos) {
    const std::size_t settled =
        at_end ? rest.size() : rest.size() - partial_marker_length(rest, markers);
    emit_text(rest.substr(0, settled), state_, delta);
    return skipped + settled;
  }
  emit_text(rest.substr(0, hit.pos), state_, delta);
  const std::string_view marker = markers[hit.which];
  if (reasoning && hit.which == 0) {  // "</think>"
    state_ = State::kContent;
  } else {
    block_return_ = state_;
    block_raw_ = marker;
    block_ = std::make_unique<DsmlBlockParser>(dsml_tags(options_.format), next_call_index_,
                                               options_.tool_call_id_prefix);
    state_ = State::kBlock;
  }
  return skipped + hit.pos + marker.size();
}

std::size_t OutputParser::scan_block(std::string_view rest, bool at_end, OutputDelta& delta) {
  const bool was_committed = block_->committed();
  const DsmlBlockParser::Step step = block_->advance(rest, at_end, delta.tool_calls);
  if (!block_->committed()) block_raw_ += rest.substr(0, step.consumed);
  if (step.status == DsmlBlockParser::Status::kNeedMore) return step.consumed;
  next_call_index_ = block_->next_index();
  if (step.status == DsmlBlockParser::Status::kFailed && !was_committed && !block_->committed()) {
    // Not a tool call after all: the block's text is ordinary text of the state it came from.
    emit_text(block_raw_, block_return_, delta);
    state_ = block_return_;
  } else {
    state_ = State::kContent;
  }
  block_.reset();
  block_raw_.clear();
  return step.consumed;
}

ParserOptions parser_options_for(const EncodeOptions& request, const EncodeResult& encoded,
                                 std::string tool_call_id_prefix) {
  ParserOptions options;
  options.format = request.format;
  options.thinking_open = encoded.thinking_open;
  options.tool_calls = !request.tools.empty() && request.format != ChatFormat::kDeepSeekV3;
  options.tool_call_id_prefix = std::move(tool_call_id_prefix);
  return options;
}

ParsedOutput parse_output(std::string_view text, const ParserOptions& options) {
  OutputParser parser(options);
  parser.feed(text);
  parser.finish();
  return parser.result();
}

}  // namespace deepinfer::encoding
