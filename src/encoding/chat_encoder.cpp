// encode_chat: the validation every format shares, content flattening, and the dispatch to the
// V3 and V4/V4.1 encoders.
#include "encoding/chat_encoder.h"

#include "common/error.h"
#include "encoding/encoder_internal.h"
#include "encoding/special_tokens.h"

#include <algorithm>
#include <array>

namespace deepinfer::encoding {

namespace detail {

namespace {

bool known_role(std::string_view role, ChatFormat format) {
  static constexpr std::array<std::string_view, 5> kOpenAi = {"system", "developer", "user",
                                                              "assistant", "tool"};
  if (std::find(kOpenAi.begin(), kOpenAi.end(), role) != kOpenAi.end()) return true;
  return format != ChatFormat::kDeepSeekV3 && role == "latest_reminder";
}

void validate_tools(const std::vector<Json>& tools) {
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    DI_CHECK(tool.is_object(), "tools[{}]: expected an object, got {}", i, tool.type_name());
    DI_CHECK(tool.contains("type") && tool["type"] == "function",
             "tools[{}].type: expected \"function\", got {}", i,
             tool.contains("type") ? tool["type"].dump() : "nothing");
    DI_CHECK(tool.contains("function") && tool["function"].is_object(),
             "tools[{}].function: expected an object", i);
    const Json& function = tool["function"];
    DI_CHECK(function.contains("name") && function["name"].is_string() &&
                 !function["name"].get_ref<const std::string&>().empty(),
             "tools[{}].function.name: expected a non-empty string", i);
  }
}

void validate_response_format(const std::optional<Json>& format) {
  if (!format) return;
  DI_CHECK(format->is_object() && format->contains("type") && (*format)["type"].is_string(),
           "response_format: expected an object with a string \"type\", got {}", format->dump());
  const std::string type = (*format)["type"].get<std::string>();
  DI_CHECK(type == "text" || type == "json_object" || type == "json_schema",
           "response_format.type: expected text, json_object or json_schema, got \"{}\"", type);
  if (type == "json_schema") {
    DI_CHECK(format->contains("json_schema") && (*format)["json_schema"].is_object(),
             "response_format.json_schema: expected an object");
  }
}

// An image part that names its image: image_url as a string or {"url": ...}, or (the V4.1
// reference's "image" blocks) a source, url or data field.
bool has_image_source(const Json& part) {
  if (!part.is_object()) return false;
  const auto non_empty = [](const Json& v) {
    return (v.is_string() && !v.get_ref<const std::string&>().empty()) || v.is_object();
  };
  if (const auto it = part.find("image_url"); it != part.end()) {
    if (it->is_string()) return non_empty(*it);
    return it->is_object() && it->contains("url") && non_empty((*it)["url"]) &&
           (*it)["url"].is_string();
  }
  for (const char* key : {"source", "url", "data"}) {
    if (part.contains(key) && non_empty(part[key])) return true;
  }
  return false;
}

void validate_message(const Message& message, std::size_t i, const EncodeOptions& options) {
  const std::string_view role = message.role;
  DI_CHECK(known_role(role, options.format), "messages[{}].role: unknown role \"{}\" for {}", i,
           role, chat_format_name(options.format));
  const bool has_content = message.content.has_value() || message.content_parts.has_value();
  if (role != "assistant") {
    DI_CHECK(has_content, "messages[{}].content: required for role \"{}\"", i, role);
  }
  if (role == "tool") {
    DI_CHECK(message.tool_call_id && !message.tool_call_id->empty(),
             "messages[{}].tool_call_id: required for role \"tool\"", i);
  }
  if (!message.tool_calls.empty()) {
    DI_CHECK(role == "assistant", "messages[{}].tool_calls: only assistant messages carry tool "
             "calls (role is \"{}\")", i, role);
  }
  for (std::size_t j = 0; j < message.tool_calls.size(); ++j) {
    const ToolCall& call = message.tool_calls[j];
    DI_CHECK(call.type == "function", "messages[{}].tool_calls[{}].type: expected \"function\", "
             "got \"{}\"", i, j, call.type);
    DI_CHECK(!call.name.empty(), "messages[{}].tool_calls[{}].function.name: empty", i, j);
    parse_tool_arguments(call, i, j);
  }
  if (message.task) {
    DI_CHECK(options.format != ChatFormat::kDeepSeekV3,
             "messages[{}].task: not supported by deepseek_v3", i);
    DI_CHECK(!tokens::task_token(*message.task).empty(),
             "messages[{}].task: unknown task \"{}\" (expected action, query, authority, domain, "
             "title or read_url)", i, *message.task);
  }
}

}  // namespace

Json parse_tool_arguments(const ToolCall& call, std::size_t message, std::size_t call_index) {
  // nlohmann's lexer takes a NUL byte for the end of input; JSON text never contains one.
  Json arguments = call.arguments.find('\0') == std::string::npos
                       ? Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false)
                       : Json(Json::value_t::discarded);
  DI_CHECK(!arguments.is_discarded(),
           "messages[{}].tool_calls[{}].function.arguments: not valid JSON: {}", message,
           call_index, call.arguments.substr(0, 200));
  DI_CHECK(arguments.is_object(),
           "messages[{}].tool_calls[{}].function.arguments: expected a JSON object, got {}",
           message, call_index, arguments.type_name());
  return arguments;
}

void validate_request(std::span<const Message> messages, const EncodeOptions& options) {
  DI_CHECK(!messages.empty(), "messages: at least one message is required");
  for (std::size_t i = 0; i < messages.size(); ++i) validate_message(messages[i], i, options);
  validate_tools(options.tools);
  validate_response_format(options.response_format);
  if (options.continue_final_message) {
    DI_CHECK(messages.back().role == "assistant",
             "continue_final_message: the last message must be an assistant message, got \"{}\"",
             messages.back().role);
  }
}

bool is_image_part(const ContentPart& part) {
  return part.type == "image_url" || part.type == "image";
}

std::vector<std::string> part_texts(const std::vector<ContentPart>& parts,
                                    const FlattenOptions& options, std::vector<Json>& images,
                                    std::string_view where) {
  std::vector<std::string> texts;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    const ContentPart& part = parts[k];
    if (part.type == "text") {
      texts.push_back(part.text);
    } else if (is_image_part(part) && options.allow_images) {
      DI_CHECK(has_image_source(part.part), "{}.content[{}]: image part without a url or data",
               where, k);
      texts.emplace_back(options.image_text);
      images.push_back(part.part);
    } else if (options.drop_unsupported) {
      continue;
    } else {
      DI_CHECK(options.allow_unsupported, "{}.content[{}]: content part type \"{}\" is not "
               "supported here", where, k, part.type);
      texts.push_back("[Unsupported " + part.type + "]");
    }
  }
  return texts;
}

std::string join(const std::vector<std::string>& pieces, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) out += separator;
    out += pieces[i];
  }
  return out;
}

std::string content_text(const Message& message, const FlattenOptions& options,
                         std::vector<Json>& images, std::string_view where) {
  if (message.content) return *message.content;
  if (message.content_parts) {
    return join(part_texts(*message.content_parts, options, images, where), "\n\n");
  }
  return {};
}

}  // namespace detail

EncodeResult encode_chat(std::span<const Message> messages, const EncodeOptions& options) {
  detail::validate_request(messages, options);
  if (options.format == ChatFormat::kDeepSeekV3) return detail::encode_v3(messages, options);
  return detail::encode_dsv4(messages, options);
}

}  // namespace deepinfer::encoding
