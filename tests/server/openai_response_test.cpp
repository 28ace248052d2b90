// Response objects: usage, both logprobs shapes, tool-call deltas, finish and stop reasons.
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "server/fake_backend.h"

namespace deepinfer::server {
namespace {

using testing::FakeCodec;

int32_t id_of(char c) { return static_cast<unsigned char>(c) + FakeCodec::kOffset; }

TEST(OpenAiResponse, UsageCountsTotalsCachedAndReasoningTokens) {
  UsageCounts u{10, 5, 4, std::nullopt};
  auto j = usage_json(u);
  EXPECT_EQ(j["total_tokens"], 15);
  EXPECT_EQ(j["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_FALSE(j.contains("completion_tokens_details"));
  u += UsageCounts{1, 2, 0, 2};
  j = usage_json(u);
  EXPECT_EQ(j["completion_tokens"], 7);
  EXPECT_EQ(j["completion_tokens_details"]["reasoning_tokens"], 2);
}

TEST(OpenAiResponse, CompletionLogprobsHaveTokensOffsetsAndTopDicts) {
  FakeCodec codec;
  CompletionLogprobs lp(3);
  lp.append({{id_of('a'), -0.5f, {{id_of('b'), -0.25f}}}, {id_of('c'), -std::numeric_limits<float>::infinity(), {}}},
            codec);
  const auto j = lp.take();
  EXPECT_EQ(j["tokens"], nlohmann::json({"a", "c"}));
  EXPECT_EQ(j["token_logprobs"][0], -0.5);
  EXPECT_EQ(j["token_logprobs"][1], -9999.0);  // -inf has no JSON spelling
  EXPECT_EQ(j["text_offset"], nlohmann::json({3, 4}));
  EXPECT_EQ(j["top_logprobs"][0], nlohmann::json({{"a", -0.5}, {"b", -0.25}}));  // top plus the sampled token
  EXPECT_TRUE(lp.empty());
}

TEST(OpenAiResponse, ChatLogprobsCarryBytes) {
  FakeCodec codec;
  const auto j = chat_logprob_entries({{id_of('\xe4'), -1.0f, {{id_of('x'), -2.0f}}}}, codec);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["bytes"], nlohmann::json({0xe4}));
  EXPECT_EQ(j[0]["top_logprobs"][0]["token"], "x");
  EXPECT_EQ(j[0]["top_logprobs"][0]["bytes"], nlohmann::json({'x'}));
}

TEST(OpenAiResponse, ToolCallDeltaCarriesIdAndNameOnlyFirst) {
  ChatDelta first;
  first.tool_calls.push_back({0, "call_1", "get_weather", ""});
  auto j = chat_delta_json(first);
  EXPECT_EQ(j["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(j["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(j["tool_calls"][0]["function"]["arguments"], "");
  ChatDelta later;
  later.tool_calls.push_back({0, "", "", "{\"city\":"});
  j = chat_delta_json(later);
  EXPECT_FALSE(j["tool_calls"][0].contains("id"));
  EXPECT_FALSE(j["tool_calls"][0]["function"].contains("name"));
  EXPECT_EQ(chat_delta_json(ChatDelta{}), nlohmann::json::object());
}

TEST(OpenAiResponse, FinishAndStopReasons) {
  EXPECT_EQ(finish_reason_name(FinishReason::kStop, false), "stop");
  EXPECT_EQ(finish_reason_name(FinishReason::kStop, true), "tool_calls");
  EXPECT_EQ(finish_reason_name(FinishReason::kLength, true), "length");
  GenerationOutput out;
  out.finished = true;
  EXPECT_TRUE(stop_reason_json(out).is_null());  // EOS
  out.stop_string = "###";
  EXPECT_EQ(stop_reason_json(out), "###");
  out.stop_string.clear();
  out.stop_token_id = 42;
  EXPECT_EQ(stop_reason_json(out), 42);
}

TEST(OpenAiResponse, IdsAreUniqueAndPrefixed) {
  const auto a = make_response_id("cmpl-");
  EXPECT_EQ(a.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 5u + 32u);
  EXPECT_NE(a, make_response_id("cmpl-"));
}

}  // namespace
}  // namespace deepinfer::server
