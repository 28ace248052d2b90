// libFuzzer target for the streaming output parser (reasoning split and DSML tool calls). Input:
// one flags byte (format, thinking_open, tool_calls off, chunking seed), then the model output.
// Checks: no crash or hang, chunked parsing equals one-shot parsing, and tool-call arguments are
// valid JSON whenever the output is valid UTF-8.
#include "encoding/output_parser.h"
#include "encoding/python_json.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace {

using deepinfer::encoding::ParsedOutput;

bool same(const ParsedOutput& a, const ParsedOutput& b) {
  if (a.reasoning_content != b.reasoning_content || a.content != b.content ||
      a.tool_calls.size() != b.tool_calls.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.tool_calls.size(); ++i) {
    if (a.tool_calls[i].id != b.tool_calls[i].id || a.tool_calls[i].name != b.tool_calls[i].name ||
        a.tool_calls[i].arguments != b.tool_calls[i].arguments) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace deepinfer::encoding;
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  ParserOptions options;
  options.format = (flags & 1) != 0 ? ChatFormat::kDeepSeekV41 : ChatFormat::kDeepSeekV4;
  options.thinking_open = (flags & 2) != 0;
  options.tool_calls = (flags & 4) == 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const ParsedOutput whole = parse_output(text, options);

  // The same output in pseudo-random chunks of 1..16 bytes.
  OutputParser parser(options);
  std::uint32_t state = (flags >> 3) * 2654435761u + static_cast<std::uint32_t>(size);
  for (std::size_t pos = 0; pos < text.size();) {
    state = state * 1664525u + 1013904223u;
    const std::size_t n = 1 + (state >> 24) % 16;
    parser.feed(text.substr(pos, n));
    pos += n;
  }
  parser.finish();
  if (!same(whole, parser.result())) __builtin_trap();

  if (nlohmann::json::accept(json_quote(text))) {  // valid UTF-8
    for (const ParsedToolCall& call : whole.tool_calls) {
      if (!nlohmann::json::accept(call.arguments)) __builtin_trap();
    }
  }
  return 0;
}
