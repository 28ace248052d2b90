// Task tokens and the DSML tag spellings of V4 and V4.1 (see special_tokens.h).
#include "encoding/special_tokens.h"

#include "common/error.h"

#include <array>
#include <utility>

namespace deepinfer::encoding {

namespace tokens {

std::string_view task_token(std::string_view task) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kTasks = {{
      {"action", "<｜action｜>"},
      {"query", "<｜query｜>"},
      {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"},
      {"title", "<｜title｜>"},
      {"read_url", "<｜read_url｜>"},
  }};
  for (const auto& [name, token] : kTasks) {
    if (name == task) return token;
  }
  return {};
}

}  // namespace tokens

namespace {

DsmlTags make_tags(std::string_view block, std::string_view invoke, std::string_view param) {
  const std::string dsml(tokens::kDsml);
  auto open = [&](std::string_view tag) { return "<" + dsml + std::string(tag); };
  auto close = [&](std::string_view tag) { return "</" + dsml + std::string(tag) + ">"; };
  return DsmlTags{
      .block_open = open(block) + ">",
      .block_close = close(block),
      .invoke_open = open(invoke),
      .invoke_close = close(invoke),
      .param_open = open(param),
      .param_close = close(param),
  };
}

}  // namespace

const DsmlTags& dsml_tags(ChatFormat format) {
  static const DsmlTags kV4 = make_tags("tool_calls", "invoke", "parameter");
  static const DsmlTags kV41 = make_tags(" calls", " invoke", " parameter");
  switch (format) {
    case ChatFormat::kDeepSeekV4: return kV4;
    case ChatFormat::kDeepSeekV41: return kV41;
    case ChatFormat::kDeepSeekV3: break;
  }
  throw_error("the {} chat format has no DSML tool calls", chat_format_name(format));
}

ChatFormat parse_chat_format(std::string_view name) {
  if (name == "deepseek_v3") return ChatFormat::kDeepSeekV3;
  if (name == "deepseek_v4") return ChatFormat::kDeepSeekV4;
  if (name == "deepseek_v41" || name == "deepseek_v4.1") return ChatFormat::kDeepSeekV41;
  throw_error("unknown chat format \"{}\" (expected deepseek_v3, deepseek_v4 or deepseek_v41)",
              name);
}

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::kDeepSeekV3: return "deepseek_v3";
    case ChatFormat::kDeepSeekV4: return "deepseek_v4";
    case ChatFormat::kDeepSeekV41: return "deepseek_v41";
  }
  return "unknown";
}

}  // namespace deepinfer::encoding
