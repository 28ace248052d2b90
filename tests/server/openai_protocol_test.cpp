// Request parsing and validation: accepted forms, defaults, and a 400 naming the offending field
// for each kind of malformed input.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/expect_api_error.h"
#include "server/json_fields.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;
constexpr int32_t kVocab = 1000;

CompletionRequest completion(const std::string& body) { return parse_completion_request(json::parse(body), kVocab); }

ChatRequest chat(const std::string& body, const ChatDefaults& defaults = {}) {
  return parse_chat_request(json::parse(body), nlohmann::ordered_json::parse(body), kVocab, defaults);
}

using testing::error_of;

TEST(OpenAiProtocol, CompletionDefaultsAndSamplingFields) {
  const auto r = completion(R"({"model":"m","prompt":"hi","temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,
    "presence_penalty":1,"frequency_penalty":-1,"repetition_penalty":1.1,"seed":-1,"stop":"x","max_tokens":7,
    "logprobs":3,"n":2,"logit_bias":{"5":-100,"7":2.5},"stop_token_ids":[9],"ignore_eos":true,"min_tokens":2})");
  EXPECT_EQ(r.common.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "hi");
  const auto& s = r.common.sampling;
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(s.seed, std::numeric_limits<uint64_t>::max());  // -1 taken modulo 2^64
  EXPECT_EQ(s.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.common.max_tokens, 7);
  EXPECT_EQ(s.logprobs, 3);
  EXPECT_EQ(r.common.n, 2);
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.stop_token_ids, std::vector<int32_t>{9});
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.min_tokens, 2);
  EXPECT_FALSE(r.common.stream);
}

TEST(OpenAiProtocol, CompletionAcceptsEveryPromptForm) {
  EXPECT_EQ(completion(R"({"prompt":["a","b"]})").prompts.size(), 2u);
  const auto ids = completion(R"({"prompt":[1,2,3]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_TRUE(ids.prompts[0].is_tokens);
  EXPECT_EQ(ids.prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  const auto lists = completion(R"({"prompt":[[1],[2,3]]})");
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(lists.prompts[1].token_ids, (std::vector<int32_t>{2, 3}));
}

TEST(OpenAiProtocol, MalformedFieldsAre400sNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "prompt"},
      {R"({"prompt":5})", "prompt"},
      {R"({"prompt":[]})", "prompt"},
      {R"({"prompt":[1,"a"]})", "prompt[1]"},
      {R"({"prompt":[[1],5]})", "prompt[1]"},
      {R"({"prompt":[1,1000]})", "prompt[1]"},
      {R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {R"({"prompt":"x","temperature":2.5})", "temperature"},
      {R"({"prompt":"x","top_p":0})", "top_p"},
      {R"({"prompt":"x","top_k":-2})", "top_k"},
      {R"({"prompt":"x","min_p":1.5})", "min_p"},
      {R"({"prompt":"x","presence_penalty":3})", "presence_penalty"},
      {R"({"prompt":"x","repetition_penalty":0})", "repetition_penalty"},
      {R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":1.5})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":true})", "max_tokens"},
      {R"({"prompt":"x","n":0})", "n"},
      {R"({"prompt":"x","n":1000})", "n"},
      {R"({"prompt":"x","stop":[1]})", "stop[0]"},
      {R"({"prompt":"x","stop":""})", "stop"},
      {R"({"prompt":"x","seed":"1"})", "seed"},
      {R"({"prompt":"x","logprobs":21})", "logprobs"},
      {R"({"prompt":"x","logit_bias":{"abc":1}})", "logit_bias.abc"},
      {R"({"prompt":"x","logit_bias":{"1":101}})", "logit_bias.1"},
      {R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
      {R"({"prompt":"x","stream":true,"stream_options":{"include_usage":1}})", "stream_options.include_usage"},
      {R"({"prompt":"x","stream":"yes"})", "stream"},
      {R"({"prompt":"x","suffix":"tail"})", "suffix"},
      {R"({"prompt":"x","echo":true,"logprobs":1})", "echo"},
      {R"({"prompt":"x","min_tokens":9,"max_tokens":3})", "min_tokens"},
      {R"({"prompt":"x","stop_token_ids":[-1]})", "stop_token_ids[0]"},
      {R"({"prompt":"x","response_format":{"type":"xml"}})", "response_format.type"},
      {R"({"prompt":"x","response_format":{"type":"json_schema"}})", "response_format.json_schema"},
      {R"({"prompt":"x","model":7})", "model"},
  };
  for (const auto& [body_text, field] : cases) {
    const std::string body = body_text;  // clang 14 cannot capture structured bindings
    SCOPED_TRACE(body);
    const auto e = error_of([&] { completion(body); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), field);
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(OpenAiProtocol, InvalidJsonAndNonObjectBodiesAre400s) {
  for (const char* body : {"{", "[1,2]", "\"text\"", "", "{\"a\":1}}"}) {
    const auto e = error_of([&] { parse_json_body(body); });
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.code(), "invalid_json");
  }
}

TEST(OpenAiProtocol, ChatMaxCompletionTokensWinsAndLogprobsMap) {
  const auto r = chat(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":9,
                          "logprobs":true,"top_logprobs":4,"stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_EQ(r.common.max_tokens, 9);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.common.sampling.logprobs, 4);
  EXPECT_TRUE(r.common.stream_options.include_usage);
  EXPECT_EQ(chat(R"({"messages":[{"role":"user","content":"hi"}]})").common.sampling.logprobs, -1);
}

TEST(OpenAiProtocol, ChatKeepsKeyOrderAndMergesDefaultKwargs) {
  ChatDefaults defaults;
  defaults.chat_template_kwargs = {{"thinking", false}, {"drop_thinking", false}};
  const auto r = chat(R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":
      {"name":"f","parameters":{"type":"object","properties":{"z":{},"a":{}}}}}],
      "chat_template_kwargs":{"thinking":true}})", defaults);
  const auto& props = r.encode_request["tools"][0]["function"]["parameters"]["properties"];
  EXPECT_EQ(props.begin().key(), "z");  // as sent, not sorted
  EXPECT_EQ(r.encode_request["chat_template_kwargs"]["thinking"], true);  // the request wins
  EXPECT_EQ(r.encode_request["chat_template_kwargs"]["drop_thinking"], false);
  EXPECT_TRUE(r.parse_tool_calls);
}

