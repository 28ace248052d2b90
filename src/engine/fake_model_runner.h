// A deterministic stand-in model for engine tests and engine benchmarks. Its logits are a pure
// function of the token history, but it obtains that history only through the cache the engine
// manages (a paged per-token store, a paged compressed store, a window ring and a partial
// group in the fixed state), and it checks every piece against the others, so a wrong page,
// slot, snapshot or rollback shows up as wrong logits or as an error naming the sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/model_runner.h"
#include "ops/backend.h"

namespace deepinfer::engine {

struct FakeModelConfig {
  std::int32_t vocab_size = 64;
  std::int32_t window = 8;               // ring rows that must always be valid
  std::int32_t ratio = 4;                // tokens per compressed row
  std::int32_t max_rollback_tokens = 8;  // extra ring rows for speculative rollback
  bool fixed_state = true;               // false: a model with paged stores only
  std::uint64_t salt = 0;                // a different salt is a different model
  float logit_scale = 4.0f;              // logits lie in [-scale, scale]
  // Keep each step's logits in a tensor of a CPU ops backend and report it as device_backend(),
  // so engine tests drive the device-sampling path (Backend::sample_tokens) without a GPU.
  bool device_logits = false;
  // > 0: the forward call with this number (1-based) throws "device lost" (failure tests).
  std::int64_t fail_at_forward = 0;
};

class FakeModelRunner final : public ModelRunner {
 public:
  explicit FakeModelRunner(FakeModelConfig config = {});

  cache::CacheSpec cache_spec() const override;
  std::int32_t vocab_size() const override { return config_.vocab_size; }
  void allocate_cache(const cache::CacheLayout& layout) override;
  void forward(const ForwardBatch& batch, std::span<float> logits) override;
  void launch(const ForwardBatch& batch) override;
  void collect(std::span<float> logits) override;
  ops::Backend* device_backend() override { return backend_.get(); }
  // With device_logits: placeholder ids are taken from `sampled` (host memory of the CPU ops
  // backend, where the previous step's sampling has already run) at launch.
  bool can_launch_ahead() const override { return backend_ != nullptr; }
  void launch_ahead(const ForwardBatch& batch, const Tensor& sampled) override;
  const Tensor& device_logits() const override { return device_logits_; }

  // The oracle: logits for the token that follows `history`, computed without any cache.
  void reference_logits(std::span<const std::int32_t> history, std::span<float> out) const;

  std::int64_t num_forward_calls() const { return num_forward_calls_; }
  std::int64_t num_forward_tokens() const { return num_forward_tokens_; }

 private:
  struct State {
    std::int64_t absorbed = -1;  // tokens absorbed; -1 = never initialised
    std::uint64_t partial = 0;   // running sum of the current incomplete group
    std::vector<std::int32_t> ring;
  };

  void prepare_state(const ForwardBatch& batch, const ForwardSeq& s, State& state);
  void absorb(std::span<const std::int32_t> pages, State& state, std::int32_t pos, std::int32_t token);
  void rebuild_partial(std::span<const std::int32_t> pages, State& state);
  // Reads positions [0, end) back from the cache and checks ring, partial group and compressed
  // rows against them; returns the history.
  std::vector<std::int32_t> read_history(std::span<const std::int32_t> pages, const State& state, std::int64_t end,
                                         SeqId seq) const;
  std::int32_t token_at(std::span<const std::int32_t> pages, std::int64_t pos) const;

  FakeModelConfig config_;
  cache::CacheLayout layout_;
  std::vector<std::int32_t> token_store_;   // paged store 0: one row per token
  std::vector<std::uint64_t> group_store_;  // paged store 1: one row per `ratio` tokens
  std::vector<State> slots_, snapshots_;
  std::int64_t num_forward_calls_ = 0, num_forward_tokens_ = 0;
  std::unique_ptr<ops::Backend> backend_;  // with device_logits
  Tensor device_logits_;
  std::int32_t launched_ = 0;              // launched steps not collected yet (device_logits mode)
  ForwardBatch resolved_;                  // the last step launched ahead, placeholders replaced
};

}  // namespace deepinfer::engine
