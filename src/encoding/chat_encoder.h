// Chat encoding for DeepSeek models, natively in C++ (no template engine): OpenAI-shaped
// messages -> one prompt string with special tokens as literal text. Formats: the V3 Jinja
// template of tokenizer_config.json, and DeepSeek's V4 / V4.1 reference encoders
// (encoding_dsv4 / encoding_dsv41: thinking modes, reasoning effort, DSML tool calls).
#pragma once

#include "encoding/chat_types.h"

#include <span>

namespace deepinfer::encoding {

// Validates and encodes. Invalid input (unknown role, tool message without tool_call_id, tool
// call arguments that are not a JSON object, malformed tools or response_format, an unsupported
// reasoning_effort, ...) throws deepinfer::Error naming the field and the message index.
EncodeResult encode_chat(std::span<const Message> messages, const EncodeOptions& options);

}  // namespace deepinfer::encoding
