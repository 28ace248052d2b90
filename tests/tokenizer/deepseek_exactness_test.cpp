// The DeepSeek tokenizer against HF tokenizers' own output (fixtures written by
// tools/make_tokenizer_fixtures.py): encode with and without special tokens, decode, streaming
// decode at every step, and patched copies exercising the other pre-tokenizer features.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>

#include "common/thread_pool.h"
#include "common/utf8.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/test_tokenizers.h"

namespace deepinfer::tokenizer {
namespace {

using testing::deepseek_tokenizer;
using testing::read_fixture;

std::vector<TokenId> ids_of(const nlohmann::json& value) { return value.get<std::vector<TokenId>>(); }

std::string input_of(const nlohmann::json& c) {
  return c.contains("hex") ? testing::from_hex(c["hex"].get<std::string>()) : c["text"].get<std::string>();
}

// CPU time, not wall time: the load is single-threaded and CI machines are shared.
TEST(DeepSeekTokenizer, LoadsWellUnderASecond) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  const auto tok = Tokenizer::load(*testing::deepseek_tokenizer_dir());
  const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("loaded the 7.8 MB tokenizer.json in %.3f s CPU (%.3f s wall)\n", cpu, wall);
  EXPECT_EQ(tok.vocab_size(), 128815u);
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "load time is not checked under AddressSanitizer";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "load time is not checked under AddressSanitizer";
#endif
#endif
  EXPECT_LT(cpu, 0.8);
}

TEST(DeepSeekTokenizer, VocabularyAndSpecialTokens) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const Tokenizer& tok = deepseek_tokenizer();
  EXPECT_EQ(tok.special_tokens().bos, 0);
  EXPECT_EQ(tok.special_tokens().eos, 1);
  EXPECT_EQ(tok.special_tokens().pad, 1);
  EXPECT_EQ(tok.prefix_tokens(), (std::vector<TokenId>{0}));
  EXPECT_TRUE(tok.suffix_tokens().empty());
  EXPECT_EQ(tok.token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(tok.token_to_id("<｜Assistant｜>"), 128804);
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_TRUE(tok.is_special(128805));   // <|EOT|>
  EXPECT_FALSE(tok.is_special(128803));  // <｜User｜> is added but not special
  EXPECT_EQ(tok.token_bytes(*tok.token_to_id("Ġthe")), " the");
  EXPECT_EQ(tok.token_bytes(128804), "<｜Assistant｜>");
  EXPECT_EQ(tok.added_tokens().size(), 818u);
  std::size_t total = 0;
  for (std::size_t id = 0; id < tok.vocab_size(); ++id) {
    ASSERT_TRUE(tok.is_valid_id(static_cast<TokenId>(id))) << id;
    total += tok.token_bytes(static_cast<TokenId>(id)).size();
    ASSERT_FALSE(tok.token_bytes(static_cast<TokenId>(id)).empty()) << id;
  }
  EXPECT_FALSE(tok.is_valid_id(128815));
  EXPECT_GT(total, 128815u);
}

TEST(DeepSeekTokenizer, EncodesTheCorpusExactlyLikeHf) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const Tokenizer& tok = deepseek_tokenizer();
  const auto cases = read_fixture("deepseek_encode.jsonl.gz");
  ASSERT_GT(cases.size(), 3000u);
  std::size_t failures = 0;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < cases.size() && failures < 10; ++i) {
    const std::string input = input_of(cases[i]);
    bytes += input.size();
    const auto plain = tok.encode(input, false);
    const auto special = tok.encode(input, true);
    if (plain != ids_of(cases[i]["ids"]) || special != ids_of(cases[i]["ids_special"])) {
      ++failures;
      ADD_FAILURE() << "case " << i << ": " << cases[i].dump().substr(0, 300) << "\n  ours: "
                    << nlohmann::json(plain).dump().substr(0, 300);
    }
  }
  std::printf("%zu cases, %zu bytes encoded identically\n", cases.size(), bytes);
}

TEST(DeepSeekTokenizer, DecodeRoundTripsTheCorpus) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const Tokenizer& tok = deepseek_tokenizer();
  for (const auto& c : read_fixture("deepseek_encode.jsonl.gz")) {
    const std::string expected = c.contains("decoded") ? c["decoded"].get<std::string>() : utf8::to_valid(input_of(c));
    ASSERT_EQ(tok.decode(ids_of(c["ids"])), expected) << c.dump().substr(0, 300);
  }
}

TEST(DeepSeekTokenizer, DecodesLikeHfWithAndWithoutSpecialTokens) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const Tokenizer& tok = deepseek_tokenizer();
  for (const auto& c : read_fixture("deepseek_decode.jsonl.gz")) {
    const auto ids = ids_of(c["ids"]);
    ASSERT_EQ(tok.decode(ids, false), c["text"].get<std::string>()) << c["ids"].dump();
    ASSERT_EQ(tok.decode(ids, true), c["text_skip"].get<std::string>()) << c["ids"].dump();
  }
}

// At every step, what the stream emitted plus its held-back bytes (as U+FFFD) is HF's decode of
// the ids so far; the emitted text is always valid UTF-8 and only ever grows.
TEST(DeepSeekTokenizer, IncrementalDetokenizerMatchesHfDecodeAtEveryStep) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const Tokenizer& tok = deepseek_tokenizer();
  std::size_t checked = 0;
  for (const auto& c : read_fixture("deepseek_decode.jsonl.gz")) {
    if (!c.contains("steps")) continue;
    for (const bool skip : {false, true}) {
      const auto& steps = c[skip ? "steps_skip" : "steps"];
      IncrementalDetokenizer stream(tok, skip);
      std::string emitted;
      const auto ids = ids_of(c["ids"]);
      for (std::size_t k = 0; k < ids.size(); ++k) {
        const std::string piece = stream.push(ids[k]);
        ASSERT_TRUE(utf8::is_valid(piece));
        emitted += piece;
        ASSERT_EQ(emitted + utf8::to_valid(stream.pending()), steps[k].get<std::string>())
            << "step " << k << " of " << c["ids"].dump();
        ++checked;
      }
      emitted += stream.finish();
      ASSERT_EQ(emitted, c[skip ? "text_skip" : "text"].get<std::string>());
    }
  }
  EXPECT_GT(checked, 1000u);
}

TEST(DeepSeekTokenizer, PatchedVariantsEncodeLikeHf) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const auto variants = read_fixture("variants.jsonl.gz");
  ASSERT_GE(variants.size(), 6u);
  for (const auto& variant : variants) {
    const auto name = variant["name"].get<std::string>();
    const Tokenizer tok = testing::patched_deepseek_tokenizer(variant["patch"]);
    for (const auto& c : variant["cases"]) {
      const auto text = c["text"].get<std::string>();
      ASSERT_EQ(tok.encode(text, false), ids_of(c["ids"])) << name << ": " << nlohmann::json(text).dump();
      ASSERT_EQ(tok.encode(text, true), ids_of(c["ids_special"])) << name << ": " << nlohmann::json(text).dump();
    }
  }
}

TEST(DeepSeekTokenizer, BatchEncodeOnEveryCoreEqualsSequential) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const Tokenizer& tok = deepseek_tokenizer();
  std::vector<std::string> texts;
  std::vector<std::vector<TokenId>> expected;
  for (const auto& c : read_fixture("deepseek_encode.jsonl.gz")) {
    texts.push_back(input_of(c));
    expected.push_back(ids_of(c["ids"]));
  }
  ThreadPool pool;
  EXPECT_EQ(tok.encode_batch(texts, false, pool), expected);
}

}  // namespace
}  // namespace deepinfer::tokenizer
