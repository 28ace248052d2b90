// Tokenizer behaviour on small hand-made tokenizer.json files: merge order, added tokens and their
// flags, decoding, streaming, loading paths and the errors for unsupported or broken files.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <random>
#include <unistd.h>

#include "common/error.h"
#include "common/thread_pool.h"
#include "common/utf8.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/test_tokenizers.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {
namespace {

using nlohmann::json;
using testing::tiny_tokenizer_json;

const json kByteLevelOnly = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
const json kGpt2 = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};

json added(const std::string& content, TokenId id, json flags = json::object()) {
  json token = {{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false},  {"normalized", false}, {"special", true}};
  token.update(flags);
  return token;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Bpe, MergesLowestRankFirst) {
  // Ids: bytes 0-255, then each merge's concatenation in order.
  auto tok = Tokenizer::from_json(tiny_tokenizer_json({"b c", "a b", "a bc"}, kByteLevelOnly));
  EXPECT_EQ(tok.encode("abc"), (std::vector<TokenId>{258}));  // b+c (rank 0) then a+bc
  auto tok2 = Tokenizer::from_json(tiny_tokenizer_json({"a b", "b c", "ab c"}, kByteLevelOnly));
  EXPECT_EQ(tok2.encode("abc"), (std::vector<TokenId>{258}));  // a+b then ab+c
  auto tok3 = Tokenizer::from_json(tiny_tokenizer_json({"a b", "b c"}, kByteLevelOnly));
  EXPECT_EQ(tok3.encode("abc"), (std::vector<TokenId>{256, 'c'}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json({"a a", "aa aa"}, kByteLevelOnly));
  EXPECT_EQ(tok.encode("aaa"), (std::vector<TokenId>{256, 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<TokenId>{257}));
  EXPECT_EQ(tok.encode("aaaaa"), (std::vector<TokenId>{257, 'a'}));
}

// The textbook algorithm, for reference: merge the lowest-ranked adjacent pair (leftmost on
// ties) until none is left.
std::vector<std::string> reference_bpe(const std::string& word, const std::vector<std::string>& merges) {
  std::vector<std::string> symbols;
  for (const char c : word) symbols.emplace_back(1, c);
  while (true) {
    std::size_t best = symbols.size();
    std::size_t best_rank = merges.size();
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = std::find(merges.begin(), merges.end(), symbols[i] + " " + symbols[i + 1]);
      const auto rank = static_cast<std::size_t>(it - merges.begin());
      if (rank < best_rank) {
        best_rank = rank;
        best = i;
      }
    }
    if (best == symbols.size()) return symbols;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

// Short words take an array scan, long ones (> 48 symbols) a heap; both must be the textbook BPE.
TEST(Bpe, ShortAndLongWordsMergeLikeTheTextbookAlgorithm) {
  const std::vector<std::string> merges = {"a b", "b a", "ab a", "ba b", "a a", "aa b", "ab ab", "c a", "ca b",
                                           "b c", "aab c", "aba ba", "c c"};
  auto tok = Tokenizer::from_json(tiny_tokenizer_json(merges, kByteLevelOnly));
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    std::string word;
    const std::size_t length = 1 + rng() % (n < 150 ? 48 : 400);
    for (std::size_t i = 0; i < length; ++i) word.push_back("abc"[rng() % 3]);
    std::vector<TokenId> expected;
    for (const std::string& symbol : reference_bpe(word, merges)) expected.push_back(*tok.token_to_id(symbol));
    ASSERT_EQ(tok.encode(word), expected) << word;
    ASSERT_EQ(tok.encode(word), expected) << "second (cached) encode of " << word;
  }
}

// Added tokens get ids after the vocabulary (256 bytes + one per merge), in list order.
TEST(AddedTokens, AreSplitOutBeforePreTokenization) {
  auto tok = Tokenizer::from_json(
      tiny_tokenizer_json({"a b"}, kGpt2, json::array({added("<s>", 257), added("<s>x", 258)})));
  EXPECT_EQ(tok.encode("ab<s>ab"), (std::vector<TokenId>{256, 257, 256}));
  EXPECT_EQ(tok.encode("<s>x<s"), (std::vector<TokenId>{258, '<', 's'}));  // leftmost-longest
  EXPECT_EQ(tok.encode("<<s>"), (std::vector<TokenId>{'<', 257}));
  EXPECT_TRUE(tok.is_special(257));
  EXPECT_EQ(tok.token_to_id("<s>"), 257);
}

TEST(AddedTokens, NonNormalizedTokensAreFoundFirstOverTheWholeText) {
  // "abc" (normalized) overlaps "bcd" (not normalized): the raw pass claims "bcd" first.
  auto tok = Tokenizer::from_json(tiny_tokenizer_json(
      {}, kByteLevelOnly,
      json::array({added("abc", 256, {{"normalized", true}, {"special", false}}), added("bcd", 257)})));
  EXPECT_EQ(tok.encode("abcd"), (std::vector<TokenId>{'a', 257}));
  EXPECT_EQ(tok.encode("abce"), (std::vector<TokenId>{256, 'e'}));
}

TEST(AddedTokens, HonourSingleWordLstripRstrip) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json(
      {}, kByteLevelOnly,
      json::array({added("wd", 256, {{"single_word", true}}), added("[M]", 257, {{"lstrip", true}}),
                   added("<t>", 258, {{"rstrip", true}})})));
  EXPECT_EQ(tok.encode("wd"), (std::vector<TokenId>{256}));
  EXPECT_EQ(tok.encode("a wd."), (std::vector<TokenId>{'a', ' ', 256, '.'}));
  EXPECT_EQ(tok.encode("awd"), (std::vector<TokenId>{'a', 'w', 'd'}));  // inside a word: not matched
  EXPECT_EQ(tok.encode("wd_"), (std::vector<TokenId>{'w', 'd', '_'}));  // _ is a word character
  EXPECT_EQ(tok.encode("éwd"), (std::vector<TokenId>{0xC3, 0xA9, 'w', 'd'}));
  EXPECT_EQ(tok.encode("a  [M]"), (std::vector<TokenId>{'a', 257}));
  EXPECT_EQ(tok.encode("<t> \n b"), (std::vector<TokenId>{258, 'b'}));
}

