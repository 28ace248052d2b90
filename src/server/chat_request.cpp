// Parsing of /v1/chat/completions: messages (validated and normalised so the chat encoding sees
// plain strings), tools and tool_choice, thinking mode and effort, chat logprobs.
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_protocol.h"

namespace deepinfer::server {
namespace {

constexpr int kMaxTopLogprobs = 20;

// content: "text" | null | [{"type": "text", "text": "..."}, ...]; parts are joined with newlines
// as vLLM does.
nlohmann::json normalize_content(const JsonFields& message, bool required) {
  const auto* content = message.get("content");
  const auto path = message.path("content");
  if (content == nullptr) {
    if (required) bad_field(path, "is required");
    return nullptr;
  }
  if (content->is_string()) return *content;
  if (!content->is_array()) bad_field(path, "must be a string or an array of content parts, got {}", json_type_name(*content));
  std::string text;
  for (std::size_t i = 0; i < content->size(); ++i) {
    const JsonFields part((*content)[i], fmt::format("{}[{}]", path, i));
    const auto type = part.string("type");
    if (!type) bad_field(part.path("type"), "is required");
    if (*type != "text" && *type != "input_text")
      bad_field(part.path("type"), "content part type '{}' is not supported (text only)", shorten(*type));
    const auto part_text = part.string("text");
    if (!part_text) bad_field(part.path("text"), "is required");
    if (i > 0) text += '\n';
    text += *part_text;
  }
  return text;
}

nlohmann::json normalize_tool_calls(const JsonFields& message) {
  const auto* calls = message.get("tool_calls");
  const auto path = message.path("tool_calls");
  if (!calls->is_array()) bad_field(path, "must be an array, got {}", json_type_name(*calls));
  nlohmann::json result = nlohmann::json::array();
  for (std::size_t i = 0; i < calls->size(); ++i) {
    const JsonFields call((*calls)[i], fmt::format("{}[{}]", path, i));
    call.one_of("type", {"function"});
    const auto* function = call.get("function");
    if (function == nullptr) bad_field(call.path("function"), "is required");
    const JsonFields fn(*function, call.path("function"));
    const auto name = fn.string("name");
    if (!name || name->empty()) bad_field(fn.path("name"), "is required");
    // Arguments are a JSON string in OpenAI's format; some clients send the object itself.
    std::string arguments = "{}";
    if (const auto* args = fn.get("arguments")) {
      if (args->is_string()) arguments = args->get<std::string>();
      else if (args->is_object()) arguments = args->dump();
      else bad_field(fn.path("arguments"), "must be a string, got {}", json_type_name(*args));
    }
    result.push_back({{"id", call.string("id").value_or(fmt::format("call_{}", i))},
                      {"type", "function"},
                      {"function", {{"name", *name}, {"arguments", arguments}}}});
  }
  return result;
}

nlohmann::json normalize_message(const nlohmann::json& value, std::size_t index) {
  const JsonFields message(value, fmt::format("messages[{}]", index));
  const auto role = message.one_of("role", {"system", "developer", "user", "assistant", "tool"});
  if (!role) bad_field(message.path("role"), "is required");
  nlohmann::json out = {{"role", *role}};
  if (const auto name = message.string("name")) out["name"] = *name;
  if (*role == "assistant") {
    const bool has_calls = message.has("tool_calls");
    out["content"] = normalize_content(message, false);
    if (has_calls) out["tool_calls"] = normalize_tool_calls(message);
    auto reasoning = message.string("reasoning_content");
    if (!reasoning) reasoning = message.string("reasoning");
    if (reasoning) out["reasoning_content"] = *reasoning;
    if (message.boolean("prefix").value_or(false)) out["prefix"] = true;
  } else {
    out["content"] = normalize_content(message, true);
  }
  if (*role == "tool") out["tool_call_id"] = message.string("tool_call_id").value_or("");
  return out;
}

void parse_tool_choice(const JsonFields& body, ChatRequest& request) {
  const auto* choice = body.get("tool_choice");
  const bool has_tools = !request.prompt.tools.is_null() && !request.prompt.tools.empty();
  if (choice != nullptr && choice->is_string()) {
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
      for (const auto& tool : request.prompt.tools) found = found || tool["function"]["name"] == *name;
    if (!found) bad_field("tool_choice.function.name", "'{}' is not one of the request's tools", shorten(*name));
    request.tool_choice = "function";
    request.tool_choice_function = *name;
  }
  if (request.tool_choice == "required" && !has_tools) bad_field("tool_choice", "is 'required' but no tools were given");
  if (request.tool_choice == "none") request.prompt.tools = nullptr;  // the model must not see or call them
  request.parse_tool_calls = has_tools && request.tool_choice != "none";
}

}  // namespace

nlohmann::json normalize_messages(const nlohmann::json& messages) {
  if (!messages.is_array()) bad_field("messages", "must be an array, got {}", json_type_name(messages));
  if (messages.empty()) bad_field("messages", "must not be empty");
  nlohmann::json result = nlohmann::json::array();
  for (std::size_t i = 0; i < messages.size(); ++i) result.push_back(normalize_message(messages[i], i));
  return result;
}

nlohmann::json normalize_tools(const nlohmann::json& tools) {
  if (!tools.is_array()) bad_field("tools", "must be an array, got {}", json_type_name(tools));
  nlohmann::json result = nlohmann::json::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const JsonFields tool(tools[i], fmt::format("tools[{}]", i));
    tool.one_of("type", {"function"});
    const auto* function = tool.get("function");
    if (function == nullptr) bad_field(tool.path("function"), "is required");
    const JsonFields fn(*function, tool.path("function"));
    const auto name = fn.string("name");
    if (!name || name->empty()) bad_field(fn.path("name"), "is required");
    nlohmann::json out_fn = {{"name", *name}};
    if (const auto description = fn.string("description")) out_fn["description"] = *description;
    if (const auto* parameters = fn.get("parameters")) {
      if (!parameters->is_object()) bad_field(fn.path("parameters"), "must be an object, got {}", json_type_name(*parameters));
      out_fn["parameters"] = *parameters;
    }
    if (const auto strict = fn.boolean("strict")) out_fn["strict"] = *strict;
    result.push_back({{"type", "function"}, {"function", std::move(out_fn)}});
  }
  return result;
}

