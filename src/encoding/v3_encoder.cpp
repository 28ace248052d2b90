// DeepSeek-V3 chat encoding: a native rendering of the Jinja chat_template in DeepSeek-V3's
// tokenizer_config.json, byte-identical to it for the message shapes it supports (checked against
// Jinja's own output by tests/encoding/v3_encoder_test.cpp), including its quirks: system
// messages gathered up front, a global "first tool call" flag, and tools / reasoning not rendered.
#include "common/error.h"
#include "encoding/encoder_internal.h"
#include "encoding/special_tokens.h"

namespace deepinfer::encoding::detail {

namespace {

struct V3State {
  bool first_call_done = false;  // the template's ns.is_first: set once for the conversation
  bool in_tool_outputs = false;  // ns.is_tool
  bool first_output = true;      // ns.is_output_first: never reset, as in the template
};

std::string text_of(const Message& m, std::size_t index) {
  std::vector<Json> no_images;
  return content_text(m, FlattenOptions{}, no_images, fmt::format("messages[{}]", index));
}

void render_tool_calls(const Message& m, V3State& state, std::string& p) {
  for (const ToolCall& call : m.tool_calls) {
    const std::string body = call.type + std::string(tokens::kV3Sep) + call.name +
                             "\n```json\n" + call.arguments + "\n```" +
                             std::string(tokens::kV3CallEnd);
    if (!state.first_call_done) {
      p += tokens::kAssistant;
      p += tokens::kV3CallsBegin;
      p += tokens::kV3CallBegin;
      p += body;
      state.first_call_done = true;
    } else {
      p += "\n";
      p += tokens::kV3CallBegin;
      p += body;
      p += tokens::kV3CallsEnd;
      p += tokens::kEos;
    }
  }
}

}  // namespace

EncodeResult encode_v3(std::span<const Message> messages, const EncodeOptions& options) {
  EncodeResult out;
  std::string& p = out.prompt;
  if (options.add_bos) p += tokens::kBos;
  // System (and developer, OpenAI's newer name for it) messages, joined, before everything.
  std::vector<std::string> system;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role == "system" || role == "developer") system.push_back(text_of(messages[i], i));
  }
  p += join(system, "\n\n");

  V3State state;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role == "user") {
      state.in_tool_outputs = false;
      p += tokens::kUser;
      p += text_of(m, i);
    } else if (m.role == "assistant") {
      const std::string content = text_of(m, i);
      // The template renders tool calls only for content None; an empty string alongside tool
      // calls (what many clients send) is taken as None so the calls are not lost.
      const bool calls_only = !m.tool_calls.empty() && content.empty();
      const bool continue_open = options.continue_final_message && i + 1 == messages.size();
      if (calls_only || (!m.content && !m.content_parts)) {
        state.in_tool_outputs = false;
        render_tool_calls(m, state, p);
      } else {
        p += state.in_tool_outputs ? tokens::kV3OutputsEnd : tokens::kAssistant;
        p += content;
        if (!continue_open) p += tokens::kEos;
        state.in_tool_outputs = false;
      }
    } else if (m.role == "tool") {
      state.in_tool_outputs = true;
      if (state.first_output) {
        p += tokens::kV3OutputsBegin;
        state.first_output = false;
      } else {
        p += "\n";
      }
      p += tokens::kV3OutputBegin;
      p += text_of(m, i);
      p += tokens::kV3OutputEnd;
    }
  }
  if (state.in_tool_outputs) p += tokens::kV3OutputsEnd;
  if (options.add_generation_prompt && !state.in_tool_outputs &&
      !(options.continue_final_message && messages.back().role == "assistant")) {
    p += tokens::kAssistant;
  }
  return out;
}

}  // namespace deepinfer::encoding::detail
