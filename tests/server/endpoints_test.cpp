// The endpoints on the fake backend, without HTTP: whole and streamed responses, n > 1 and prompt
// lists, reasoning and tool-call splitting, context-length, model and queue errors, aborts.
#include "server/endpoints.h"

#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/expect_api_error.h"
#include "server/fake_backend.h"
#include "server/sse.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;
using testing::FakeBackend;
using testing::FakeBackendOptions;

struct Harness {
  explicit Harness(FakeBackendOptions options = {}) : backend(options), metrics("fake") {
    config.served_model_names = {"fake", "alias"};
  }
  EndpointContext ctx() { return {backend, metrics, config, stopping, nullptr}; }

  FakeBackend backend;
  ServerMetrics metrics;
  ServerConfig config;
  std::atomic<bool> stopping{false};
};

// Runs a stream to its end and returns its events' payloads.
std::vector<std::string> drain(EventStream& stream) {
  SseParser parser;
  std::vector<std::string> events;
  for (int polls = 0; polls < 10000; ++polls) {
    std::string out;
    const bool done = stream.next(out, std::chrono::milliseconds(50));
    for (auto& e : parser.feed(out)) events.push_back(e);
    if (done) return events;
  }
  ADD_FAILURE() << "stream did not finish";
  return events;
}

using testing::error_of;

std::string seeded_text(uint64_t seed, int index, int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += static_cast<char>(FakeBackend::token_at(seed, index, i) - testing::FakeCodec::kOffset);
  return text;
}

TEST(Endpoints, CompletionWholeResponse) {
  Harness h;
  const auto reply = handle_completions(h.ctx(), R"({"model":"alias","prompt":"hello","max_tokens":6,"seed":7})");
  EXPECT_EQ(reply.status, 200);
  const auto j = json::parse(reply.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "alias");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], seeded_text(7, 0, 6));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 6);  // BOS + 5 bytes
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  const auto submitted = h.backend.submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].sampling.seed, 7u);
  EXPECT_EQ(submitted[0].sampling.max_tokens, 6);
}

TEST(Endpoints, CompletionDefaultsToSixteenTokensAndEchoes) {
  Harness h;
  const auto j = json::parse(handle_completions(h.ctx(), R"({"prompt":[100,101],"echo":true})").body);
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(text.size(), 2u + 16u);
  EXPECT_EQ(text.substr(0, 2), "ab");  // ids 100, 101 are 'a', 'b' in the fake codec
  EXPECT_EQ(j["model"], "fake");
}

TEST(Endpoints, PromptListTimesNGivesIndexedChoicesAndPromptTokensOnce) {
  Harness h;
  const auto j = json::parse(handle_completions(h.ctx(), R"({"prompt":["ab","cde"],"n":2,"max_tokens":3,"seed":1})").body);
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["choices"][1]["text"], seeded_text(1, 1, 3));  // prompt 0, completion 1
  EXPECT_EQ(j["choices"][2]["text"], seeded_text(1, 0, 3));  // prompt 1, completion 0
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3 + 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(h.backend.submitted().size(), 2u);
  EXPECT_EQ(h.backend.submitted()[0].n, 2);
}

TEST(Endpoints, CompletionStreamChunksThenUsageThenDone) {
  Harness h;
  const auto reply = handle_completions(
      h.ctx(), R"({"prompt":"x","max_tokens":4,"seed":3,"stream":true,"stream_options":{"include_usage":true},"logprobs":1})");
  ASSERT_TRUE(reply.stream);
  EXPECT_EQ(reply.content_type, "text/event-stream");
  const auto events = drain(*reply.stream);
  ASSERT_EQ(events.back(), "[DONE]");
  std::string text;
  int finish_chunks = 0;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    const auto chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["usage"].is_null());  // include_usage: null until the last chunk
    text += chunk["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(chunk["choices"][0]["logprobs"]["tokens"].size(), 1u);
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish_chunks++;
  }
  EXPECT_EQ(text, seeded_text(3, 0, 4));
  EXPECT_EQ(finish_chunks, 1);
  const auto usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
}

