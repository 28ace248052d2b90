// Helpers shared by the encoding tests: message builders, string concatenation of token
// constants, fixture loading and error-message expectations.
#pragma once

#include "common/error.h"
#include "encoding/chat_types.h"
#include "encoding/special_tokens.h"

#include <gtest/gtest.h>

#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer::encoding::testing {

using namespace deepinfer::encoding::tokens;  // NOLINT: the token names read best unqualified

template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (out.append(std::string_view(parts)), ...);
  return out;
}

inline Message msg(std::string role, std::string content) {
  Message m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

inline ToolCall call(std::string id, std::string name, std::string arguments) {
  ToolCall c;
  c.id = std::move(id);
  c.name = std::move(name);
  c.arguments = std::move(arguments);
  return c;
}

inline Message assistant(std::optional<std::string> content,
                         std::optional<std::string> reasoning = std::nullopt,
                         std::vector<ToolCall> calls = {}) {
  Message m;
  m.role = "assistant";
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  m.tool_calls = std::move(calls);
  return m;
}

inline Message tool(std::string id, std::string content) {
  Message m = msg("tool", std::move(content));
  m.tool_call_id = std::move(id);
  return m;
}

inline Json weather_tool() {
  return Json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Weather for a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
      "required": ["city"]}}})");
}

inline Json load_fixture(const std::string& name) {
  const std::string path = std::string(DEEPINFER_SOURCE_DIR) + "/tests/encoding/fixtures/" + name;
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "missing fixture " << path;
  return Json::parse(file);
}

// Runs `f`, expecting a deepinfer::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
    ADD_FAILURE() << "expected deepinfer::Error";
  } catch (const Error& e) {
    for (const std::string_view part : parts) {
      EXPECT_NE(std::string_view(e.what()).find(part), std::string_view::npos)
          << "error \"" << e.what() << "\" does not mention \"" << part << "\"";
    }
  }
}

}  // namespace deepinfer::encoding::testing
