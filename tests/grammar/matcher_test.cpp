// Matcher behaviour: masks equal the brute-force masks along random walks, rollback, end and
// special tokens, bitmask application.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/thread_pool.h"
#include "grammar/grammar_test_support.h"

namespace deepinfer::grammar {
namespace {

using testing::bit;
using testing::brute_force_mask;
using testing::compile;
using testing::small_vocab;

struct Case {
  ConstraintKind kind;
  std::string text;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      {ConstraintKind::kRegex, "[a-c]{1,3}(yes|no)"},
      {ConstraintKind::kRegex, "-?\\d+(\\.\\d+)?"},
      {ConstraintKind::kEbnf, "root ::= \"<note>\" c \"</note>\"\nc ::= ([a-z ]+ | root)*"},
      {ConstraintKind::kEbnf, "root ::= e\ne ::= e \"+\" t | t\nt ::= \"(\" e \")\" | [0-9]+"},
      {ConstraintKind::kJsonSchema,
       R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},"n":{"type":"integer","minimum":-5,"maximum":120},"tags":{"type":"array","items":{"enum":["a","b"]}}},"required":["name"]})"},
      {ConstraintKind::kJsonSchema,
       R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["v"]}},"$ref":"#/$defs/t"})"},
      {ConstraintKind::kJsonObject, ""},
      {ConstraintKind::kChoice, R"(["yes","no","abc"])"},
  };
  return kCases;
}

TEST(Matcher, MaskEqualsBruteForceAlongRandomWalks) {
  auto vocab = small_vocab();
  for (const Case& c : cases()) {
    auto g = compile(c.kind, c.text, vocab);
    for (int seed = 0; seed < 5; ++seed) {
      Matcher m(g);
      std::mt19937 rng(seed);
      std::vector<std::uint32_t> mask(vocab->bitmask_words());
      for (int step = 0; step < 30 && !m.is_terminated(); ++step) {
        m.fill_next_token_bitmask(mask);
        ASSERT_EQ(mask, brute_force_mask(m)) << c.text << " seed " << seed << " step " << step;
        std::vector<int> allowed;
        for (int id = 0; id < vocab->size(); ++id) {
          if (bit(mask, id)) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty()) << "empty mask on a valid prefix of " << c.text;
        ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
      }
    }
  }
}

TEST(Matcher, RollbackRestoresMasksAndStops) {
  auto vocab = small_vocab();
  auto g = compile(ConstraintKind::kRegex, "abc(12|345)*", vocab);
  Matcher m(g);
  std::vector<std::uint32_t> start(vocab->bitmask_words());
  std::vector<std::uint32_t> mask(vocab->bitmask_words());
  m.fill_next_token_bitmask(start);
  ASSERT_TRUE(m.accept_bytes("abc"));
  EXPECT_TRUE(m.can_stop());
  ASSERT_TRUE(m.accept_bytes("12"));
  ASSERT_TRUE(m.accept_bytes("345"));
  EXPECT_EQ(m.num_steps(), 3);
  m.rollback(3);
  EXPECT_EQ(m.num_steps(), 0);
  EXPECT_FALSE(m.can_stop());
  m.fill_next_token_bitmask(mask);
  EXPECT_EQ(mask, start);
  EXPECT_THROW(m.rollback(1), deepinfer::Error);
}

TEST(Matcher, EndTokenOnlyWhenCompleteAndSpecialTokensNever) {
  auto vocab = small_vocab();
  auto g = compile(ConstraintKind::kRegex, "ab?", vocab);
  const int end = vocab->end_ids()[0];
  const int special = end - 1;
  Matcher m(g);
  std::vector<std::uint32_t> mask(vocab->bitmask_words());
  m.fill_next_token_bitmask(mask);
  EXPECT_FALSE(bit(mask, end));
  EXPECT_FALSE(bit(mask, special));
  EXPECT_FALSE(m.accept_token(end));
  ASSERT_TRUE(m.accept_token('a'));
  m.fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, end));
  EXPECT_TRUE(bit(mask, 'b'));
  EXPECT_FALSE(bit(mask, special));
  EXPECT_FALSE(bit(mask, vocab->num_tokens() + 3));  // logits past the tokenizer
  EXPECT_FALSE(m.accept_token(special));
  ASSERT_TRUE(m.accept_token(end));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token('b'));
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.accept_token('b'));
}

TEST(Matcher, RejectedTokenLeavesStateUnchanged) {
  auto g = compile(ConstraintKind::kChoice, R"(["yes","no"])");
  Matcher m(g);
  EXPECT_FALSE(m.accept_bytes("yo"));
  EXPECT_EQ(m.num_steps(), 0);
  EXPECT_TRUE(m.accept_bytes("y"));
  EXPECT_TRUE(m.accept_bytes("es"));
  EXPECT_TRUE(m.can_stop());
}

TEST(Matcher, ExponentiallyAmbiguousGrammarKeepsWorkingWithBoundedStacks) {
  auto vocab = small_vocab();
  // Every "x" can be a b or a c: 2^n parse stacks without sharing or pruning.
  auto g = compile(ConstraintKind::kEbnf, "root ::= a\na ::= b | c\nb ::= \"x\" a?\nc ::= \"x\" a?", vocab);
  Matcher m(g);
  std::vector<std::uint32_t> mask(vocab->bitmask_words());
  for (int i = 0; i < 20; ++i) {  // 2^20 stacks unpruned
    m.fill_next_token_bitmask(mask);
    ASSERT_TRUE(bit(mask, 'x'));
    ASSERT_EQ(bit(mask, vocab->end_ids()[0]), i > 0);
    ASSERT_TRUE(m.accept_token('x'));
  }
  EXPECT_TRUE(m.can_stop());
}

TEST(Matcher, ApplyBitmaskSetsDisallowedLogitsToMinusInfinity) {
  std::vector<float> logits(70, 1.0f);
  std::vector<std::uint32_t> mask = {0b101u, 1u << 31};
  apply_token_bitmask(logits, mask);
  EXPECT_EQ(logits[0], 1.0f);
  EXPECT_TRUE(std::isinf(logits[1]) && logits[1] < 0);
  EXPECT_EQ(logits[2], 1.0f);
  EXPECT_EQ(logits[63], 1.0f);
  EXPECT_TRUE(std::isinf(logits[62]));
  EXPECT_TRUE(std::isinf(logits[64]));  // past the bitmask
}

TEST(Matcher, BatchFillMatchesSingleFill) {
  auto vocab = small_vocab();
  auto g = compile(ConstraintKind::kJsonObject, "", vocab);
  Matcher a(g);
  Matcher b(g);
  ASSERT_TRUE(b.accept_bytes("{\"k\": [1, "));
  std::vector<Matcher*> rows = {&a, nullptr, &b};
  int words = vocab->bitmask_words();
  std::vector<std::uint32_t> batch(3 * words, 7u);
  ThreadPool pool(2);
  fill_next_token_bitmasks(rows, batch, words, &pool);
  std::vector<std::uint32_t> one(words);
  a.fill_next_token_bitmask(one);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), batch.begin()));
  EXPECT_EQ(batch[words], 7u);  // null row untouched
  b.fill_next_token_bitmask(one);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), batch.begin() + 2 * words));
}

}  // namespace
}  // namespace deepinfer::grammar