TEST(Endpoints, ChatSplitsReasoningContentAndToolCalls) {
  FakeBackendOptions options;
  options.script = "plan</think>Sure.<tool>get_weather|{\"city\":\"Paris\"}</tool>";
  Harness h(options);
  const std::string body = R"({"messages":[{"role":"user","content":"weather?"}],"chat_template_kwargs":{"thinking":true},
      "tools":[{"type":"function","function":{"name":"get_weather"}}]})";
  const auto j = json::parse(handle_chat_completions(h.ctx(), body).body);
  const auto& message = j["choices"][0]["message"];
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["reasoning_content"], "plan");
  EXPECT_EQ(message["content"], "Sure.");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(message["tool_calls"][0]["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 4 + 8);  // "plan</think>"
}

TEST(Endpoints, ChatStreamOpensWithRoleAndStreamsDeltas) {
  FakeBackendOptions options;
  options.script = "ab</think>cd<tool>f|{}</tool>";
  Harness h(options);
  const auto reply = handle_chat_completions(h.ctx(), R"({"messages":[{"role":"user","content":"q"}],"stream":true,
      "chat_template_kwargs":{"thinking":true},"tools":[{"type":"function","function":{"name":"f"}}]})");
  const auto events = drain(*reply.stream);
  ASSERT_GE(events.size(), 3u);
  const auto first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  std::string reasoning, content;
  json calls = json::array();
  std::string finish;
  for (std::size_t i = 1; i + 1 < events.size(); ++i) {
    const auto chunk = json::parse(events[i]);
    const auto& choice = chunk["choices"][0];
    const auto& delta = choice["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) calls.push_back(delta["tool_calls"][0]);
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(reasoning, "ab");
  EXPECT_EQ(content, "cd");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "f");
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST(Endpoints, ContextLengthModelAndQueueErrors) {
  FakeBackendOptions options;
  options.max_model_len = 10;
  Harness h(options);
  auto e = error_of([&] { handle_completions(h.ctx(), R"({"prompt":"0123456789"})"); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.code(), "context_length_exceeded");
  EXPECT_EQ(e.param(), "prompt");
  e = error_of([&] { handle_completions(h.ctx(), R"({"prompt":"01","max_tokens":9})"); });
  EXPECT_EQ(e.param(), "max_tokens");
  e = error_of([&] { handle_completions(h.ctx(), R"({"prompt":"01","model":"gpt-4"})"); });
  EXPECT_EQ(e.status(), 404);
  EXPECT_EQ(e.code(), "model_not_found");
  e = error_of([&] { handle_chat_completions(h.ctx(), R"({"messages":[{"role":"latest_reminder","content":"x"}]})"); });
  EXPECT_EQ(e.status(), 400);  // the chat encoding refused it

  FakeBackendOptions tight;
  tight.max_waiting = 1;
  Harness q(tight);
  q.backend.set_paused(true);
  auto held = handle_completions(q.ctx(), R"({"prompt":"a","stream":true})");
  e = error_of([&] { handle_completions(q.ctx(), R"({"prompt":"b"})"); });
  EXPECT_EQ(e.status(), 503);
  EXPECT_EQ(e.code(), "queue_full");
  q.backend.set_paused(false);
}

TEST(Endpoints, StructuredOutputsAreRefusedUntilTheBackendSupportsThem) {
  Harness h;
  auto e = error_of([&] {
    handle_chat_completions(h.ctx(), R"({"messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_object"}})");
  });
  EXPECT_EQ(e.param(), "response_format");
  e = error_of([&] {
    handle_chat_completions(h.ctx(), R"({"messages":[{"role":"user","content":"q"}],"tool_choice":"required",
        "tools":[{"type":"function","function":{"name":"f"}}]})");
  });
  EXPECT_EQ(e.param(), "tool_choice");
}

TEST(Endpoints, ConstrainedChatNeedsThinkingOffUnlessConstraintsCanFollowReasoning) {
  FakeBackendOptions options;
  options.supports_structured_output = true;
  Harness h(options);
  const std::string body = R"({"messages":[{"role":"user","content":"q"}],"max_tokens":2,"regex":"[a-z]+",)";
  auto e = error_of([&] { handle_chat_completions(h.ctx(), body + R"("chat_template_kwargs":{"thinking":true}})"); });
  EXPECT_EQ(e.param(), "response_format");
  const auto reply = handle_chat_completions(h.ctx(), body + R"("chat_template_kwargs":{"thinking":false}})");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(h.backend.submitted().back().sampling.structured_output, json({{"regex", "[a-z]+"}}));
}

TEST(Endpoints, ThinkingModeConstraintStartsAfterTheReasoning) {
  FakeBackendOptions options;
  options.supports_structured_output = true;
  options.structured_output_after_thinking = true;
  Harness h(options);
  const std::string body = R"({"messages":[{"role":"user","content":"q"}],"max_tokens":2,"regex":"[a-z]+",)";
  EXPECT_EQ(handle_chat_completions(h.ctx(), body + R"("chat_template_kwargs":{"thinking":true}})").status, 200);
  EXPECT_EQ(h.backend.submitted().back().sampling.structured_output,
            json({{"regex", "[a-z]+"}, {"start_after", "</think>"}}));
  EXPECT_EQ(handle_chat_completions(h.ctx(), body + R"("chat_template_kwargs":{"thinking":false}})").status, 200);
  EXPECT_EQ(h.backend.submitted().back().sampling.structured_output, json({{"regex", "[a-z]+"}}));
}

TEST(Endpoints, JsonSchemasKeepTheClientsPropertyOrder) {
  FakeBackendOptions options;
  options.supports_structured_output = true;
  Harness h(options);
  ASSERT_EQ(handle_completions(h.ctx(), R"({"prompt":"a","max_tokens":2,"response_format":{"type":"json_schema",
      "json_schema":{"name":"n","schema":{"type":"object","properties":{"z":{"type":"integer"},"a":{}}}}}})").status,
            200);
  EXPECT_EQ(h.backend.submitted().back().sampling.structured_output["json_schema"]["schema"],
            R"({"type":"object","properties":{"z":{"type":"integer"},"a":{}}})");
  ASSERT_EQ(handle_chat_completions(h.ctx(), R"({"messages":[{"role":"user","content":"q"}],"max_tokens":2,
      "structured_outputs":{"json":{"properties":{"z":{},"a":{}}}}})").status, 200);
  EXPECT_EQ(h.backend.submitted().back().sampling.structured_output["structured_outputs"]["json"],
            R"({"properties":{"z":{},"a":{}}})");
}

