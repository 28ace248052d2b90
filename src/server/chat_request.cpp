// Parsing of /v1/chat/completions: type checks of messages, tools and tool_choice, the thinking
// switches (values are the chat encoding's to judge), chat logprobs; and the body handed to the
// chat encoding.
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_protocol.h"

namespace deepinfer::server {
namespace {

constexpr int kMaxTopLogprobs = 20;

// content: "text" | null | [{"type": "text", "text": "..."}, ...]
void validate_content(const JsonFields& message, bool required) {
  const auto* content = message.get("content");
  const auto path = message.path("content");
  if (content == nullptr) {
    if (required) bad_field(path, "is required");
    return;
  }
  if (content->is_string()) return;
  if (!content->is_array()) bad_field(path, "must be a string or an array of content parts, got {}", json_type_name(*content));
  for (std::size_t i = 0; i < content->size(); ++i) {
    const JsonFields part((*content)[i], fmt::format("{}[{}]", path, i));
    const auto type = part.string("type");
    if (!type) bad_field(part.path("type"), "is required");
    if (*type != "text") bad_field(part.path("type"), "content part type '{}' is not supported (text only)", shorten(*type));
    if (!part.string("text")) bad_field(part.path("text"), "is required");
  }
}

void validate_tool_calls(const JsonFields& message) {
  const auto* calls = message.get("tool_calls");
  const auto path = message.path("tool_calls");
  if (!calls->is_array()) bad_field(path, "must be an array, got {}", json_type_name(*calls));
  for (std::size_t i = 0; i < calls->size(); ++i) {
    const JsonFields call((*calls)[i], fmt::format("{}[{}]", path, i));
    call.string("id");
    call.one_of("type", {"function"});
    const auto* function = call.get("function");
    if (function == nullptr) bad_field(call.path("function"), "is required");
    const JsonFields fn(*function, call.path("function"));
    const auto name = fn.string("name");
    if (!name || name->empty()) bad_field(fn.path("name"), "is required");
    // OpenAI sends arguments as a JSON string; some clients send the object itself.
    if (const auto* args = fn.get("arguments"); args != nullptr && !args->is_string() && !args->is_object())
      bad_field(fn.path("arguments"), "must be a string, got {}", json_type_name(*args));
  }
}

void validate_message(const nlohmann::json& value, std::size_t index) {
  const JsonFields message(value, fmt::format("messages[{}]", index));
  const auto role = message.one_of("role", {"system", "developer", "user", "assistant", "tool", "latest_reminder"});
  if (!role) bad_field(message.path("role"), "is required");
  message.string("name");
  if (*role == "assistant") {
    validate_content(message, false);
    if (message.has("tool_calls")) validate_tool_calls(message);
    message.string("reasoning_content");
    message.boolean("prefix");
  } else {
    validate_content(message, true);
  }
  if (*role == "tool") message.string("tool_call_id");
}

void parse_tool_choice(const JsonFields& body, ChatRequest& request) {
  const auto* tools = body.get("tools");
  const bool has_tools = tools != nullptr && !tools->empty();
  if (const auto* choice = body.get("tool_choice"); choice != nullptr && choice->is_string()) {
    request.tool_choice = *body.one_of("tool_choice", {"none", "auto", "required"});
  } else if (choice != nullptr) {
    const JsonFields named(*choice, "tool_choice");
    named.one_of("type", {"function"});
    const auto* function = named.get("function");
    if (function == nullptr) bad_field("tool_choice.function", "is required");
    const auto name = JsonFields(*function, "tool_choice.function").string("name");
    if (!name) bad_field("tool_choice.function.name", "is required");
    bool found = false;
    if (has_tools)
      for (const auto& tool : *tools) found = found || tool.at("function").at("name") == *name;
    if (!found) bad_field("tool_choice.function.name", "'{}' is not one of the request's tools", shorten(*name));
    request.tool_choice = "function";
    request.tool_choice_function = *name;
  }
  if (request.tool_choice == "required" && !has_tools) bad_field("tool_choice", "is 'required' but no tools were given");
  request.parse_tool_calls = has_tools && request.tool_choice != "none";
  // "none": the model must neither see nor call the tools.
  if (request.tool_choice == "none") request.encode_request.erase("tools");
}

}  // namespace

void validate_messages(const nlohmann::json& messages) {
  if (!messages.is_array()) bad_field("messages", "must be an array, got {}", json_type_name(messages));
  if (messages.empty()) bad_field("messages", "must not be empty");
  for (std::size_t i = 0; i < messages.size(); ++i) validate_message(messages[i], i);
}

void validate_tools(const nlohmann::json& tools) {
  if (!tools.is_array()) bad_field("tools", "must be an array, got {}", json_type_name(tools));
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const JsonFields tool(tools[i], fmt::format("tools[{}]", i));
    tool.one_of("type", {"function"});
    const auto* function = tool.get("function");
    if (function == nullptr) bad_field(tool.path("function"), "is required");
    const JsonFields fn(*function, tool.path("function"));
    const auto name = fn.string("name");
    if (!name || name->empty()) bad_field(fn.path("name"), "is required");
    fn.string("description");
    if (const auto* parameters = fn.get("parameters"); parameters != nullptr && !parameters->is_object())
      bad_field(fn.path("parameters"), "must be an object, got {}", json_type_name(*parameters));
    fn.boolean("strict");
  }
}

