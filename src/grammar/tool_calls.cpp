// DSML tool-call grammars over the request's tools (see tool_calls.h); each non-string parameter
// embeds the JSON-schema grammar of its schema.
#include "grammar/tool_calls.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {
namespace {

using json = nlohmann::ordered_json;

struct Tags {
  std::string block_open, block_close, invoke_open, invoke_close, param_open, param_close;
};

std::string tag(const json& tags, const char* key) {
  DI_CHECK(tags.contains(key) && tags[key].is_string() && !tags[key].get<std::string>().empty(),
           "tool calls: tags.{} must be a non-empty string", key);
  return tags[key].get<std::string>();
}

// Keywords that only annotate a string schema; with them a string is written as is.
bool plain_string_schema(const json& s) {
  if (!s.is_object()) return false;
  for (const auto& [key, value] : s.items()) {
    if (key == "type") {
      if (value != "string") return false;
    } else if (key == "enum") {
      if (!value.is_array() || value.empty()) return false;
      for (const auto& v : value)
        if (!v.is_string()) return false;
    } else if (key == "const") {
      if (!value.is_string()) return false;
    } else if (key != "description" && key != "title" && key != "default" && key != "examples" && key != "$comment") {
      return false;
    }
  }
  return s.contains("type") || s.contains("enum") || s.contains("const");
}

class ToolCallGrammarBuilder {
 public:
  explicit ToolCallGrammarBuilder(const json& spec) {
    DI_CHECK(spec.is_object(), "tool calls: the spec must be a JSON object");
    DI_CHECK(spec.contains("tags") && spec["tags"].is_object(), "tool calls: 'tags' (the DSML spellings) is required");
    const json& t = spec["tags"];
    tags_ = {tag(t, "block_open"),   tag(t, "block_close"), tag(t, "invoke_open"),
             tag(t, "invoke_close"), tag(t, "param_open"),  tag(t, "param_close")};
  }

  Grammar build(const json& spec) {
    DI_CHECK(spec.contains("tools") && spec["tools"].is_array() && !spec["tools"].empty(),
             "tool calls: 'tools' must be a non-empty array");
    std::string only;
    if (spec.contains("function")) {
      DI_CHECK(spec["function"].is_string(), "tool calls: 'function' must be a tool name");
      only = spec["function"].get<std::string>();
    }
    const bool parallel = spec.value("parallel", true);
    std::vector<ExprId> invokes;
    for (const json& tool : spec["tools"]) {
      const json& fn = tool.contains("function") ? tool["function"] : tool;
      DI_CHECK(fn.is_object() && fn.contains("name") && fn["name"].is_string(), "tool calls: a tool has no name");
      const std::string name = fn["name"].get<std::string>();
      if (!only.empty() && name != only) continue;
      invokes.push_back(g_.ref(invoke_rule(name, fn.contains("parameters") ? fn["parameters"] : json())));
    }
    DI_CHECK(!invokes.empty(), "tool calls: function '{}' is not one of the tools", only);
    const RuleId invoke = g_.add_rule("invoke");
    g_.set_body(invoke, g_.alt(std::move(invokes)));
    const ExprId calls =
        parallel ? g_.seq({g_.ref(invoke), g_.star(g_.seq({g_.byte('\n'), g_.ref(invoke)}))}) : g_.ref(invoke);
    const RuleId root = g_.add_rule("root");
    g_.set_body(root, g_.seq({g_.optional(g_.literal("\n\n")), g_.literal(tags_.block_open), g_.byte('\n'), calls,
                              g_.byte('\n'), g_.literal(tags_.block_close)}));
    g_.set_root(root);
    return std::move(g_);
  }

 private:
  // Names and keys are written inside name="..."; a quote would end the attribute early.
  static void check_attribute(const std::string& value, std::string_view what) {
    DI_CHECK(!value.empty() && value.find('"') == std::string::npos, "tool calls: {} '{}' cannot be written in DSML",
             what, value);
  }

