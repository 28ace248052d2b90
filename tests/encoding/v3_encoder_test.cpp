// The native V3 encoder against DeepSeek-V3's Jinja chat_template as rendered by jinja2
// (fixtures from tools/make_chat_fixtures.py), plus the shapes the template cannot take.
#include "encoding/chat_encoder.h"
#include "encoding/chat_json.h"
#include "encoding/test_util.h"

namespace deepinfer::encoding {
namespace {

using namespace testing;  // NOLINT

EncodeOptions v3(bool add_generation_prompt = true) {
  EncodeOptions options;
  options.format = ChatFormat::kDeepSeekV3;
  options.add_generation_prompt = add_generation_prompt;
  return options;
}

TEST(V3Encoder, MatchesJinjaTemplateOnEveryFixture) {
  const Json fixture = load_fixture("v3_chat_template.json");
  ASSERT_GE(fixture["cases"].size(), 8u);
  for (const Json& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<Message> messages = messages_from_json(c["messages"]);
    const EncodeResult result = encode_chat(messages, v3(c["add_generation_prompt"]));
    EXPECT_EQ(result.prompt, c["expected"].get<std::string>());
    EXPECT_FALSE(result.thinking_open);
  }
}

TEST(V3Encoder, DeveloperMessagesJoinTheSystemPrompt) {
  const std::vector<Message> messages = {msg("developer", "Rules."), msg("user", "Hi")};
  EXPECT_EQ(encode_chat(messages, v3()).prompt, cat(kBos, "Rules.", kUser, "Hi", kAssistant));
}

TEST(V3Encoder, EmptyContentWithToolCallsRendersTheCalls) {
  // The template renders calls only for content None; clients often send "" instead.
  const std::vector<Message> messages = {
      msg("user", "t?"), assistant("", std::nullopt, {call("1", "now", "{}")})};
  EXPECT_EQ(encode_chat(messages, v3(false)).prompt,
            cat(kBos, kUser, "t?", kAssistant, kV3CallsBegin, kV3CallBegin, "function", kV3Sep,
                "now\n```json\n{}\n```", kV3CallEnd));
}

TEST(V3Encoder, ContinueFinalMessageLeavesTheAssistantTurnOpen) {
  EncodeOptions options = v3();
  options.continue_final_message = true;
  const std::vector<Message> messages = {msg("user", "Count:"), assistant("1, 2,")};
  EXPECT_EQ(encode_chat(messages, options).prompt, cat(kBos, kUser, "Count:", kAssistant, "1, 2,"));
}

TEST(V3Encoder, RejectsRolesAndFieldsTheFormatLacks) {
  expect_error([] { encode_chat(std::vector{msg("latest_reminder", "x")}, v3()); },
               {"messages[0].role", "latest_reminder", "deepseek_v3"});
  Message user = msg("user", "x");
  user.task = "query";
  expect_error([&] { encode_chat(std::vector{user}, v3()); }, {"messages[0].task"});
}

}  // namespace
}  // namespace deepinfer::encoding
