// The DSML tool-call grammar: calls as the chat encoding renders them are sentences; wrong tools,
// missing required parameters, arguments off their schema and raw text holding "</" are not.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "grammar/grammar_test_support.h"
#include "grammar/tool_calls.h"

namespace deepinfer::grammar {
namespace {

using testing::accepts;

const nlohmann::ordered_json kTags = {
    {"block_open", "<｜DSML｜tool_calls>"}, {"block_close", "</｜DSML｜tool_calls>"},
    {"invoke_open", "<｜DSML｜invoke"},     {"invoke_close", "</｜DSML｜invoke>"},
    {"param_open", "<｜DSML｜parameter"},   {"param_close", "</｜DSML｜parameter>"}};

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "description": "a city"},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 7},
                   "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
    "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
  {"type": "function", "function": {"name": "tag", "parameters": {"type": "object",
    "properties": {"node": {"$ref": "#/$defs/node"}}, "required": ["node"],
    "$defs": {"node": {"type": "object", "properties": {"name": {"type": "string"},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["name"]}}}}}
])";

std::string spec(const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) {
  nlohmann::ordered_json s = {{"tags", kTags}, {"tools", nlohmann::ordered_json::parse(kTools)}};
  for (const auto& [k, v] : extra.items()) s[k] = v;
  return s.dump();
}

std::string param(const std::string& key, bool is_string, const std::string& value) {
  return "<｜DSML｜parameter name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") + "\">" + value +
         "</｜DSML｜parameter>\n";
}

std::string invoke(const std::string& name, const std::string& params) {
  return "<｜DSML｜invoke name=\"" + name + "\">\n" + (params.empty() ? "\n" : params) + "</｜DSML｜invoke>";
}

std::string block(const std::vector<std::string>& invokes) {
  std::string out = "\n\n<｜DSML｜tool_calls>\n";
  for (std::size_t i = 0; i < invokes.size(); ++i) out += (i ? "\n" : "") + invokes[i];
  return out + "\n</｜DSML｜tool_calls>";
}

TEST(ToolCallGrammar, AcceptsCallsAsTheChatEncodingRendersThem) {
  auto g = testing::compile(ConstraintKind::kToolCalls, spec());
  const std::string weather = invoke("get_weather", param("city", true, "São Paulo <b> & \"x\"\nnext line") +
                                                        param("days", false, "3"));
  EXPECT_TRUE(accepts(g, block({weather})));
  EXPECT_TRUE(accepts(g, block({weather}).substr(2)));  // without the leading blank line
  EXPECT_TRUE(accepts(g, block({invoke("now", ""), weather})));
  EXPECT_TRUE(accepts(g, block({invoke("get_weather", param("city", true, "Rome") + param("unit", true, "celsius") +
                                                          param("days", false, "7") + param("zip", false, "\"00184\""))})));
  EXPECT_TRUE(accepts(g, block({invoke("tag", param("node", false,
                                                    R"({"name": "a", "children": [{"name": "b", "children": []}]})"))})));
}

TEST(ToolCallGrammar, RejectsCallsOffTheSchemas) {
  auto g = testing::compile(ConstraintKind::kToolCalls, spec());
  const std::string days = param("days", false, "3");
  EXPECT_FALSE(accepts(g, block({invoke("get_time", "")})));                          // unknown tool
  EXPECT_FALSE(accepts(g, block({invoke("get_weather", days)})));                     // city missing
  EXPECT_FALSE(accepts(g, block({invoke("get_weather", param("city", true, "a") + param("days", false, "9"))})));
  EXPECT_FALSE(accepts(g, block({invoke("get_weather", param("city", true, "a</b>") + days)})));  // "</" in raw
  EXPECT_FALSE(accepts(g, block({invoke("get_weather", param("city", true, "a") + param("unit", true, "kelvin") + days)})));
  EXPECT_FALSE(accepts(g, block({invoke("get_weather", param("city", true, "a") + days + param("zip", false, "\"1\""))})));
  EXPECT_FALSE(accepts(g, block({invoke("tag", param("node", false, R"({"children": []})"))})));  // name required
  EXPECT_FALSE(accepts(g, block({})));                                                // at least one call
  EXPECT_FALSE(accepts(g, "Sure." + block({invoke("now", "")})));                     // nothing but the block
}

TEST(ToolCallGrammar, NamedFunctionAndSingleCall) {
  auto named = testing::compile(ConstraintKind::kToolCalls, spec({{"function", "now"}, {"parallel", false}}));
  EXPECT_TRUE(accepts(named, block({invoke("now", "")})));
  EXPECT_FALSE(accepts(named, block({invoke("now", ""), invoke("now", "")})));
  EXPECT_FALSE(accepts(named, block({invoke("get_weather", param("city", true, "a") + param("days", false, "1"))})));
}

TEST(ToolCallGrammar, BadSpecsNameTheProblem) {
  auto message = [](const std::string& text) {
    try {
      grammar_from_tool_calls(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(spec({{"function", "missing"}})).find("'missing'"), std::string::npos);
  const nlohmann::ordered_json bad_tool = {{"tags", kTags},
                                           {"tools", {{{"name", "f"}, {"parameters", {{"type", "object"},
                                             {"properties", {{"x", {{"type", "string"}, {"if", nlohmann::ordered_json::object()}}}}}}}}}}};
  const std::string m = message(bad_tool.dump());
  EXPECT_NE(m.find("tool 'f' parameter 'x'"), std::string::npos) << m;
  EXPECT_NE(m.find("'if'"), std::string::npos) << m;
  EXPECT_NE(message(R"({"tools": []})").find("tags"), std::string::npos);
  EXPECT_NE(message("{").find("not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::grammar
