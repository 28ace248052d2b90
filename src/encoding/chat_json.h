// Builds the chat encoder's inputs from OpenAI request JSON (messages, tools, response_format,
// reasoning_effort, DeepSeek's thinking switch, chat_template_kwargs). Type errors name the field
// and the message index, e.g. "messages[2].tool_calls[0].function.name: expected a string".
#pragma once

#include "encoding/chat_types.h"

#include <cstddef>
#include <vector>

namespace deepinfer::encoding {

// The "messages" array of a chat completion request.
std::vector<Message> messages_from_json(const Json& messages);
Message message_from_json(const Json& message, std::size_t index);

// The encoding-related fields of a chat completion request body:
//   tools, response_format, reasoning_effort (string or integer),
//   thinking: {"type": "enabled" | "disabled"} (DeepSeek API),
//   chat_template_kwargs: {thinking | enable_thinking: bool, drop_thinking: bool,
//                          reasoning_effort: ...} (vLLM/SGLang; these win over the top level),
//   add_generation_prompt, continue_final_message: bool.
// Thinking defaults to on (DeepSeek's API default). `format` is copied into the result.
EncodeOptions encode_options_from_request(const Json& request, ChatFormat format);

}  // namespace deepinfer::encoding
