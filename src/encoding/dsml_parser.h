// Incremental parser of the inside of one DSML tool-calls block (after "<｜DSML｜tool_calls>"):
//   ws* ( <｜DSML｜invoke name="NAME"> ws* ( <｜DSML｜parameter name="KEY" string="true|false">
//   VALUE</｜DSML｜parameter> ws* )* </｜DSML｜invoke> ws* )* </｜DSML｜tool_calls>
// (V4.1 spells the tags " calls", " invoke", " parameter"). Emits OpenAI tool-call deltas as it
// goes: the call header once its invoke tag is complete, string values as they stream (JSON
// escaped), non-string values when their parameter closes.
#pragma once

#include "encoding/output_parser.h"
#include "encoding/special_tokens.h"

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::encoding {

class DsmlBlockParser {
 public:
  enum class Status {
    kNeedMore,  // everything decidable is consumed; call again with more text
    kClosed,    // the closing block tag was consumed
    kFailed,    // text[consumed:] does not fit the grammar (or input ended); it is not a call
  };
  struct Step {
    Status status = Status::kNeedMore;
    std::size_t consumed = 0;
  };

  DsmlBlockParser(const DsmlTags& tags, int first_index, std::string id_prefix);

  // Parses `text`, the block's unconsumed input; appends deltas to `out`. With `at_end` (no more
  // input) an open call is closed and the step is kFailed unless the block closed. On kFailed
  // after a call was committed, any open call has been closed so its arguments are valid JSON.
  Step advance(std::string_view text, bool at_end, std::vector<ToolCallDelta>& out);

  // A call header has been emitted: the block can no longer turn back into content.
  bool committed() const { return committed_; }
  int next_index() const { return next_index_; }

 private:
  enum class State { kBetweenCalls, kInvokeBody, kValue };

  // What comes next at a tag boundary: whitespace, then the closing tag or an opening tag with
  // its attributes (consumed), or not enough text yet, or something else.
  struct Element {
    enum Kind { kNeedMore, kFail, kClose, kHeader } kind = kFail;
    std::string name = {};
    bool is_string = true;
  };
  Element next_element(std::string_view text, std::size_t& pos, bool at_end,
                       std::string_view close_tag, std::string_view open_tag,
                       bool with_string_flag) const;
  // Each consumes one grammar element at `pos` and returns nullopt to go on, or the step to
  // return when it needs more text or the block ended.
  std::optional<Step> between_calls(std::string_view text, std::size_t& pos, bool at_end,
                                    std::vector<ToolCallDelta>& out);
  std::optional<Step> invoke_body(std::string_view text, std::size_t& pos, bool at_end,
                                  std::vector<ToolCallDelta>& out);
  std::optional<Step> value(std::string_view text, std::size_t& pos, bool at_end,
                            std::vector<ToolCallDelta>& out);
  void add_value_text(std::string_view text, std::vector<ToolCallDelta>& out);
  void close_value(std::vector<ToolCallDelta>& out);
  void close_call(std::vector<ToolCallDelta>& out);
  Step fail(std::size_t pos, std::vector<ToolCallDelta>& out);
  void emit(std::vector<ToolCallDelta>& out, std::string_view arguments);

  const DsmlTags& tags_;
  std::string id_prefix_;
  State state_ = State::kBetweenCalls;
  bool committed_ = false;
  bool call_open_ = false;
  int index_ = -1;  // the open call
  int next_index_;
  bool args_started_ = false;
  std::set<std::string> keys_;  // of the open call; a repeated key is dropped
  // The open parameter.
  std::string key_;
  bool value_is_string_ = true;
  bool value_skipped_ = false;
  std::string raw_value_;  // non-string values, until they close
};

// Appends an arguments fragment to the deltas, merged into the last delta when it is the same call.
void append_tool_delta(std::vector<ToolCallDelta>& out, int index, std::string_view arguments);

}  // namespace deepinfer::encoding