TEST(Endpoints, ForcedToolCallsBecomeAToolCallConstraint) {
  FakeBackendOptions options;
  options.supports_structured_output = true;
  options.forced_tool_calls = true;
  Harness h(options);
  const std::string head = R"({"messages":[{"role":"user","content":"q"}],"max_tokens":2,
      "chat_template_kwargs":{"thinking":false},"tools":[{"type":"function","function":{"name":"f",
      "parameters":{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}}},
      {"type":"function","function":{"name":"g"}}],)";
  ASSERT_EQ(handle_chat_completions(h.ctx(), head + R"("tool_choice":"required"})").status, 200);
  auto constraint = h.backend.submitted().back().sampling.structured_output;
  ASSERT_TRUE(constraint.contains("tool_calls"));
  // A spec text, so the tools' key order (their parameters' order) survives.
  const std::string spec_text = constraint["tool_calls"].get<std::string>();
  EXPECT_LT(spec_text.find("\"b\""), spec_text.find("\"a\""));
  auto spec = json::parse(spec_text);
  EXPECT_EQ(spec["tags"]["block_open"], "<calls>");
  EXPECT_EQ(spec["tools"].size(), 2u);
  EXPECT_EQ(spec["parallel"], true);
  EXPECT_FALSE(spec.contains("function"));
  ASSERT_EQ(handle_chat_completions(h.ctx(), head + R"("tool_choice":{"type":"function","function":{"name":"g"}},
      "parallel_tool_calls":false})").status, 200);
  spec = json::parse(h.backend.submitted().back().sampling.structured_output["tool_calls"].get<std::string>());
  EXPECT_EQ(spec["function"], "g");
  EXPECT_EQ(spec["parallel"], false);
  auto e = error_of([&] { handle_chat_completions(h.ctx(), head + R"("tool_choice":"required","regex":"a"})"); });
  EXPECT_EQ(e.param(), "tool_choice");
  // Thinking on: the calls come after the reasoning only where constraints can follow it.
  e = error_of([&] {
    handle_chat_completions(h.ctx(), R"({"messages":[{"role":"user","content":"q"}],"tool_choice":"required",
        "chat_template_kwargs":{"thinking":true},"tools":[{"type":"function","function":{"name":"f"}}]})");
  });
  EXPECT_EQ(e.param(), "response_format");
}

