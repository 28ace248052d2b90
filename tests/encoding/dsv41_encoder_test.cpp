// DeepSeek-V4.1 encoding goldens, written by hand from the rules of DeepSeek's V4.1 reference
// encoder (encoding_dsv41.py as adapted in SGLang): "<｜System｜>" token, numeric reasoning
// effort (REASONING_EFFORT_TEMPLATE, low/high/xhigh/max = 25/50/75/100, default high), DSML
// tags with a leading space, mid-conversation system turns, image placeholders.
#include "encoding/chat_encoder.h"
#include "encoding/test_util.h"

namespace deepinfer::encoding {
namespace {

using namespace testing;  // NOLINT

EncodeOptions v41(bool thinking, std::optional<std::string> effort = std::nullopt) {
  EncodeOptions options;
  options.format = ChatFormat::kDeepSeekV41;
  options.thinking = thinking;
  options.reasoning_effort = std::move(effort);
  return options;
}

std::string effort(int budget) {
  return "Reasoning Effort: " + std::to_string(budget) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

EncodeResult encode_v41(const std::vector<Message>& messages, const EncodeOptions& options) {
  return encode_chat(messages, options);
}

TEST(Dsv41Encoder, ThinkingWritesTheSystemTokenAndDefaultEffort) {
  const std::vector<Message> messages = {msg("system", "S"), msg("user", "Q")};
  const EncodeResult r = encode_v41(messages, v41(true));
  EXPECT_EQ(r.prompt, cat(kBos, kSystem, effort(50), "S", kUser, "Q", kAssistant, kThinkStart));
  EXPECT_TRUE(r.thinking_open);
  // Without a system message the effort still sits behind a system token.
  EXPECT_EQ(encode_v41({msg("user", "Q")}, v41(true)).prompt,
            cat(kBos, kSystem, effort(50), kUser, "Q", kAssistant, kThinkStart));
}

TEST(Dsv41Encoder, ChatModeHasNoEffortLine) {
  EXPECT_EQ(encode_v41({msg("system", "S"), msg("user", "Q")}, v41(false, "max")).prompt,
            cat(kBos, kSystem, "S", kUser, "Q", kAssistant, kThinkEnd));
  EXPECT_EQ(encode_v41({msg("user", "Q")}, v41(false)).prompt,
            cat(kBos, kUser, "Q", kAssistant, kThinkEnd));
  EXPECT_EQ(encode_v41({msg("user", "Q")}, v41(true, "none")).prompt,
            cat(kBos, kUser, "Q", kAssistant, kThinkEnd));
}

TEST(Dsv41Encoder, ReasoningEffortNamesAndNumbersMapToBudgets) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"minimal", 25}, {"low", 25}, {"medium", 50}, {"high", 50}, {"xhigh", 75},
      {"max", 100},    {"1", 1},    {"37", 37},     {"100", 100}};
  for (const auto& [name, budget] : cases) {
    EXPECT_EQ(encode_v41({msg("user", "Q")}, v41(true, name)).prompt,
              cat(kBos, kSystem, effort(budget), kUser, "Q", kAssistant, kThinkStart))
        << name;
  }
  for (const char* bad : {"0", "101", "12x", "", "ultra"}) {
    expect_error([&] { encode_v41({msg("user", "Q")}, v41(true, bad)); },
                 {"reasoning_effort", "deepseek_v41"});
  }
}

TEST(Dsv41Encoder, MidConversationSystemMessageActsAsAUserTurn) {
  const std::vector<Message> messages = {msg("user", "a"), assistant("b", "hidden"),
                                         msg("system", "New rule.")};
  EXPECT_EQ(encode_v41(messages, v41(true)).prompt,
            cat(kBos, kSystem, effort(50), kUser, "a", kAssistant, kThinkEnd, "b", kEos, kSystem,
                "New rule.", kAssistant, kThinkStart));
}

TEST(Dsv41Encoder, ToolCallsAndToolsUseTheSpacedDsmlTags) {
  EncodeOptions options = v41(false);
  options.tools = {Json::parse(R"({"type": "function", "function": {"name": "f"}})")};
  const std::vector<Message> messages = {
      msg("user", "go"), assistant("On it.", std::nullopt, {call("1", "f", R"({"x": 1})")}),
      tool("1", "done")};
  const std::string prompt = encode_v41(messages, options).prompt;
  EXPECT_TRUE(prompt.starts_with(cat(
      kBos, kSystem, "\n\n## Tools\n\nYou have access to a set of tools to help answer the "
      "user's question. You can invoke tools by writing a \"<｜DSML｜ calls>\" block like the "
      "following:\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"$TOOL_NAME\">\n<｜DSML｜ parameter "
      "name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n...\n"
      "</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ invoke>\n"
      "</｜DSML｜ calls>\n\n")))
      << prompt;
  EXPECT_TRUE(prompt.ends_with(cat(
      "{\"name\": \"f\"}\n\nYou MUST strictly follow the above defined tool name and parameter "
      "schemas to invoke tool calls.\n",
      kUser, "go", kAssistant, kThinkEnd, "On it.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"x\" string=\"false\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
      "</｜DSML｜ calls>",
      kEos, kUser, "<tool_result>done</tool_result>", kAssistant, kThinkEnd)))
      << prompt;
}

TEST(Dsv41Encoder, ImagePartsBecomePlaceholdersInPromptOrder) {
  const Json image1 = Json::parse(R"({"type": "image_url", "image_url": {"url": "a.png"}})");
  const Json image2 = Json::parse(R"({"type": "image_url", "image_url": "b.png"})");
  Message user;
  user.role = "user";
  user.content_parts = {{"text", "Compare", Json{}}, {"image_url", "", image1},
                        {"image_url", "", image2}};
  Message result;
  result.role = "tool";
  result.tool_call_id = "1";
  result.content_parts = {{"image_url", "", image2}, {"input_audio", "", Json{}}};
  const std::vector<Message> messages = {user, assistant("", std::nullopt, {call("1", "f", "{}")}),
                                         result};
  const EncodeResult r = encode_v41(messages, v41(false));
  EXPECT_TRUE(r.prompt.starts_with(cat(kBos, kUser, "Compare\n\n", kImage, "\n\n", kImage,
                                       kAssistant)))
      << r.prompt;
  EXPECT_TRUE(r.prompt.ends_with(cat(kUser, "<tool_result>", kImage, "</tool_result>",
                                     kAssistant, kThinkEnd)))
      << r.prompt;
  EXPECT_EQ(r.images, (std::vector<Json>{image1, image2, image2}));
}

TEST(Dsv41Encoder, RejectsImageTokensInTextAndImagesWithoutSource) {
  expect_error([] { encode_v41({msg("user", cat("look ", kImage))}, v41(false)); },
               {"messages[0].content", "image"});
  Message user;
  user.role = "user";
  user.content_parts = {{"image_url", "", Json::parse(R"({"type": "image_url"})")}};
  expect_error([&] { encode_v41({user}, v41(false)); }, {"messages[0].content[0]", "image"});
}

}  // namespace
}  // namespace deepinfer::encoding
