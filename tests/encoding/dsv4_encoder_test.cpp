// DeepSeek-V4 encoding goldens. Each expected string is written by hand from the rules of
// DeepSeek's reference encoder (encoding_dsv4.py, the HF DeepSeek-V4 checkpoints' encoding/
// folder): render_message's templates and transitions, merge_tool_messages,
// sort_tool_results_by_call_order, _drop_thinking_messages, TOOLS_TEMPLATE and
// REASONING_EFFORT_MAX. (The encoder also reproduces the four official test_output_*.txt files;
// they are DeepSeek's data and are not committed here.)
#include "encoding/chat_encoder.h"
#include "encoding/test_util.h"

namespace deepinfer::encoding {
namespace {

using namespace testing;  // NOLINT

EncodeOptions v4(bool thinking) {
  EncodeOptions options;
  options.format = ChatFormat::kDeepSeekV4;
  options.thinking = thinking;
  return options;
}

EncodeResult encode(const std::vector<Message>& messages, const EncodeOptions& options) {
  return encode_chat(messages, options);
}

// TOOLS_TEMPLATE of the reference with the V4 DSML tags, around the given schema lines.
std::string v4_tools_section(std::string_view schemas) {
  return cat(
      "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
      "invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
      "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
      "</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other "
      "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
      "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after </think> with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n",
      schemas,
      "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
      "tool calls.\n");
}

constexpr std::string_view kWeatherSchema =
    R"({"name": "get_weather", "description": "Weather for a city", "parameters": {"type": )"
    R"("object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, )"
    R"("required": ["city"]}})";

TEST(Dsv4Encoder, ChatModeClosesThinkingInTheHeader) {
  const std::vector<Message> messages = {msg("system", "Be brief."), msg("user", "Hi")};
  const EncodeResult r = encode(messages, v4(false));
  EXPECT_EQ(r.prompt, cat(kBos, "Be brief.", kUser, "Hi", kAssistant, kThinkEnd));
  EXPECT_FALSE(r.thinking_open);
}

TEST(Dsv4Encoder, ThinkingModeOpensThinkingForTheTurnToGenerate) {
  const std::vector<Message> messages = {msg("system", "Be brief."), msg("user", "Hi")};
  const EncodeResult r = encode(messages, v4(true));
  EXPECT_EQ(r.prompt, cat(kBos, "Be brief.", kUser, "Hi", kAssistant, kThinkStart));
  EXPECT_TRUE(r.thinking_open);
}

TEST(Dsv4Encoder, DropsReasoningOfTurnsBeforeTheLastUserMessage) {
  const std::vector<Message> messages = {
      msg("system", "S"), msg("user", "Hello"), assistant("Hi! How can I help?", "They greet."),
      msg("user", "Capital of Italy?"), assistant("Rome.", "Italy's capital is Rome.")};
  EXPECT_EQ(encode(messages, v4(true)).prompt,
            cat(kBos, "S", kUser, "Hello", kAssistant, kThinkEnd, "Hi! How can I help?", kEos,
                kUser, "Capital of Italy?", kAssistant, kThinkStart, "Italy's capital is Rome.",
                kThinkEnd, "Rome.", kEos));

  EncodeOptions keep = v4(true);
  keep.drop_thinking = false;
  EXPECT_EQ(encode(messages, keep).prompt,
            cat(kBos, "S", kUser, "Hello", kAssistant, kThinkStart, "They greet.", kThinkEnd,
                "Hi! How can I help?", kEos, kUser, "Capital of Italy?", kAssistant, kThinkStart,
                "Italy's capital is Rome.", kThinkEnd, "Rome.", kEos));
}

TEST(Dsv4Encoder, ToolLoopKeepsReasoningRendersDsmlAndOrdersResultsByCall) {
  EncodeOptions options = v4(true);
  options.tools = {weather_tool()};
  const std::vector<Message> messages = {
      msg("system", "S"), msg("user", "Oslo and Bergen?"),
      assistant("", "Need weather.",
                {call("c1", "get_weather", R"({"city": "Oslo", "days": 3})"),
                 call("c2", "get_weather",
                      R"({"city": "Bergen", "detail": {"hourly": true}, "tags": ["a", "b"]})")}),
      tool("c2", "rain"), tool("c1", "snow"),  // answered out of order
      assistant("Oslo: snow. Bergen: rain.", "Summarize.")};
  EXPECT_EQ(
      encode(messages, options).prompt,
      cat(kBos, "S\n\n", v4_tools_section(kWeatherSchema), kUser, "Oslo and Bergen?", kAssistant,
          kThinkStart, "Need weather.", kThinkEnd,
          "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
          "<｜DSML｜parameter name=\"city\" string=\"true\">Oslo</｜DSML｜parameter>\n"
          "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
          "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n"
          "<｜DSML｜parameter name=\"city\" string=\"true\">Bergen</｜DSML｜parameter>\n"
          "<｜DSML｜parameter name=\"detail\" string=\"false\">{\"hourly\": true}"
          "</｜DSML｜parameter>\n"
          "<｜DSML｜parameter name=\"tags\" string=\"false\">[\"a\", \"b\"]</｜DSML｜parameter>\n"
          "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
          kEos, kUser, "<tool_result>snow</tool_result>\n\n<tool_result>rain</tool_result>",
          kAssistant, kThinkStart, "Summarize.", kThinkEnd, "Oslo: snow. Bergen: rain.", kEos));
}

TEST(Dsv4Encoder, ToolsWithoutASystemMessageGetOneInFront) {
  EncodeOptions options = v4(false);
  options.tools = {weather_tool()};
  EXPECT_EQ(encode({msg("user", "Hi")}, options).prompt,
            cat(kBos, "\n\n", v4_tools_section(kWeatherSchema), kUser, "Hi", kAssistant,
                kThinkEnd));
}

TEST(Dsv4Encoder, ToolsGoOnALeadingDeveloperMessage) {
  EncodeOptions options = v4(false);
  options.tools = {weather_tool()};
  EXPECT_EQ(encode({msg("developer", "Use tools."), msg("user", "Hi")}, options).prompt,
            cat(kBos, kUser, "Use tools.\n\n", v4_tools_section(kWeatherSchema), kUser, "Hi",
                kAssistant, kThinkEnd));
}

TEST(Dsv4Encoder, ResponseFormatRendersAsASectionAndKeepsDropThinking) {
  EncodeOptions options = v4(true);
  options.response_format = Json::parse(
      R"({"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object",
          "properties": {"n": {"type": "integer"}}}}})");
  const std::vector<Message> messages = {msg("system", "S"), msg("user", "a"),
                                         assistant("b", "hidden"), msg("user", "Q")};
  EXPECT_EQ(encode(messages, options).prompt,
            cat(kBos, "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following "
                "schema to reply:\n{\"type\": \"json_schema\", \"json_schema\": {\"name\": "
                "\"answer\", \"schema\": {\"type\": \"object\", \"properties\": {\"n\": "
                "{\"type\": \"integer\"}}}}}",
                kUser, "a", kAssistant, kThinkEnd, "b", kEos, kUser, "Q", kAssistant,
                kThinkStart));
  options.response_format = Json::parse(R"({"type": "text"})");
  EXPECT_EQ(encode({msg("user", "Q")}, options).prompt, cat(kBos, kUser, "Q", kAssistant,
                                                            kThinkStart));
}

