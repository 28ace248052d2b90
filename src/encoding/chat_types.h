// Request-side types of the chat encoders: OpenAI-shaped messages, request-level tools and the
// options that pick the DeepSeek chat format, thinking mode and reasoning effort.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::encoding {

// Insertion-ordered JSON: tool schemas and response formats are written into the prompt with the
// keys in the order the client sent them, as DeepSeek's reference encoder (Python dicts) does.
using Json = nlohmann::ordered_json;

enum class ChatFormat {
  kDeepSeekV3,   // the Jinja chat_template of DeepSeek-V3's tokenizer_config.json
  kDeepSeekV4,   // encoding_dsv4: DSML "<｜DSML｜tool_calls>", Think Max prefix
  kDeepSeekV41,  // encoding_dsv41: DSML "<｜DSML｜ calls>", "<｜System｜>", numeric effort, images
};

// "deepseek_v3" | "deepseek_v4" | "deepseek_v41" (also "deepseek_v4.1"); throws naming the value.
ChatFormat parse_chat_format(std::string_view name);
std::string_view chat_format_name(ChatFormat format);

// One element of a content array: {"type":"text","text":...} or any other part (image_url, ...),
// kept whole in `part` so the V4.1 encoder can hand image parts to the vision front-end.
struct ContentPart {
  std::string type;
  std::string text;  // "text" parts only
  Json part;         // the part exactly as sent
};

struct ToolCall {
  std::string id;
  std::string type = "function";
  std::string name;
  std::string arguments;  // JSON text, as OpenAI's function.arguments
};

struct Message {
  std::string role;  // system, developer, user, assistant, tool, latest_reminder (V4/V4.1)
  // Content is a string, a list of parts, or null/absent (both empty).
  std::optional<std::string> content;
  std::optional<std::vector<ContentPart>> content_parts;
  std::optional<std::string> name;
  std::vector<ToolCall> tool_calls;
  std::optional<std::string> tool_call_id;
  std::optional<std::string> reasoning_content;
  // DeepSeek quick-instruction task on a user/developer turn (V4/V4.1): action, query, authority,
  // domain, title, read_url. Internal to DeepSeek's serving; accepted for completeness.
  std::optional<std::string> task;
};

struct EncodeOptions {
  ChatFormat format = ChatFormat::kDeepSeekV4;
  // Thinking mode (V4/V4.1): the prompt opens "<think>" for the turn being generated. Ignored by V3.
  bool thinking = true;
  // V4: "none" (= chat mode), "minimal" | "low" | "medium" | "high" | "xhigh" (plain thinking),
  // "max" (Think Max prefix). V4.1: "none", "minimal" | "low" (25), "medium" | "high" (50),
  // "xhigh" (75), "max" (100) or an integer 1..100 written as a string; unset means "high".
  std::optional<std::string> reasoning_effort;
  // Drop the reasoning of assistant turns before the last user turn (the reference default; off
  // by itself whenever tools are given, so tool-loop reasoning round-trips).
  bool drop_thinking = true;
  // Append the assistant header after a final user turn. Off: the prompt ends with that turn.
  bool add_generation_prompt = true;
  // Leave a final assistant turn open (no end-of-sentence) so generation continues it.
  bool continue_final_message = false;
  bool add_bos = true;
  // Request-level tools, OpenAI shape: [{"type":"function","function":{"name":...,...}}]. V4/V4.1
  // render them into the leading system/developer message (inserting a system message if there
  // is none), as vLLM's DeepSeek-V4 wrapper does; the V3 template does not render tools.
  std::vector<Json> tools;
  // OpenAI response_format; "json_schema" and "json_object" render a "## Response Format" section
  // next to the tools (prompt-level only: enforce it with a grammar too). "text" renders nothing.
  std::optional<Json> response_format;
};

struct EncodeResult {
  std::string prompt;  // special tokens as their literal text; the tokenizer splits them out
  // The prompt ends inside an opened "<think>": the model's output starts with reasoning. Give it
  // to OutputParser (ParserOptions::thinking_open).
  bool thinking_open = false;
  // V4.1: the image parts, in the order of their "<｜deepseek_image｜>" placeholders in the prompt.
  std::vector<Json> images;
};

}  // namespace deepinfer::encoding
