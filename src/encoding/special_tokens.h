// The literal text of DeepSeek's special tokens and DSML tags as they appear in prompts and model
// output (fullwidth bar U+FF5C "｜", lower one-eighth block U+2581 "▁").
#pragma once

#include "encoding/chat_types.h"

#include <string>
#include <string_view>

namespace deepinfer::encoding::tokens {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kSystem = "<｜System｜>";  // V4.1
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kImage = "<｜deepseek_image｜>";  // V4.1
inline constexpr std::string_view kToolResultOpen = "<tool_result>";
inline constexpr std::string_view kToolResultClose = "</tool_result>";

// V3 tool-call and tool-output tokens.
inline constexpr std::string_view kV3CallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kV3CallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view kV3CallBegin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view kV3CallEnd = "<｜tool▁call▁end｜>";
inline constexpr std::string_view kV3Sep = "<｜tool▁sep｜>";
inline constexpr std::string_view kV3OutputsBegin = "<｜tool▁outputs▁begin｜>";
inline constexpr std::string_view kV3OutputsEnd = "<｜tool▁outputs▁end｜>";
inline constexpr std::string_view kV3OutputBegin = "<｜tool▁output▁begin｜>";
inline constexpr std::string_view kV3OutputEnd = "<｜tool▁output▁end｜>";

// The quick-instruction task token for `task`, or empty if `task` is not one of the six.
std::string_view task_token(std::string_view task);

}  // namespace deepinfer::encoding::tokens

namespace deepinfer::encoding {

// DSML tag spellings of one format. V4: "tool_calls", "invoke", "parameter"; V4.1 puts a space
// after the DSML marker: " calls", " invoke", " parameter".
struct DsmlTags {
  std::string block_open;    // <｜DSML｜tool_calls>
  std::string block_close;   // </｜DSML｜tool_calls>
  std::string invoke_open;   // <｜DSML｜invoke   (attributes follow)
  std::string invoke_close;  // </｜DSML｜invoke>
  std::string param_open;    // <｜DSML｜parameter   (attributes follow)
  std::string param_close;   // </｜DSML｜parameter>
};

// The tags of a DSML format (V4 or V4.1); throws for V3, which has no DSML.
const DsmlTags& dsml_tags(ChatFormat format);

}  // namespace deepinfer::encoding