  RuleId invoke_rule(const std::string& name, const json& parameters) {
    check_attribute(name, "tool name");
    const RuleId rule = g_.add_unique_rule("invoke_" + name);
    std::vector<ExprId> parts{g_.literal(tags_.invoke_open + " name=\"" + name + "\">\n")};
    bool any = false;
    if (!parameters.is_null()) {
      DI_CHECK(parameters.is_object(), "tool calls: tool '{}': parameters must be a JSON schema object", name);
      for (const auto& [key, value] : parameters.items()) {
        static const std::set<std::string> kAllowed = {"type", "properties", "required", "additionalProperties",
                                                       "description", "title", "$defs", "definitions", "$schema",
                                                       "strict", "$comment"};
        DI_CHECK(kAllowed.contains(key), "tool calls: tool '{}': parameters keyword '{}' is not supported (an object "
                 "schema with properties is)", name, key);
      }
      DI_CHECK(parameters.value("type", "object") == "object", "tool calls: tool '{}': parameters must be of type object",
               name);
      std::set<std::string> required;
      if (parameters.contains("required")) {
        for (const auto& r : parameters["required"]) required.insert(r.get<std::string>());
      }
      const json properties = parameters.value("properties", json::object());
      for (const auto& [key, schema] : properties.items()) {
        const ExprId param = g_.seq({parameter(name, key, schema, parameters), g_.byte('\n')});
        parts.push_back(required.contains(key) ? param : g_.optional(param));
        any = true;
        required.erase(key);
      }
      DI_CHECK(required.empty(), "tool calls: tool '{}': required parameter '{}' has no schema in properties", name,
               required.empty() ? "" : *required.begin());
    }
    if (!any) parts.push_back(g_.byte('\n'));  // as the encoding renders a call without arguments
    parts.push_back(g_.literal(tags_.invoke_close));
    g_.set_body(rule, g_.seq(std::move(parts)));
    return rule;
  }

  ExprId parameter(const std::string& tool, const std::string& key, const json& schema, const json& parameters) {
    check_attribute(key, "parameter name");
    const std::string head = tags_.param_open + " name=\"" + key + "\" string=";
    if (const auto raw = raw_string(schema)) {
      return g_.seq({g_.literal(head + "\"true\">"), *raw, g_.literal(tags_.param_close)});
    }
    // The property's schema with the tool's definitions, so its local $refs still resolve.
    json sub = schema.is_object() ? schema : json(schema);
    for (const char* defs : {"$defs", "definitions"}) {
      if (parameters.contains(defs) && sub.is_object() && !sub.contains(defs)) sub[defs] = parameters[defs];
    }
    Grammar value;
    try {
      value = grammar_from_json_schema(sub.dump(), JsonSchemaOptions{.any_whitespace = false, .strict = true});
    } catch (const Error& e) {
      throw_error("tool calls: tool '{}' parameter '{}': {}", tool, key, e.what());
    }
    const RuleId root = g_.import_grammar(value, fmt::format("{}_{}_", tool, key));
    return g_.seq({g_.literal(head + "\"false\">"), g_.ref(root), g_.literal(tags_.param_close)});
  }

  // A string written as is: one of its enum/const values, or any text without "</" (so the
  // closing tag cannot appear inside). nullopt when the schema needs JSON.
  std::optional<ExprId> raw_string(const json& schema) {
    if (!plain_string_schema(schema)) return std::nullopt;
    std::vector<std::string> values;
    if (schema.contains("enum")) {
      for (const auto& v : schema["enum"])
        if (!schema.contains("const") || v == schema["const"]) values.push_back(v.get<std::string>());
      DI_CHECK(!values.empty(), "tool calls: a string schema whose const is not in its enum matches nothing");
    } else if (schema.contains("const")) {
      values.push_back(schema["const"].get<std::string>());
    }
    if (values.empty()) {
      if (any_text_ < 0) any_text_ = any_text_rule();
      return g_.ref(any_text_);
    }
    std::vector<ExprId> options;
    for (const std::string& v : values) {
      if (v.find(tags_.param_close) != std::string::npos) return std::nullopt;  // JSON can carry it escaped
      options.push_back(g_.literal(v));
    }
    return g_.alt(std::move(options));
  }

  RuleId any_text_rule() {
    const RuleId rule = g_.add_unique_rule("raw_text");
    g_.set_body(rule, regex_to_expr(g_, "([^<]|<+[^</])*<*", RegexOptions{.context = "raw tool-call text"}));
    return rule;
  }

  Tags tags_;
  Grammar g_;
  RuleId any_text_ = -1;
};

}  // namespace

Grammar grammar_from_tool_calls(std::string_view spec) {
  const json j = json::parse(spec, nullptr, false);
  DI_CHECK(!j.is_discarded(), "tool calls: the spec is not valid JSON");
  try {
    ToolCallGrammarBuilder builder(j);
    return builder.build(j);
  } catch (const json::exception& e) {
    throw_error("tool calls: malformed spec: {}", e.what());
  }
}

}  // namespace deepinfer::grammar
