// OpenAI request JSON -> encoder inputs: accepted shapes, DeepSeek/vLLM thinking switches, and
// errors that name the field and index.
#include "encoding/chat_json.h"

#include "encoding/test_util.h"

namespace deepinfer::encoding {
namespace {

using testing::expect_error;

TEST(ChatJson, ReadsEveryMessageField) {
  const std::vector<Message> messages = messages_from_json(Json::parse(R"([
    {"role": "system", "content": "S"},
    {"role": "user", "content": [{"type": "text", "text": "hi"},
                                 {"type": "image_url", "image_url": {"url": "x.png"}}],
     "name": "ann"},
    {"role": "assistant", "content": null, "reasoning_content": "think",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "f", "arguments": "{\"a\": 1}"}},
                    {"id": "c2", "function": {"name": "g", "arguments": {"b": [1, 2]}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    {"role": "assistant", "content": "done", "reasoning": "vllm spelling"}
  ])"));
  ASSERT_EQ(messages.size(), 5u);
  EXPECT_EQ(messages[0].content, "S");
  ASSERT_TRUE(messages[1].content_parts.has_value());
  EXPECT_EQ(messages[1].content_parts->at(0).text, "hi");
  EXPECT_EQ(messages[1].content_parts->at(1).type, "image_url");
  EXPECT_EQ(messages[1].content_parts->at(1).part["image_url"]["url"], "x.png");
  EXPECT_EQ(messages[1].name, "ann");
  EXPECT_FALSE(messages[2].content.has_value());
  EXPECT_EQ(messages[2].reasoning_content, "think");
  ASSERT_EQ(messages[2].tool_calls.size(), 2u);
  EXPECT_EQ(messages[2].tool_calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(messages[2].tool_calls[1].type, "function");
  EXPECT_EQ(messages[2].tool_calls[1].arguments, "{\"b\": [1, 2]}");  // object -> JSON text
  EXPECT_EQ(messages[3].tool_call_id, "c1");
  EXPECT_EQ(messages[4].reasoning_content, "vllm spelling");
}

TEST(ChatJson, ShapeErrorsNameTheFieldAndIndex) {
  expect_error([] { messages_from_json(Json::parse(R"({"role": "user"})")); }, {"messages"});
  expect_error([] { messages_from_json(Json::parse(R"([{"role": "user", "content": "a"}, 5])")); },
               {"messages[1]"});
  expect_error([] { messages_from_json(Json::parse(R"([{"content": "a"}])")); },
               {"messages[0]", "role"});
  expect_error([] { messages_from_json(Json::parse(R"([{"role": "user", "content": 3}])")); },
               {"messages[0].content"});
  expect_error(
      [] { messages_from_json(Json::parse(R"([{"role": "user", "content": [{"text": "a"}]}])")); },
      {"messages[0].content[0]", "type"});
  expect_error([] {
    messages_from_json(Json::parse(R"([{"role": "assistant", "tool_calls": {}}])"));
  }, {"messages[0].tool_calls"});
  expect_error([] {
    messages_from_json(Json::parse(
        R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])"));
  }, {"messages[0].tool_calls[0].function", "name"});
  expect_error([] {
    messages_from_json(Json::parse(
        R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 7}}]}])"));
  }, {"messages[0].tool_calls[0].function.arguments"});
}

TEST(ChatJson, RequestOptionsFollowDeepSeekAndVllmSwitches) {
  EncodeOptions options = encode_options_from_request(Json::parse(R"({
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "response_format": {"type": "json_object"},
    "reasoning_effort": 37,
    "thinking": {"type": "disabled"},
    "add_generation_prompt": false
  })"), ChatFormat::kDeepSeekV41);
  EXPECT_EQ(options.format, ChatFormat::kDeepSeekV41);
  ASSERT_EQ(options.tools.size(), 1u);
  EXPECT_EQ(options.response_format, Json::parse(R"({"type": "json_object"})"));
  EXPECT_EQ(options.reasoning_effort, "37");
  EXPECT_FALSE(options.thinking);
  EXPECT_FALSE(options.add_generation_prompt);

  options = encode_options_from_request(Json::parse(R"({})"), ChatFormat::kDeepSeekV4);
  EXPECT_TRUE(options.thinking);  // DeepSeek's default
  EXPECT_TRUE(options.drop_thinking);

  // chat_template_kwargs win over the top-level switch.
  options = encode_options_from_request(Json::parse(R"({"thinking": {"type": "enabled"},
      "chat_template_kwargs": {"enable_thinking": false, "drop_thinking": false,
                               "reasoning_effort": "max"}})"), ChatFormat::kDeepSeekV4);
  EXPECT_FALSE(options.thinking);
  EXPECT_FALSE(options.drop_thinking);
  EXPECT_EQ(options.reasoning_effort, "max");

  expect_error([] {
    encode_options_from_request(Json::parse(R"({"thinking": {"type": "sometimes"}})"),
                                ChatFormat::kDeepSeekV4);
  }, {"thinking.type", "sometimes"});
  expect_error([] {
    encode_options_from_request(Json::parse(R"({"chat_template_kwargs": {"thinking": "yes"}})"),
                                ChatFormat::kDeepSeekV4);
  }, {"chat_template_kwargs.thinking"});
  expect_error([] {
    encode_options_from_request(Json::parse(R"({"reasoning_effort": [1]})"),
                                ChatFormat::kDeepSeekV4);
  }, {"reasoning_effort"});
}

TEST(ChatJson, ChatFormatNamesRoundTrip) {
  for (const ChatFormat format :
       {ChatFormat::kDeepSeekV3, ChatFormat::kDeepSeekV4, ChatFormat::kDeepSeekV41}) {
    EXPECT_EQ(parse_chat_format(chat_format_name(format)), format);
  }
  EXPECT_EQ(parse_chat_format("deepseek_v4.1"), ChatFormat::kDeepSeekV41);
  expect_error([] { parse_chat_format("llama3"); }, {"llama3"});
}

}  // namespace
}  // namespace deepinfer::encoding
