// Tool-call grammars: an output that is one DSML tool-calls block (the syntax DeepSeek V4 chat
// templates teach the model) whose invokes name the request's tools and whose parameters match
// each tool's JSON schema. Used for OpenAI's tool_choice "required" and a named function.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

// `spec` is a JSON object:
//   "tags":      {"block_open", "block_close", "invoke_open", "invoke_close", "param_open",
//                 "param_close"}: the DSML spellings (encoding::DsmlTags of the chat format),
//   "tools":     [{"name": ..., "parameters": {JSON schema}}] (OpenAI's {"type": "function",
//                 "function": {...}} objects are accepted too); order is kept,
//   "function":  optional: every call must be this tool,
//   "parallel":  optional, default true: one or more calls; false: exactly one.
// The block looks as the chat encoding renders calls:
//   [\n\n]<block_open>\n<invoke_open name="NAME">\n(<param_open name="KEY" string="true|false">
//   VALUE<param_close>\n)*<invoke_close>(\n<invoke_open ...>...)*\n<block_close>
// A parameter whose schema is a plain string (or an enum/const of strings) is written as is
// (string="true"; it cannot contain "</"); any other is JSON matching its schema with the
// template's ", " / ": " separators (string="false"). Required parameters always appear, in the
// schema's property order; optional ones may. Throws deepinfer::Error naming the tool and
// parameter for schemas the JSON front end rejects.
Grammar grammar_from_tool_calls(std::string_view spec);

}  // namespace deepinfer::grammar
