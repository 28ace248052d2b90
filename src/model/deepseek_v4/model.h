// The DeepSeek-V4 model on an ops::Backend: loads the backbone's weights, creates per-sequence
// state and runs forward passes over any mix of prefill chunks and decode tokens of several
// sequences. Written once against the op interface, so the CPU and CUDA backends share it.
//
//   auto model = Model::load(*checkpoint_weights(ckpt), ckpt.config(), backend, mode);
//   auto seq = model->new_sequence();
//   Tensor logits = backend.empty({n, vocab}, DType::kF32);
//   model->forward({{seq.get(), prompt, n}}, logits);  // logits of the last n prompt tokens
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "io/model_config.h"
#include "model/sequence_model.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"
#include "ops/backend.h"
#include "ops/workspace.h"

namespace deepinfer::model::v4 {

class Model final : public SequenceModel {
 public:
  // Checks the config (V4 architecture, sizes the ops support) and loads every backbone tensor.
  static std::unique_ptr<Model> load(const WeightSource& weights, const io::ModelConfig& config,
                                     ops::Backend& backend, NumericMode mode);
  // The same with individual numeric switches (tests and experiments that isolate one QAT step).
  static std::unique_ptr<Model> load(const WeightSource& weights, const io::ModelConfig& config,
                                     ops::Backend& backend, const Numerics& numerics);

  const io::ModelConfig& config() const override { return config_; }
  const Numerics& numerics() const override { return numerics_; }
  ops::Backend& backend() const override { return backend_; }
  std::unique_ptr<SequenceState> new_sequence() const override;
  void forward(std::span<const Chunk> chunks, Tensor& logits) override;
  // Pads decode steps to batch / context buckets (fixed launch shapes; on by default on devices,
  // off on the CPU). The padding changes no result.
  void set_bucketed(bool bucketed) { bucketed_ = bucketed; }

 private:
  Model(const io::ModelConfig& config, ops::Backend& backend, const Numerics& numerics);

  io::ModelConfig config_;
  ops::Backend& backend_;
  Numerics numerics_;
  ModelWeights weights_;
  ops::RopeTable rope_main_;
  ops::RopeTable rope_compress_;
  ops::Workspace step_ws_;
  ops::Workspace layer_ws_;
  std::shared_ptr<StateArena> arena_;  // the model's own sequences (new_sequence)
  bool bucketed_ = false;
};

}  // namespace deepinfer::model::v4
