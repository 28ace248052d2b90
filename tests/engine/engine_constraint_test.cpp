// The engine with structured-output constraints (masks filled inline or on a pool, also under
// speculative rows) and its behaviour when the model fails mid-batch.
#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine_test_support.h"

namespace deepinfer::engine {
namespace {

using testing::Generated;
using testing::make_engine;
using testing::make_prompt;
using testing::ModuloConstraintFactory;
using testing::reference_generate;
using testing::run_to_completion;
using testing::small_config;

SamplingParams constrained(std::int32_t mod, std::uint64_t seed, float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.seq_seed = seed;
  p.max_tokens = 20;
  p.so_args = StructuredOutputArgs{"regex", "mod:" + std::to_string(mod)};
  return p;
}

// Proposes the known answers of the requests, with every third guess replaced by 7 (which no
// constraint here allows), so drafts are accepted, refused by the constraint, and rejected.
class AnswerDrafter final : public DraftProposer {
 public:
  void add(std::vector<std::int32_t> prompt, std::vector<std::int32_t> answer) {
    prompt.insert(prompt.end(), answer.begin(), answer.end());
    full_.push_back(std::move(prompt));
  }
  std::vector<std::int32_t> propose(SeqId, std::span<const std::int32_t> tokens, std::int32_t max_tokens) override {
    std::vector<std::int32_t> out;
    for (const std::vector<std::int32_t>& f : full_) {
      if (f.size() <= tokens.size() || !std::equal(tokens.begin(), tokens.end(), f.begin())) continue;
      for (std::size_t i = tokens.size(); i < f.size() && static_cast<std::int32_t>(out.size()) < max_tokens; ++i) {
        out.push_back(i % 3 == 0 ? 7 : f[i]);
      }
      break;
    }
    return out;
  }

 private:
  std::vector<std::vector<std::int32_t>> full_;
};

TEST(EngineConstraints, MaskedOutputsEqualTheReferenceInlineOnAPoolAndWithDrafts) {
  for (int variant = 0; variant < 3; ++variant) {
    EngineConfig config = small_config();
    if (variant == 1) config.worker_threads = 2;
    if (variant == 2) config.scheduler.max_draft_tokens = 4;
    auto engine = make_engine(config);
    engine->set_constraint_factory(std::make_shared<ModuloConstraintFactory>(64));
    auto drafter = std::make_shared<AnswerDrafter>();
    if (variant == 2) engine->set_draft_proposer(drafter);
    const FakeModelRunner oracle;
    std::vector<Generated> wants;
    struct Req {
      std::string id;
      std::vector<std::int32_t> prompt;
      SamplingParams params;
    };
    std::vector<Req> reqs;
    for (std::int32_t i = 0; i < 8; ++i) {
      Req r{"c" + std::to_string(i), make_prompt(5 + i * 3, 40 + static_cast<std::uint32_t>(i), 64), {}};
      if (i % 4 == 3) {
        r.params.max_tokens = 12;  // unconstrained neighbour
        r.params.seq_seed = 1;
      } else {
        r.params = constrained(i % 2 == 0 ? 3 : 5, static_cast<std::uint64_t>(i), i % 3 == 0 ? 0.0f : 1.0f);
      }
      std::unique_ptr<TokenConstraint> c;
      if (r.params.so_args) c = ModuloConstraintFactory(64).create(*r.params.so_args);
      wants.push_back(reference_generate(oracle, r.prompt, r.params, *r.params.seq_seed, config, c.get()));
      drafter->add(r.prompt, wants.back().tokens);
      engine->add_request(r.id, r.prompt, r.params);
      reqs.push_back(std::move(r));
    }
    const auto got = run_to_completion(*engine);
    for (std::size_t k = 0; k < reqs.size(); ++k) {
      const Req& r = reqs[k];
      const Generated& want = wants[k];
      const Generated& g = got.at(r.id)[0];
      EXPECT_EQ(g.tokens, want.tokens) << r.id << " variant " << variant;
      EXPECT_EQ(g.finish, want.finish) << r.id << " variant " << variant;
      if (r.params.so_args) {
        const std::int32_t mod = r.params.so_args->schema == "mod:3" ? 3 : 5;
        for (std::int32_t t : g.tokens) EXPECT_EQ(t % mod, 0) << r.id;
        EXPECT_EQ(g.finish, FinishReason::kStop) << r.id;  // the constraint's end is EOS
      }
    }
    if (variant == 2) {
      EXPECT_GT(engine->stats().accepted_draft_tokens, 10);
      EXPECT_LT(engine->stats().accepted_draft_tokens, engine->stats().draft_tokens);
    }
  }
}

TEST(EngineConstraints, InvalidOrUnsupportedConstraintsFailTheRequestOnly) {
  auto engine = make_engine(small_config());
  SamplingParams p = constrained(3, 1, 1.0f);
  EXPECT_THROW(engine->add_request("no-backend", make_prompt(4, 1, 64), p), Error);
  engine->set_constraint_factory(std::make_shared<ModuloConstraintFactory>(64));
  p.so_args->schema = "bogus";
  try {
    engine->add_request("bad", make_prompt(4, 1, 64), p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request bad: so_args: unsupported toy schema 'bogus'"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(engine->has_unfinished());
}

TEST(EngineFailures, AModelErrorEndsThatBatchsRequestsAndTheEngineGoesOn) {
  EngineConfig config = small_config();
  config.worker_threads = 2;
  Engine engine(config, std::make_unique<testing::FailingRunner>());
  engine.set_constraint_factory(std::make_shared<ModuloConstraintFactory>(64));
  SamplingParams p;
  p.max_tokens = 10;
  engine.add_request("a", make_prompt(6, 1, 64), p);
  engine.add_request("b", make_prompt(6, 2, 64), constrained(3, 2, 1.0f));
  engine.step();
  engine.step();
  EXPECT_THROW(engine.step(), Error);
  const std::vector<RequestOutput> out = engine.step();
  ASSERT_EQ(out.size(), 2u);
  for (const RequestOutput& r : out) {
    EXPECT_TRUE(r.finished);
    EXPECT_EQ(r.completions.at(0).finish_reason, FinishReason::kError);
  }
  EXPECT_EQ(engine.scheduler().page_pool().num_in_use(), 0);
  engine.add_request("c", make_prompt(6, 3, 64), p);
  const auto got = run_to_completion(engine);
  EXPECT_EQ(got.at("c")[0].tokens.size(), 10u);
}

}  // namespace
}  // namespace deepinfer::engine