void parse_chat_mode(const JsonFields& body, const ChatDefaults& defaults, ChatPrompt& prompt) {
  std::optional<bool> thinking;
  std::optional<std::string> effort;
  if (const auto* kwargs = body.get("chat_template_kwargs")) {
    const JsonFields k(*kwargs, "chat_template_kwargs");
    thinking = k.boolean("thinking");
    if (!thinking) thinking = k.boolean("enable_thinking");
    effort = k.one_of("reasoning_effort", {"none", "minimal", "low", "medium", "high", "max"});
  }
  if (const auto* deepseek = body.get("thinking"); deepseek != nullptr && !thinking) {
    if (deepseek->is_boolean()) thinking = deepseek->get<bool>();
    else thinking = *JsonFields(*deepseek, "thinking").one_of("type", {"enabled", "disabled"}) == "enabled";
  }
  if (!effort) effort = body.one_of("reasoning_effort", {"none", "minimal", "low", "medium", "high", "max"});
  if (!thinking && effort) thinking = *effort != "none";
  prompt.thinking = thinking.value_or(defaults.thinking);
  prompt.reasoning_effort = effort.value_or(defaults.reasoning_effort);
  if (prompt.reasoning_effort == "none" || !prompt.thinking) prompt.reasoning_effort.clear();
}

ChatRequest parse_chat_request(const nlohmann::json& body, int32_t vocab_size, const ChatDefaults& defaults) {
  const JsonFields fields(body, "");
  ChatRequest request;
  const auto* messages = fields.get("messages");
  if (messages == nullptr) bad_field("messages", "is required");
  request.prompt.messages = normalize_messages(*messages);
  request.common = parse_generation_fields(fields, vocab_size);
  if (const auto* tools = fields.get("tools")) request.prompt.tools = normalize_tools(*tools);
  parse_tool_choice(fields, request);
  fields.boolean("parallel_tool_calls");
  parse_chat_mode(fields, defaults, request.prompt);
  request.prompt.add_generation_prompt = fields.boolean("add_generation_prompt").value_or(true);
  request.prompt.continue_final_message = fields.boolean("continue_final_message").value_or(false);
  if (request.prompt.continue_final_message) {
    if (fields.boolean("add_generation_prompt").value_or(false))
      bad_field("continue_final_message", "cannot be combined with 'add_generation_prompt': true");
    request.prompt.add_generation_prompt = false;
    if (request.prompt.messages.back()["role"] != "assistant")
      bad_field("continue_final_message", "needs the last message to be the assistant's");
  }
  const auto& format = request.common.sampling.structured_output;
  if (format.is_object() && format.contains("type")) request.prompt.response_format = format;
  request.logprobs = fields.boolean("logprobs").value_or(false);
  if (auto v = fields.integer("top_logprobs", 0, kMaxTopLogprobs)) {
    if (!request.logprobs) bad_field("top_logprobs", "requires 'logprobs' to be true");
    request.top_logprobs = static_cast<int>(*v);
  }
  if (request.logprobs) request.common.sampling.logprobs = request.top_logprobs;
  return request;
}

}  // namespace deepinfer::server