nlohmann::ordered_json chat_encode_request(const JsonFields& body, const nlohmann::ordered_json& ordered_body,
                                           const ChatDefaults& defaults) {
  const auto* messages = body.get("messages");
  if (messages == nullptr) bad_field("messages", "is required");
  validate_messages(*messages);
  if (const auto* tools = body.get("tools")) validate_tools(*tools);
  if (const auto* effort = body.get("reasoning_effort"); effort != nullptr && !effort->is_string() && !effort->is_number_integer())
    bad_field("reasoning_effort", "must be a string, got {}", json_type_name(*effort));
  if (const auto* thinking = body.get("thinking"); thinking != nullptr && !thinking->is_boolean())
    JsonFields(*thinking, "thinking").one_of("type", {"enabled", "disabled"});
  nlohmann::ordered_json request = ordered_body;
  const auto* kwargs = body.get("chat_template_kwargs");
  if (kwargs != nullptr) {
    const JsonFields k(*kwargs, "chat_template_kwargs");
    k.boolean("thinking");
    k.boolean("enable_thinking");
    k.boolean("drop_thinking");
  }
  // Server defaults fill the kwargs the request left out.
  auto& merged = request["chat_template_kwargs"];
  if (!merged.is_object()) merged = nlohmann::ordered_json::object();
  for (const auto& [key, value] : defaults.chat_template_kwargs.items())
    if (!merged.contains(key)) merged[key] = value;
  body.boolean("add_generation_prompt");
  if (body.boolean("continue_final_message").value_or(false)) {
    if (body.boolean("add_generation_prompt").value_or(false))
      bad_field("continue_final_message", "cannot be combined with 'add_generation_prompt': true");
    if (messages->back().value("role", "") != "assistant")
      bad_field("continue_final_message", "needs the last message to be the assistant's");
    request["add_generation_prompt"] = false;
  }
  return request;
}

ChatRequest parse_chat_request(const nlohmann::json& body, const nlohmann::ordered_json& ordered_body,
                               int32_t vocab_size, const ChatDefaults& defaults) {
  const JsonFields fields(body, "");
  ChatRequest request;
  request.encode_request = chat_encode_request(fields, ordered_body, defaults);
  request.common = parse_generation_fields(fields, vocab_size);
  parse_tool_choice(fields, request);
  request.parallel_tool_calls = fields.boolean("parallel_tool_calls").value_or(true);
  request.logprobs = fields.boolean("logprobs").value_or(false);
  if (auto v = fields.integer("top_logprobs", 0, kMaxTopLogprobs)) {
    if (!request.logprobs) bad_field("top_logprobs", "requires 'logprobs' to be true");
    request.top_logprobs = static_cast<int>(*v);
  }
  if (request.logprobs) request.common.sampling.logprobs = request.top_logprobs;
  return request;
}

}  // namespace deepinfer::server