TEST(Endpoints, WholeRequestOfAClientThatWentAwayIsAborted) {
  Harness h;
  h.backend.set_paused(true);
  std::atomic<int> polls{0};
  EndpointContext ctx = h.ctx();
  ctx.client_gone = [&polls] { return ++polls > 3; };
  auto e = error_of([&] { handle_completions(ctx, R"({"prompt":["a","b"],"max_tokens":50})"); });
  EXPECT_EQ(e.status(), 499);
  EXPECT_EQ(h.backend.aborted_ids().size(), 2u);
  h.backend.set_paused(false);
  for (int i = 0; i < 1000 && h.backend.num_unfinished() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(h.backend.num_unfinished(), 0);
  EXPECT_NE(h.metrics.render({}).find("finished_reason=\"abort\"} 2"), std::string::npos);
}

TEST(Endpoints, CancelledStreamAbortsItsRequests) {
  Harness h;
  h.backend.set_paused(true);
  auto reply = handle_completions(h.ctx(), R"({"prompt":["a","b"],"stream":true,"max_tokens":50})");
  std::string out;
  reply.stream->next(out, std::chrono::milliseconds(1));
  reply.stream->cancel();
  auto aborted = h.backend.aborted_ids();
  EXPECT_EQ(aborted.size(), 2u);
  reply.stream.reset();
  h.backend.set_paused(false);
  for (int i = 0; i < 1000 && h.backend.num_unfinished() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(h.backend.num_unfinished(), 0);
  EXPECT_NE(h.metrics.render({}).find("finished_reason=\"abort\"} 2"), std::string::npos);
}

TEST(Endpoints, DroppedStreamAbortsToo) {
  Harness h;
  h.backend.set_paused(true);
  { auto reply = handle_chat_completions(h.ctx(), R"({"messages":[{"role":"user","content":"q"}],"stream":true})"); }
  EXPECT_EQ(h.backend.aborted_ids().size(), 1u);
  h.backend.set_paused(false);
}

TEST(Endpoints, TokenizeDetokenizeAndModels) {
  Harness h;
  auto j = json::parse(handle_tokenize(h.ctx(), R"({"prompt":"ab"})").body);
  EXPECT_EQ(j["tokens"], json({0, 100, 101}));
  EXPECT_EQ(j["count"], 3);
  EXPECT_EQ(j["token_strs"][1], "a");
  j = json::parse(handle_detokenize(h.ctx(), R"({"tokens":[100,101]})").body);
  EXPECT_EQ(j["prompt"], "ab");
  j = json::parse(handle_tokenize(h.ctx(), R"({"messages":[{"role":"user","content":"x"}]})").body);
  EXPECT_GT(j["count"].get<int>(), 3);
  j = json::parse(handle_models(h.ctx()).body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["id"], "fake");
  EXPECT_EQ(j["data"][0]["max_model_len"], 256);
  EXPECT_EQ(error_of([&] { handle_model(h.ctx(), "nope"); }).status(), 404);
}

}  // namespace
}  // namespace deepinfer::server