TEST(Dsv4Encoder, ReasoningEffortMaxPrependsTheThinkMaxInstruction) {
  const std::string max_prefix =
      "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very "
      "thorough in your thinking and comprehensively decompose the problem to resolve the root "
      "cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
      "adversarial scenarios.\nExplicitly write out your entire deliberation process, "
      "documenting every intermediate step, considered alternative, and rejected hypothesis to "
      "ensure absolutely no assumption is left unchecked.\n\n";
  EncodeOptions options = v4(true);
  options.reasoning_effort = "max";
  EXPECT_EQ(encode({msg("user", "Q")}, options).prompt,
            cat(kBos, max_prefix, kUser, "Q", kAssistant, kThinkStart));
  EXPECT_EQ(encode({msg("system", "S"), msg("user", "Q")}, options).prompt,
            cat(kBos, max_prefix, "S", kUser, "Q", kAssistant, kThinkStart));

  options.reasoning_effort = "high";  // renders as plain thinking
  EXPECT_EQ(encode({msg("user", "Q")}, options).prompt, cat(kBos, kUser, "Q", kAssistant,
                                                            kThinkStart));
  options = v4(false);
  options.reasoning_effort = "max";  // chat mode: no effort prefix
  EXPECT_EQ(encode({msg("user", "Q")}, options).prompt, cat(kBos, kUser, "Q", kAssistant,
                                                            kThinkEnd));
  options = v4(true);
  options.reasoning_effort = "none";  // OpenAI's "none" turns thinking off
  EXPECT_EQ(encode({msg("user", "Q")}, options).prompt, cat(kBos, kUser, "Q", kAssistant,
                                                            kThinkEnd));
  options.reasoning_effort = "ultra";
  expect_error([&] { encode({msg("user", "Q")}, options); }, {"reasoning_effort", "ultra"});
}

