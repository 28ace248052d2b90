// libFuzzer target: the engine over the fake model driven by a script of operations (add a
// request with arbitrary prompt and sampling fields, abort, step, set drafts through a
// proposer). Bad requests may throw deepinfer::Error; nothing else may, the scheduler's
// reference counts must hold after every step, and the engine must drain.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/fake_model_runner.h"

namespace {

using namespace deepinfer::engine;

struct Script {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t pos = 0;
  bool more() const { return pos < size; }
  std::uint8_t next() { return pos < size ? data[pos++] : 0; }
};

// Guesses tokens from the script's bytes (wrong most of the time, right sometimes).
class ScriptDrafter final : public DraftProposer {
 public:
  explicit ScriptDrafter(Script& s) : script_(s) {}
  std::vector<std::int32_t> propose(SeqId, std::span<const std::int32_t> tokens, std::int32_t max_tokens) override {
    std::vector<std::int32_t> out;
    const std::int32_t n = script_.next() % (max_tokens + 1);
    for (std::int32_t i = 0; i < n; ++i) out.push_back((tokens.back() + script_.next()) % 32);
    return out;
  }

 private:
  Script& script_;
};

SamplingParams params_from(Script& s) {
  SamplingParams p;
  p.n = 1 + s.next() % 3;
  p.temperature = static_cast<float>(s.next() % 4) * 0.5f;
  p.top_k = static_cast<std::int32_t>(s.next() % 6) - 1;
  p.top_p = static_cast<float>(s.next() % 5) * 0.25f;  // 0 is invalid
  p.min_p = static_cast<float>(s.next() % 3) * 0.1f;
  p.repetition_penalty = 1.0f + static_cast<float>(s.next() % 3) * 0.2f;
  p.frequency_penalty = static_cast<float>(s.next() % 5) - 2.0f;
  p.max_tokens = static_cast<std::int32_t>(s.next() % 24);  // 0 is invalid
  p.min_tokens = s.next() % 4;
  p.ignore_eos = (s.next() & 1) != 0;
  if ((s.next() & 3) == 0) p.stop_token_ids = {s.next() % 40};
  if ((s.next() & 3) == 0) p.logprobs = s.next() % 4;
  if ((s.next() & 1) != 0) p.seq_seed = s.next();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Script script{data, size};
  EngineConfig config;
  config.scheduler.max_num_seqs = 4;
  config.scheduler.max_num_batched_tokens = 8 + script.next() % 24;
  config.scheduler.max_model_len = 48;
  config.scheduler.max_draft_tokens = script.next() % 3;
  config.cache.page_size = 4;
  config.cache.num_pages = 14 + script.next() % 20;
  config.cache.num_snapshot_slots = script.next() % 6;
  config.cache.enable_prefix_caching = (script.next() & 1) != 0;
  config.cache.admission_watermark = 0.0;
  config.eos_token_ids = {0};
  FakeModelConfig model;
  model.vocab_size = 32;
  model.window = 3;
  model.ratio = 2;
  model.max_rollback_tokens = 2;
  model.fixed_state = (script.next() & 1) != 0;
  Engine engine(config, std::make_unique<FakeModelRunner>(model));
  if ((script.next() & 1) != 0) engine.set_draft_proposer(std::make_shared<ScriptDrafter>(script));
  int next_id = 0;
  while (script.more()) {
    const std::uint8_t op = script.next() % 4;
    if (op == 0) {
      std::vector<std::int32_t> prompt(script.next() % 30);
      for (std::int32_t& t : prompt) t = script.next() % 34;  // 32, 33 are outside the vocabulary
      // Repeated prefixes exercise the prefix cache.
      if ((script.next() & 1) != 0) prompt.insert(prompt.begin(), {5, 6, 7, 8, 9, 10, 11, 12});
      try {
        engine.add_request(std::to_string(next_id++), prompt, params_from(script));
      } catch (const deepinfer::Error&) {
      }
    } else if (op == 1) {
      engine.abort(std::to_string(script.next() % (next_id + 1)));
    } else {
      engine.step();
      engine.scheduler().check_invariants();
    }
  }
  for (int i = 0; i < 10000 && engine.has_unfinished(); ++i) {
    engine.step();
    engine.scheduler().check_invariants();
  }
  if (engine.has_unfinished() || engine.scheduler().page_pool().num_in_use() != 0) __builtin_trap();
  return 0;
}