// HF's encode_special_tokens: special tokens' text is encoded as text; other added tokens are
// still found, except inside the span of a skipped special match (expected ids from HF).
TEST(AddedTokens, SplitSpecialTokensEncodesTheirTextAsText) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json(
      {"a b"}, kGpt2,
      json::array({added("<s>", 257), added("<u>", 258, {{"special", false}}),
                   added("s>x", 259, {{"special", false}})})));
  const EncodeOptions split{.add_special_tokens = false, .split_special_tokens = true};
  EXPECT_EQ(tok.encode("a<s>b<u>c", split), (std::vector<TokenId>{97, 60, 115, 62, 98, 258, 99}));
  EXPECT_EQ(tok.encode("<s>x", split), (std::vector<TokenId>{60, 115, 62, 120}));
  EXPECT_EQ(tok.encode("ab<u><s>", split), (std::vector<TokenId>{256, 258, 60, 115, 62}));
  EXPECT_EQ(tok.encode("ab<u><s>"), (std::vector<TokenId>{256, 258, 257}));
  EXPECT_EQ(tok.encode("<s>x"), (std::vector<TokenId>{257, 120}));
}

TEST(AddedTokens, TakeTheIdsHfAssignsNotTheListedOnes) {
  // HF ignores "id": an existing vocabulary string keeps its id, new ones count up from the
  // vocabulary size.
  auto tok = Tokenizer::from_json(
      tiny_tokenizer_json({"a b"}, kByteLevelOnly, json::array({added("ab", 999), added("<new>", 5)})));
  EXPECT_EQ(tok.token_to_id("ab"), 256);
  EXPECT_EQ(tok.token_to_id("<new>"), 257);
  EXPECT_EQ(tok.vocab_size(), 258u);
}

TEST(Decode, ConcatenatesBytesAndReplacesInvalidUtf8) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json({}, kByteLevelOnly, json::array({added("<s>", 256)})));
  EXPECT_EQ(tok.decode(std::vector<TokenId>{0xE4, 0xB8, 0xAD}), "中");
  EXPECT_EQ(tok.decode(std::vector<TokenId>{0xE4, 0xB8}), std::string(utf8::kReplacement));
  EXPECT_EQ(tok.decode(std::vector<TokenId>{256, 'a', 256}), "<s>a<s>");
  EXPECT_EQ(tok.decode(std::vector<TokenId>{256, 'a', 256}, /*skip_special_tokens=*/true), "a");
  EXPECT_EQ(tok.token_bytes(' '), " ");
  EXPECT_NE(error_of([&] { tok.decode(std::vector<TokenId>{257}); }).find("257"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.decode(std::vector<TokenId>{-1}); }).find("-1"), std::string::npos);
}

TEST(Encode, ReplacesInvalidUtf8LikePythonBeforeEncoding) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json({}, kGpt2));
  EXPECT_EQ(tok.encode("a\xFF" "b"), tok.encode("a\xEF\xBF\xBD" "b"));
  EXPECT_EQ(tok.encode("\xF0\x9F\x98"), tok.encode("\xEF\xBF\xBD"));
}

