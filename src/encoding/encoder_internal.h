// Shared pieces of the chat encoders (validation, content flattening) and the per-format entry
// points that encode_chat dispatches to. Not part of the public API.
#pragma once

#include "encoding/chat_types.h"

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace deepinfer::encoding::detail {

// Checks what every format needs (roles, contents, tool calls, tools, response_format); throws
// deepinfer::Error naming the field and message index.
void validate_request(std::span<const Message> messages, const EncodeOptions& options);

// The arguments of an assistant tool call as an insertion-ordered JSON object; throws naming
// messages[message].tool_calls[call].function.arguments if they are not a JSON object.
Json parse_tool_arguments(const ToolCall& call, std::size_t message, std::size_t call_index);

// Parts of a content array as the encoders see them. Image parts become `image_text` (V4.1's
// placeholder) and are collected in `images`; other non-text parts become "[Unsupported <type>]"
// when `allow_unsupported`, else an error. Texts are joined with "\n\n" as the V4.1 reference does.
struct FlattenOptions {
  bool allow_images = false;
  bool allow_unsupported = false;
  bool drop_unsupported = false;  // V4.1 tool results: non-text, non-image parts are left out
  std::string_view image_text;
};
bool is_image_part(const ContentPart& part);
std::vector<std::string> part_texts(const std::vector<ContentPart>& parts,
                                    const FlattenOptions& options, std::vector<Json>& images,
                                    std::string_view where);
std::string join(const std::vector<std::string>& pieces, std::string_view separator);

// A message's content as one string: the string, the flattened parts, or "" when null.
std::string content_text(const Message& message, const FlattenOptions& options,
                         std::vector<Json>& images, std::string_view where);

EncodeResult encode_v3(std::span<const Message> messages, const EncodeOptions& options);
EncodeResult encode_dsv4(std::span<const Message> messages, const EncodeOptions& options);

}  // namespace deepinfer::encoding::detail
