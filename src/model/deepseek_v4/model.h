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
#include <functional>
#include <memory>
#include <span>

#include "io/model_config.h"
#include "model/deepseek_v4/decode_graphs.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/step_meta.h"
#include "model/deepseek_v4/weights.h"
#include "model/sequence_model.h"
#include "ops/backend.h"
#include "ops/graph.h"
#include "ops/workspace.h"

namespace deepinfer::model::v4 {

struct Step;

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
  // Replays bucketed decode steps as CUDA graphs (default: DEEPINFER_CUDA_GRAPHS, on; only where
  // the backend can capture, never in exact mode). The first step of a bucket runs eagerly and captures its graph.
  void set_graphs(bool graphs);
  // Decode steps replayed from a graph so far (tests, benches).
  std::int64_t graph_replays() const { return graphs_by_bucket_.replays(); }
  // The graph cache (capacity, counters; tests and benches).
  DecodeGraphs& decode_graphs() { return graphs_by_bucket_; }
  // Until reset with nullptr, forward() takes a token id v < 0 as the token in column 0 of row
  // -1 - v of `sampled` (i32 [R, W], device sampling's output of an earlier step), resolved on the
  // device before the embedding (the engine's launch ahead; docs/ENGINE.md §10).
  void set_sampled_ids(const Tensor* sampled) { sampled_ids_ = sampled; }

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
  // Runs the layers of a bucketed decode step from its graph (captured after the bucket's first,
  // eager step), or eagerly. `stream`: the step's stream buffer (its address is part of the graph).
  void run_layers(const Step& step, const void* stream, const std::function<void()>& layers);

  std::shared_ptr<StateArena> arena_;  // the model's own sequences (new_sequence)
  bool bucketed_ = false;
  bool graphs_ = false;
  std::unique_ptr<MetaStaging> staging_;  // the steps' metadata (before the graphs that read it)
  DecodeGraphs graphs_by_bucket_;  // after the workspaces and staging whose memory its graphs hold
  const Tensor* sampled_ids_ = nullptr;  // see set_sampled_ids
};

}  // namespace deepinfer::model::v4
