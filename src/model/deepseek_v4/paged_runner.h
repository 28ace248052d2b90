// A V4 or V4.1 model (any SequenceModel) behind the engine's ModelRunner boundary: compressed KV
// and index keys live in page pools the engine addresses through page tables; the sliding-window
// rings and compressor partial groups live in the state arena's slots (one pool per layer, so a
// batch's ops run once for all its sequences), copied to and from snapshot slots.
#pragma once

#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::model::v4 {

class PagedModelRunner final : public engine::ModelRunner {
 public:
  // `model` must outlive the runner (open_paged_runner bundles both).
  explicit PagedModelRunner(SequenceModel& model);
  ~PagedModelRunner() override;

  cache::CacheSpec cache_spec() const override;
  std::int32_t vocab_size() const override;
  void allocate_cache(const cache::CacheLayout& layout) override;
  void forward(const engine::ForwardBatch& batch, std::span<float> logits) override;
  // Asynchronous steps: launch() queues the forward on the backend's stream and keeps the logits
  // there; collect() copies them out when asked (host span) and waits for the device, or with an
  // empty span returns at once (the engine waits on its read-back of the samples).
  void launch(const engine::ForwardBatch& batch) override;
  void collect(std::span<float> logits) override;
  // The V4 model on a device: placeholder ids are resolved on the device (Model::set_sampled_ids).
  bool can_launch_ahead() const override;
  void launch_ahead(const engine::ForwardBatch& batch, const Tensor& sampled) override;
  ops::Backend* device_backend() override;
  const Tensor& device_logits() const override { return logits_; }
  // V4.1: a prompt holding the image token is refused (image input is not supported yet).
  void check_prompt(std::span<const std::int32_t> prompt) const override;

 private:
  // Binds slot `s.state_slot` to this step: state init, the sequence's pages.
  SequenceState& prepare(const engine::ForwardBatch& batch, const engine::ForwardSeq& s);

  SequenceModel& model_;
  cache::CacheLayout layout_;
  bool allocated_ = false;
  std::unique_ptr<StateArena> arena_;               // live slots + the engine's page pools
  std::unique_ptr<StatePool> snapshots_;            // saved fixed state
  std::vector<std::unique_ptr<SequenceState>> slots_;
  std::vector<std::int64_t> snapshot_pos_;          // position each snapshot was taken at (-1: none)
  std::vector<std::vector<std::int32_t>> snapshot_recent_;  // each snapshot's Engram token history
  std::deque<const engine::ForwardBatch*> launched_;  // between launch() and collect(), oldest first
  Tensor logits_;                                   // the launched step's logits [rows, vocab]
  Tensor logits_buffer_;                            // grow-only storage behind logits_
  std::int64_t logits_buffer_rows() const { return logits_buffer_.ndim() == 2 ? logits_buffer_.dim(0) : 0; }
};

// A PagedModelRunner that owns its backend and its loaded model (destroyed runner first, backend last).
class OwningPagedRunner final : public engine::ModelRunner {
 public:
  OwningPagedRunner(std::unique_ptr<ops::Backend> backend, LoadedModel loaded)
      : backend_(std::move(backend)), loaded_(std::move(loaded)), runner_(*loaded_.model) {}
  cache::CacheSpec cache_spec() const override { return runner_.cache_spec(); }
  std::int32_t vocab_size() const override { return runner_.vocab_size(); }
  void allocate_cache(const cache::CacheLayout& layout) override { runner_.allocate_cache(layout); }
  void forward(const engine::ForwardBatch& batch, std::span<float> logits) override { runner_.forward(batch, logits); }
  void launch(const engine::ForwardBatch& batch) override { runner_.launch(batch); }
  void collect(std::span<float> logits) override { runner_.collect(logits); }
  ops::Backend* device_backend() override { return runner_.device_backend(); }
  const Tensor& device_logits() const override { return runner_.device_logits(); }
  void check_prompt(std::span<const std::int32_t> prompt) const override { runner_.check_prompt(prompt); }
  bool can_launch_ahead() const override { return runner_.can_launch_ahead(); }
  void launch_ahead(const engine::ForwardBatch& batch, const Tensor& sampled) override {
    runner_.launch_ahead(batch, sampled);
  }
  const SequenceModel& model() const { return *loaded_.model; }

 private:
  std::unique_ptr<ops::Backend> backend_;
  LoadedModel loaded_;
  PagedModelRunner runner_;
};

// A runner that owns its backend and the loaded checkpoint.
struct OpenedRunner {
  std::unique_ptr<engine::ModelRunner> runner;
  const io::ModelConfig* config = nullptr;  // valid as long as runner lives
  NumericMode mode = NumericMode::kExact;
};

// Opens a V4 or V4.1 checkpoint directory (open_model) on the CPU backend; mode as given, or the
// checkpoint's default (tests and benches; model/executor.h opens on any device with a memory plan).
OpenedRunner open_paged_runner(const std::filesystem::path& directory, std::optional<NumericMode> mode);

}  // namespace deepinfer::model::v4
