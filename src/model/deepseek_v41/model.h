// The DeepSeek-V4.1 model on an ops::Backend (MODEL_SPEC part B): lagged single-pass mHC, CSA2
// attention (KV sources with ratio 2 / 1 compressors, Reuse and Reindex layers, hierarchical
// candidates), Engram reads, MoE without hash routing and the final collapse without hc_head.
// Shares the attention core, MoE, RoPE, numerics, state and weight loading with deepseek_v4.
//
//   auto model = Model::load(*v4::checkpoint_weights(ckpt), ckpt.config(), backend, mode, hasher);
//   auto seq = model->new_sequence();
//   model->forward({{seq.get(), prompt, 1}}, logits);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "model/deepseek_v4/decode_graphs.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/step_meta.h"
#include "model/deepseek_v41/weights.h"
#include "model/engram/engram_hash.h"
#include "model/sequence_model.h"
#include "ops/backend.h"
#include "ops/workspace.h"

namespace deepinfer::model::v4 {
struct Step;
}  // namespace deepinfer::model::v4

namespace deepinfer::model::v41 {

// SWA bounded replay on prefill (MODEL_SPEC B5.3): with `compact`, layers after the last KV source
// run only the last keep_tokens rows of a prefill chunk longer than that.
struct ReplayOptions {
  bool compact = false;
  std::int64_t keep_tokens = 140;
  std::int64_t max_draft_tokens = 0;  // the kept tail must cover window + this

  // DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE / _KEEP_TOKENS; the longest draft is
  // DEEPINFER_USE_NEXTN_DECODE when the checkpoint has draft stages (DSpark), else 0.
  static ReplayOptions from_env(const io::ModelConfig& config);
};

class Model final : public SequenceModel {
 public:
  // Checks the config (deepseek_v41, sizes the ops support), loads every backbone tensor and keeps
  // `hasher` for the Engram layers (required when the config has any).
  static std::unique_ptr<Model> load(const v4::WeightSource& weights, const io::ModelConfig& config,
                                     ops::Backend& backend, const v4::Numerics& numerics,
                                     std::shared_ptr<const engram::EngramHasher> hasher,
                                     const ReplayOptions& replay = {});

  const io::ModelConfig& config() const override { return config_; }
  const v4::Numerics& numerics() const override { return numerics_; }
  ops::Backend& backend() const override { return backend_; }
  const ReplayOptions& replay() const { return replay_; }
  std::unique_ptr<v4::SequenceState> new_sequence() const override;
  void forward(std::span<const Chunk> chunks, Tensor& logits) override;
  // As v4::Model: decode steps padded to batch / context buckets (on by default on devices), and
  // replayed as CUDA graphs per bucket (DEEPINFER_CUDA_GRAPHS; never in exact mode).
  void set_bucketed(bool bucketed) { bucketed_ = bucketed; }
  void set_graphs(bool graphs);
  std::int64_t graph_replays() const { return graphs_by_bucket_.replays(); }
  v4::DecodeGraphs& decode_graphs() { return graphs_by_bucket_; }

 private:
  Model(const io::ModelConfig& config, ops::Backend& backend, const v4::Numerics& numerics);

  io::ModelConfig config_;
  ops::Backend& backend_;
  v4::Numerics numerics_;
  ReplayOptions replay_;
  ModelWeights weights_;
  std::shared_ptr<const engram::EngramHasher> hasher_;
  int last_kv_source_ = -1;
  ops::RopeTable rope_main_;
  ops::RopeTable rope_compress_;
  ops::Workspace step_ws_;
  ops::Workspace layer_ws_;
  std::shared_ptr<v4::StateArena> arena_;  // the model's own sequences (new_sequence)
  std::unique_ptr<v4::MetaStaging> staging_;  // the steps' metadata
  std::unique_ptr<v4::MetaStaging> engram_staging_;  // the steps' Engram table rows (f32 bit patterns)
  bool bucketed_ = false;
  bool graphs_ = false;
  v4::DecodeGraphs graphs_by_bucket_;  // after the workspaces and staging whose memory its graphs hold

  // The step's Engram rows of every Engram layer, f32 [T, columns · head_dim] each, in one upload.
  std::vector<Tensor> upload_engram_rows(const v4::Step& step, std::span<const std::int32_t> ids);
  // Runs a bucketed decode step's layers from its bucket's graph, or eagerly (other steps, graphs
  // off). `stream`, `engram_rows`: device buffers the layers read (their addresses key the graph).
  void run_layers(const v4::Step& step, const void* stream, const void* engram_rows,
                  const std::function<void()>& layers);
};

}  // namespace deepinfer::model::v41
