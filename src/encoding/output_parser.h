// Streaming parser of DeepSeek model output: splits reasoning_content from content at "</think>"
// and turns DSML tool-call blocks into OpenAI tool calls, from chunks of any size. The final
// result is the same whatever the chunk boundaries; text that could still become a marker
// (e.g. a trailing "</th") is held back until it is decided. Malformed output never throws:
// what cannot be parsed stays content.
#pragma once

#include "encoding/chat_types.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::encoding {

// One streamed piece of a tool call, the way OpenAI streams them: the first delta of a call
// carries index, id and name (with arguments ""), later ones carry argument text to append.
struct ToolCallDelta {
  int index = 0;
  std::string id;         // first delta of a call only
  std::string name;       // first delta of a call only
  std::string arguments;  // a fragment of function.arguments (JSON text when concatenated)
};

struct OutputDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
};

struct ParsedToolCall {
  std::string id;
  std::string type = "function";
  std::string name;
  std::string arguments;  // a JSON object as text: {"key": value, ...}
};

struct ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
};

struct ParserOptions {
  ChatFormat format = ChatFormat::kDeepSeekV4;
  // The prompt opened "<think>" (EncodeResult::thinking_open): output starts as reasoning.
  bool thinking_open = false;
  // Parse DSML tool calls (V4/V4.1). Off, e.g. when the request has no tools: blocks stay content.
  bool tool_calls = true;
  // Tool call ids are this prefix + the call's index; make it unique per request.
  std::string tool_call_id_prefix = "call_";
};

class DsmlBlockParser;

class OutputParser {
 public:
  explicit OutputParser(ParserOptions options);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  // Consumes the next piece of model output (any split, even inside a UTF-8 sequence) and returns
  // what became certain. The end-of-sentence token's text ends the output: the rest is ignored.
  OutputDelta feed(std::string_view text);
  // End of output: releases held-back text and closes an unfinished tool call (its arguments stay
  // a JSON object). Further feeds are ignored.
  OutputDelta finish();

  // Everything emitted so far, accumulated.
  const ParsedOutput& result() const { return result_; }
  // Reasoning is over ("</think>" or a tool-call block seen, or the prompt did not open it).
  bool reasoning_done() const { return state_ != State::kReasoning; }
  bool finished() const { return state_ == State::kDone; }

 private:
  enum class State { kReasoning, kContent, kBlock, kDone };

  OutputDelta process(bool at_end);
  std::size_t run(std::string_view view, bool at_end, OutputDelta& delta);
  std::size_t scan_text(std::string_view rest, bool at_end, OutputDelta& delta);
  std::size_t scan_block(std::string_view rest, bool at_end, OutputDelta& delta);
  void emit_text(std::string_view text, State kind, OutputDelta& delta);

  ParserOptions options_;
  std::vector<std::string> block_starts_;  // "\n\n<tag>", "\n<tag>", "<tag>"
  std::vector<std::string_view> reasoning_markers_;
  std::vector<std::string_view> content_markers_;
  State state_;
  State block_return_ = State::kContent;  // where a block that fails before any call returns
  bool reasoning_start_ = true;           // nothing emitted as reasoning yet
  std::string pending_;
  std::string block_raw_;  // the block's text so far, until its first call is committed
  std::unique_ptr<DsmlBlockParser> block_;
  int next_call_index_ = 0;
  ParsedOutput result_;
};

// Parser options for the output of an encoded request: its format, reasoning first when the
// prompt opened "<think>", tool calls parsed when the request offered tools.
ParserOptions parser_options_for(const EncodeOptions& request, const EncodeResult& encoded,
                                 std::string tool_call_id_prefix = "call_");

// One-shot parse of a complete output: feed(text) then finish().
ParsedOutput parse_output(std::string_view text, const ParserOptions& options);

}  // namespace deepinfer::encoding
