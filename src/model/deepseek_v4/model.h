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
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"
#include "ops/backend.h"
#include "ops/workspace.h"

namespace deepinfer::model::v4 {

class Model {
 public:
  // Tokens to append to one sequence; logits are produced for its last num_logits tokens.
  struct Chunk {
    SequenceState* state = nullptr;
    std::span<const std::int32_t> tokens;
    std::int32_t num_logits = 0;
  };

  // Checks the config (V4 architecture, sizes the ops support) and loads every backbone tensor.
  static std::unique_ptr<Model> load(const WeightSource& weights, const io::ModelConfig& config,
                                     ops::Backend& backend, NumericMode mode);
  // The same with individual numeric switches (tests and experiments that isolate one QAT step).
  static std::unique_ptr<Model> load(const WeightSource& weights, const io::ModelConfig& config,
                                     ops::Backend& backend, const Numerics& numerics);

  const io::ModelConfig& config() const { return config_; }
  const Numerics& numerics() const { return numerics_; }
  ops::Backend& backend() const { return backend_; }

  // Empty state (position 0) in contiguous backend memory.
  std::unique_ptr<SequenceState> new_sequence() const;

  // Appends each chunk's tokens to its sequence (positions continue from state->num_tokens) and
  // writes f32 logits [Σ num_logits, vocab] (chunk order) into `logits`, a backend tensor. Token
  // ids outside the vocabulary, empty chunks and a sequence given twice are errors.
  void forward(std::span<const Chunk> chunks, Tensor& logits);

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
};

}  // namespace deepinfer::model::v4