TEST(Dsv4Encoder, DeveloperTurnsBeforeTheLastUserAreDroppedAndRemindersKept) {
  const std::vector<Message> messages = {
      msg("system", "S"), msg("latest_reminder", "2026-01-01,Paris"),
      msg("developer", "Old instructions"), assistant("ok", "r1"), msg("user", "next")};
  EXPECT_EQ(encode(messages, v4(true)).prompt,
            cat(kBos, "S", kLatestReminder, "2026-01-01,Paris", "ok", kEos, kUser, "next",
                kAssistant, kThinkStart));
  // In chat mode nothing is dropped; a developer turn reads as a user turn.
  EXPECT_EQ(encode(messages, v4(false)).prompt,
            cat(kBos, "S", kLatestReminder, "2026-01-01,Paris", kUser, "Old instructions",
                kAssistant, kThinkEnd, "ok", kEos, kUser, "next", kAssistant, kThinkEnd));
}

TEST(Dsv4Encoder, ConsecutiveUserMessagesShareOneTurn) {
  EXPECT_EQ(encode({msg("user", "a"), msg("user", "b")}, v4(false)).prompt,
            cat(kBos, kUser, "a\n\nb", kAssistant, kThinkEnd));
}

TEST(Dsv4Encoder, QuickInstructionTasksAppendTheirTokens) {
  Message action = msg("user", "find hotels");
  action.task = "action";
  EXPECT_EQ(encode({action}, v4(false)).prompt,
            cat(kBos, kUser, "find hotels", kAssistant, kThinkEnd, "<｜action｜>"));
  EXPECT_EQ(encode({action}, v4(true)).prompt,
            cat(kBos, kUser, "find hotels", kAssistant, kThinkStart, "<｜action｜>"));
  Message query = msg("user", "x");
  query.task = "query";
  // The answer to a task carries no thinking part, even in thinking mode.
  EXPECT_EQ(encode({query, assistant("y", "unused")}, v4(true)).prompt,
            cat(kBos, kUser, "x", "<｜query｜>", "y", kEos));
}

