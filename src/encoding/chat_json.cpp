// OpenAI request JSON -> Message / EncodeOptions (see chat_json.h). Only shapes are checked here;
// meaning (known roles, tool_call_id present, arguments that parse) is checked by the encoder, so
// hand-built structs get the same checks.
#include "encoding/chat_json.h"

#include "common/error.h"
#include "encoding/python_json.h"

#include <string>

namespace deepinfer::encoding {

namespace {

const char* type_name(const Json& value) { return value.type_name(); }

std::string get_string(const Json& object, const char* key, const std::string& where) {
  const Json& value = object.at(key);
  DI_CHECK(value.is_string(), "{}.{}: expected a string, got {}", where, key, type_name(value));
  return value.get<std::string>();
}

// A string field that may also be null or absent.
std::optional<std::string> get_optional_string(const Json& object, const char* key,
                                               const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  DI_CHECK(it->is_string(), "{}.{}: expected a string or null, got {}", where, key,
           type_name(*it));
  return it->get<std::string>();
}

std::vector<ContentPart> parts_from_json(const Json& parts, const std::string& where) {
  std::vector<ContentPart> out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Json& part = parts[i];
    const std::string at = fmt::format("{}.content[{}]", where, i);
    DI_CHECK(part.is_object(), "{}: expected a content part object, got {}", at, type_name(part));
    DI_CHECK(part.contains("type"), "{}: missing \"type\"", at);
    ContentPart parsed;
    parsed.type = get_string(part, "type", at);
    if (parsed.type == "text") {
      DI_CHECK(part.contains("text"), "{}: text part without \"text\"", at);
      parsed.text = get_string(part, "text", at);
    }
    parsed.part = part;
    out.push_back(std::move(parsed));
  }
  return out;
}

ToolCall tool_call_from_json(const Json& call, const std::string& at) {
  DI_CHECK(call.is_object(), "{}: expected an object, got {}", at, type_name(call));
  ToolCall parsed;
  if (auto id = get_optional_string(call, "id", at)) parsed.id = *id;
  if (auto type = get_optional_string(call, "type", at)) parsed.type = *type;
  DI_CHECK(call.contains("function") && call["function"].is_object(),
           "{}.function: expected an object", at);
  const Json& function = call["function"];
  const std::string fat = at + ".function";
  DI_CHECK(function.contains("name"), "{}: missing \"name\"", fat);
  parsed.name = get_string(function, "name", fat);
  const auto args = function.find("arguments");
  if (args == function.end() || args->is_null()) {
    parsed.arguments = "{}";
  } else if (args->is_string()) {
    parsed.arguments = args->get<std::string>();
  } else if (args->is_object()) {
    // Some clients send the arguments as an object rather than JSON text.
    parsed.arguments = python_json_dumps(*args);
  } else {
    throw_error("{}.arguments: expected a JSON string or object, got {}", fat,
                type_name(*args));
  }
  return parsed;
}

}  // namespace

Message message_from_json(const Json& message, std::size_t index) {
  const std::string where = fmt::format("messages[{}]", index);
  DI_CHECK(message.is_object(), "{}: expected an object, got {}", where, type_name(message));
  DI_CHECK(message.contains("role"), "{}: missing \"role\"", where);
  Message out;
  out.role = get_string(message, "role", where);

  if (const auto it = message.find("content"); it != message.end() && !it->is_null()) {
    if (it->is_string()) {
      out.content = it->get<std::string>();
    } else if (it->is_array()) {
      out.content_parts = parts_from_json(*it, where);
    } else {
      throw_error("{}.content: expected a string, an array of parts or null, got {}", where,
                  type_name(*it));
    }
  }
  out.name = get_optional_string(message, "name", where);
  out.tool_call_id = get_optional_string(message, "tool_call_id", where);
  out.reasoning_content = get_optional_string(message, "reasoning_content", where);
  if (!out.reasoning_content) {
    out.reasoning_content = get_optional_string(message, "reasoning", where);  // vLLM's name
  }
  out.task = get_optional_string(message, "task", where);
  if (const auto it = message.find("tool_calls"); it != message.end() && !it->is_null()) {
    DI_CHECK(it->is_array(), "{}.tool_calls: expected an array, got {}", where, type_name(*it));
    for (std::size_t j = 0; j < it->size(); ++j) {
      out.tool_calls.push_back(
          tool_call_from_json((*it)[j], fmt::format("{}.tool_calls[{}]", where, j)));
    }
  }
  return out;
}