TEST(OpenAiProtocol, ToolChoiceNoneHidesTheTools) {
  const auto r = chat(R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"none",
      "tools":[{"type":"function","function":{"name":"f"}}]})");
  EXPECT_FALSE(r.encode_request.contains("tools"));
  EXPECT_FALSE(r.parse_tool_calls);
  const auto named = chat(R"({"messages":[{"role":"user","content":"hi"}],
      "tool_choice":{"type":"function","function":{"name":"f"}},"tools":[{"type":"function","function":{"name":"f"}}]})");
  EXPECT_EQ(named.tool_choice, "function");
  EXPECT_EQ(named.tool_choice_function, "f");
}

TEST(OpenAiProtocol, MalformedChatFieldsAre400sNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "messages"},
      {R"({"messages":{}})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", "messages[0].content[0].type"},
      {R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"type":"function"}]}]})",
       "messages[1].tool_calls[0].function"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":3}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{}}]})", "tools[0].function.name"},
      {R"({"messages":[{"role":"user","content":"a"}],"tools":{}})", "tools"},
      {R"({"messages":[{"role":"user","content":"a"}],"tool_choice":"sometimes"})", "tool_choice"},
      {R"({"messages":[{"role":"user","content":"a"}],"tool_choice":"required"})", "tool_choice"},
      {R"({"messages":[{"role":"user","content":"a"}],"tool_choice":{"type":"function","function":{"name":"g"}},
          "tools":[{"type":"function","function":{"name":"f"}}]})", "tool_choice.function.name"},
      {R"({"messages":[{"role":"user","content":"a"}],"top_logprobs":2})", "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"a"}],"logprobs":3})", "logprobs"},
      {R"({"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"thinking":"yes"}})",
       "chat_template_kwargs.thinking"},
      {R"({"messages":[{"role":"user","content":"a"}],"thinking":{"type":"sometimes"}})", "thinking.type"},
      {R"({"messages":[{"role":"user","content":"a"}],"reasoning_effort":[1]})", "reasoning_effort"},
      {R"({"messages":[{"role":"user","content":"a"}],"continue_final_message":true})", "continue_final_message"},
  };
  for (const auto& [body_text, field] : cases) {
    const std::string body = body_text;  // clang 14 cannot capture structured bindings
    SCOPED_TRACE(body);
    const auto e = error_of([&] { chat(body); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), field);
  }
}

TEST(OpenAiProtocol, TokenizeAndDetokenizeRequests) {
  const auto t = parse_tokenize_request(json::parse(R"({"prompt":"hi","add_special_tokens":false})"),
                                        nlohmann::ordered_json::parse(R"({"prompt":"hi"})"), {});
  EXPECT_FALSE(t.is_chat);
  EXPECT_FALSE(t.add_special_tokens);
  const std::string chat_body = R"({"messages":[{"role":"user","content":"hi"}]})";
  EXPECT_TRUE(parse_tokenize_request(json::parse(chat_body), nlohmann::ordered_json::parse(chat_body), {}).is_chat);
  EXPECT_EQ(parse_detokenize_request(json::parse(R"({"tokens":[1,2]})"), kVocab).tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(error_of([] { parse_detokenize_request(json::parse(R"({"tokens":[1,5000]})"), kVocab); }).param(),
            "tokens[1]");
}

}  // namespace
}  // namespace deepinfer::server