TEST(IncrementalDetokenizer, EmitsOnlyCompleteCharacters) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json({}, kByteLevelOnly, json::array({added("<s>", 256)})));
  IncrementalDetokenizer stream(tok);
  EXPECT_EQ(stream.push(0xF0), "");
  EXPECT_EQ(stream.push(0x9F), "");
  EXPECT_EQ(stream.push(0x98), "");
  EXPECT_EQ(stream.pending().size(), 3u);
  EXPECT_EQ(stream.push(0x80), "😀");
  EXPECT_EQ(stream.push(0xE4), "");
  EXPECT_EQ(stream.push('a'), std::string(utf8::kReplacement) + "a");  // can never complete now
  EXPECT_EQ(stream.push(0xC3), "");
  EXPECT_EQ(stream.finish(), std::string(utf8::kReplacement));
  EXPECT_EQ(stream.finish(), "");
  IncrementalDetokenizer skipping(tok, /*skip_special_tokens=*/true);
  EXPECT_EQ(skipping.push(256), "");
  EXPECT_EQ(skipping.push('x'), "x");
}

TEST(Encode, AddsSpecialTokensFromTokenizerConfig) {
  const std::string config = R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": true,
                                 "add_eos_token": true})";
  auto tok = Tokenizer::from_json(
      tiny_tokenizer_json({}, kGpt2, json::array({added("<s>", 256), added("</s>", 257)})), config);
  EXPECT_EQ(tok.encode("a", true), (std::vector<TokenId>{256, 'a', 257}));
  EXPECT_EQ(tok.encode("a", false), (std::vector<TokenId>{'a'}));
  EXPECT_EQ(tok.special_tokens().bos, 256);
  EXPECT_EQ(tok.special_tokens().eos, 257);
  EXPECT_FALSE(tok.special_tokens().pad.has_value());
}

TEST(Encode, BatchOverAThreadPoolEqualsOneByOne) {
  auto tok = Tokenizer::from_json(tiny_tokenizer_json({"a b", "ab c", "Ġ a"}, kGpt2));
  std::vector<std::string> texts;
  for (int i = 0; i < 500; ++i) texts.push_back(std::string(i % 37, 'a') + " abc " + std::to_string(i) + " é");
  ThreadPool pool(4);
  const auto batch = tok.encode_batch(texts, false, pool);
  ASSERT_EQ(batch.size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tok.encode(texts[i])) << i;
}

TEST(Load, AcceptsAFileOrAModelDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / ("deepinfer_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_tokenizer_json({"a b"}, kGpt2, json::array({added("<s>", 257)}));
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>", "add_bos_token": true})";
  const auto from_dir = Tokenizer::load(dir);
  const auto from_file = Tokenizer::load(dir / "tokenizer.json");
  EXPECT_EQ(from_dir.encode("ab", true), (std::vector<TokenId>{257, 256}));
  EXPECT_EQ(from_file.encode("ab", true), from_dir.encode("ab", true));
  EXPECT_NE(error_of([&] { Tokenizer::load(dir / "missing.json"); }).find("missing.json"), std::string::npos);
  std::filesystem::remove(dir / "tokenizer.json");
  EXPECT_NE(error_of([&] { Tokenizer::load(dir); }).find("no tokenizer.json"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Load, NamesWhatIsUnsupportedOrBroken) {
  auto base = json::parse(tiny_tokenizer_json({"a b"}, kGpt2));
  const auto load_with = [&](const std::string& key, const json& value) {
    json root = base;
    root[key] = value;
    return error_of([&] { Tokenizer::from_json(root.dump(), {}, "my.json"); });
  };
  json model = base["model"];
  model["type"] = "WordPiece";
  EXPECT_NE(load_with("model", model).find("'WordPiece'"), std::string::npos);
  EXPECT_NE(load_with("pre_tokenizer", {{"type", "Whitespace"}}).find("'Whitespace'"), std::string::npos);
  EXPECT_NE(load_with("normalizer", {{"type", "NFC"}}).find("'NFC'"), std::string::npos);
  EXPECT_NE(load_with("decoder", {{"type", "WordPiece"}}).find("decoder"), std::string::npos);
  EXPECT_NE(load_with("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(("}}}, {"behavior", "Isolated"}})
                .find("pre_tokenizer"),
            std::string::npos);
  model = base["model"];
  model["merges"].push_back("x yz");
  EXPECT_NE(load_with("model", model).find("'yz' is not in the vocabulary"), std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_json("{\"model\": ", {}, "my.json"); }).find("my.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_json("[1, 2]", {}, "my.json"); }).find("my.json"), std::string::npos);
  EXPECT_NE(load_with("added_tokens", json::array({{{"content", 5}}})).find("added_tokens[0].content"),
            std::string::npos);
}

}  // namespace
}  // namespace deepinfer::tokenizer