std::vector<Message> messages_from_json(const Json& messages) {
  DI_CHECK(messages.is_array(), "messages: expected an array, got {}", type_name(messages));
  std::vector<Message> out;
  out.reserve(messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    out.push_back(message_from_json(messages[i], i));
  }
  return out;
}

namespace {

std::optional<std::string> effort_from_json(const Json& value, const char* where) {
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  throw_error("{}: expected a string or an integer, got {}", where, type_name(value));
}

bool get_bool(const Json& object, const char* key, const char* where) {
  const Json& value = object.at(key);
  DI_CHECK(value.is_boolean(), "{}.{}: expected true or false, got {}", where, key,
           value.dump());
  return value.get<bool>();
}

void read_template_kwargs(const Json& kwargs, EncodeOptions& options) {
  DI_CHECK(kwargs.is_object(), "chat_template_kwargs: expected an object, got {}",
           type_name(kwargs));
  for (const char* key : {"thinking", "enable_thinking"}) {
    if (kwargs.contains(key) && !kwargs[key].is_null()) {
      options.thinking = get_bool(kwargs, key, "chat_template_kwargs");
    }
  }
  if (kwargs.contains("drop_thinking")) {
    options.drop_thinking = get_bool(kwargs, "drop_thinking", "chat_template_kwargs");
  }
  if (kwargs.contains("reasoning_effort")) {
    options.reasoning_effort =
        effort_from_json(kwargs["reasoning_effort"], "chat_template_kwargs.reasoning_effort");
  }
}

}  // namespace

EncodeOptions encode_options_from_request(const Json& request, ChatFormat format) {
  DI_CHECK(request.is_object(), "request: expected a JSON object, got {}", type_name(request));
  EncodeOptions options;
  options.format = format;
  if (const auto it = request.find("tools"); it != request.end() && !it->is_null()) {
    DI_CHECK(it->is_array(), "tools: expected an array, got {}", type_name(*it));
    options.tools.assign(it->begin(), it->end());
  }
  if (const auto it = request.find("response_format"); it != request.end() && !it->is_null()) {
    options.response_format = *it;
  }
  if (const auto it = request.find("reasoning_effort"); it != request.end()) {
    options.reasoning_effort = effort_from_json(*it, "reasoning_effort");
  }
  if (const auto it = request.find("thinking"); it != request.end() && !it->is_null()) {
    DI_CHECK(it->is_object() && it->contains("type") && (*it)["type"].is_string(),
             "thinking: expected {{\"type\": \"enabled\" | \"disabled\"}}, got {}", it->dump());
    const std::string type = (*it)["type"].get<std::string>();
    DI_CHECK(type == "enabled" || type == "disabled",
             "thinking.type: expected \"enabled\" or \"disabled\", got \"{}\"", type);
    options.thinking = type == "enabled";
  }
  if (const auto it = request.find("chat_template_kwargs"); it != request.end() && !it->is_null()) {
    read_template_kwargs(*it, options);
  }
  for (const char* key : {"add_generation_prompt", "continue_final_message"}) {
    if (request.contains(key) && !request[key].is_null()) {
      const bool value = get_bool(request, key, "request");
      (std::string_view(key) == "add_generation_prompt" ? options.add_generation_prompt
                                                         : options.continue_final_message) = value;
    }
  }
  return options;
}

}  // namespace deepinfer::encoding
