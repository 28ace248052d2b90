// A V4 or V4.1 model (any SequenceModel) behind the engine's ModelRunner boundary: compressed KV
// and index keys live in page pools the engine addresses through page tables; the sliding-window
// rings, compressor partial groups and the Engram token history live in per-sequence state slots,
// copied to and from snapshot slots.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::model::v4 {

class PagedRowStore;

class PagedModelRunner final : public engine::ModelRunner {
 public:
  // `model` must outlive the runner (open_paged_runner bundles both).
  explicit PagedModelRunner(SequenceModel& model);
  ~PagedModelRunner() override;

  cache::CacheSpec cache_spec() const override;
  std::int32_t vocab_size() const override;
  void allocate_cache(const cache::CacheLayout& layout) override;
  void forward(const engine::ForwardBatch& batch, std::span<float> logits) override;
  // V4.1: a prompt holding the image token is refused (image input is not supported yet).
  void check_prompt(std::span<const std::int32_t> prompt) const override;

 private:
  // Where a layer's stores sit in CacheSpec::paged (-1: the layer has none).
  struct LayerStores {
    int kv = -1;
    int index = -1;
  };
  // Binds slot `s.state_slot` to this step: state init, page tables of its row stores.
  SequenceState& prepare(const engine::ForwardBatch& batch, const engine::ForwardSeq& s);
  // The fixed-state tensors of a sequence (rings, compressor partial groups), in a fixed order.
  static std::vector<Tensor*> fixed_tensors(SequenceState& state);
  void copy_fixed(SequenceState& src, SequenceState& dst);

  SequenceModel& model_;
  std::vector<LayerStores> stores_;
  cache::CacheLayout layout_;
  bool allocated_ = false;
  std::vector<Tensor> pools_;                       // one per paged store
  std::unique_ptr<SequenceState> fresh_;            // the state at position 0
  std::vector<std::unique_ptr<SequenceState>> slots_;
  std::vector<std::unique_ptr<SequenceState>> snapshots_;
  std::vector<std::int64_t> snapshot_pos_;          // position each snapshot was taken at (-1: none)
};

// A runner that owns its backend and the loaded checkpoint.
struct OpenedRunner {
  std::unique_ptr<engine::ModelRunner> runner;
  const io::ModelConfig* config = nullptr;  // valid as long as runner lives
  NumericMode mode = NumericMode::kExact;
};

// Opens a V4 or V4.1 checkpoint directory (open_model) on `device` ("cpu" or "cuda"/"cuda:N");
// mode as given, or the checkpoint's default.
OpenedRunner open_paged_runner(const std::filesystem::path& directory, std::optional<NumericMode> mode,
                               const std::string& device = "cpu");

}  // namespace deepinfer::model::v4