TEST(Dsv4Encoder, GenerationPromptAndContinuationOptions) {
  EncodeOptions options = v4(true);
  options.add_generation_prompt = false;
  EXPECT_EQ(encode({msg("user", "Q")}, options).prompt, cat(kBos, kUser, "Q"));

  options = v4(true);
  options.continue_final_message = true;
  const EncodeResult r = encode({msg("user", "Q"), assistant("Partial", "R")}, options);
  EXPECT_EQ(r.prompt, cat(kBos, kUser, "Q", kAssistant, kThinkStart, "R", kThinkEnd, "Partial"));
  EXPECT_FALSE(r.thinking_open);
  expect_error([&] { encode({msg("user", "Q")}, options); }, {"continue_final_message"});

  options = v4(false);
  options.add_bos = false;
  EXPECT_EQ(encode({msg("user", "Q")}, options).prompt, cat(kUser, "Q", kAssistant, kThinkEnd));
}

TEST(Dsv4Encoder, ContentPartsFlattenAndToolResultPartsMarkUnsupportedTypes) {
  Message user;
  user.role = "user";
  user.content_parts = {{"text", "a", Json{}}, {"text", "b", Json{}}};
  Message result;
  result.role = "tool";
  result.tool_call_id = "1";
  result.content_parts = {{"text", "out", Json{}}, {"image_url", "", Json{}}};
  const std::vector<Message> messages = {user, assistant("", std::nullopt, {call("1", "f", "{}")}),
                                         result};
  EXPECT_EQ(encode(messages, v4(false)).prompt,
            cat(kBos, kUser, "a\n\nb", kAssistant, kThinkEnd,
                "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n"
                "</｜DSML｜tool_calls>",
                kEos, kUser, "<tool_result>out\n\n[Unsupported image_url]</tool_result>",
                kAssistant, kThinkEnd));
  user.content_parts->push_back({"image_url", "", Json::parse(R"({"type": "image_url"})")});
  expect_error([&] { encode({user}, v4(false)); }, {"messages[0].content[2]", "image_url"});
}

TEST(Dsv4Encoder, InvalidMessagesNameTheFieldAndIndex) {
  expect_error([] { encode({msg("user", "a"), msg("robot", "b")}, v4(true)); },
               {"messages[1].role", "robot"});
  Message result = msg("tool", "x");
  expect_error([&] { encode({msg("user", "a"), result}, v4(true)); },
               {"messages[1].tool_call_id"});
  expect_error([] { encode({assistant("", std::nullopt, {call("1", "f", "{\"a\": ")})},
                           v4(true)); },
               {"messages[0].tool_calls[0].function.arguments", "not valid JSON"});
  expect_error([] { encode({assistant("", std::nullopt, {call("1", "f", std::string("{}\0x", 4))})},
                           v4(true)); },
               {"messages[0].tool_calls[0].function.arguments", "not valid JSON"});
  expect_error([] { encode({assistant("", std::nullopt, {call("1", "f", "[1]")})}, v4(true)); },
               {"messages[0].tool_calls[0].function.arguments", "object"});
  expect_error([] { encode({msg("user", "a"), msg("developer", "")}, v4(true)); },
               {"messages[1].content", "developer"});
  Message no_content;
  no_content.role = "user";
  expect_error([&] { encode({no_content}, v4(true)); }, {"messages[0].content"});
  Message task = msg("user", "a");
  task.task = "fly";
  expect_error([&] { encode({task}, v4(true)); }, {"messages[0].task", "fly"});
  expect_error([] { encode({}, v4(true)); }, {"messages"});

  EncodeOptions options = v4(true);
  options.tools = {Json::parse(R"({"type": "function", "function": {"description": "x"}})")};
  expect_error([&] { encode({msg("user", "a")}, options); }, {"tools[0].function.name"});
  options.tools = {Json::parse(R"({"type": "retrieval"})")};
  expect_error([&] { encode({msg("user", "a")}, options); }, {"tools[0].type"});
  options.tools.clear();
  options.response_format = Json::parse(R"({"type": "yaml"})");
  expect_error([&] { encode({msg("user", "a")}, options); }, {"response_format.type", "yaml"});
}

}  // namespace
}  // namespace deepinfer::encoding
