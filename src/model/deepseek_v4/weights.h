// The V4 weights as the forward pass uses them: one struct per block component, every tensor
// checked against the config's shapes at load and uploaded to the backend. Quantised projections
// stay quantised (the linear op decodes FP8/FP4 tiles on the fly); wo_a is dequantised to bf16 as
// DeepSeek's convert.py does.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/model_config.h"
#include "ops/backend.h"

namespace deepinfer::io {
class Checkpoint;
}

namespace deepinfer::model::v4 {

// Where tensors come from, by DeepSeek name (io::Checkpoint, or an in-memory map in tests).
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(std::string_view name) const = 0;
  // Throws deepinfer::Error naming the tensor when absent.
  virtual Tensor tensor(std::string_view name) const = 0;
  // A label for messages ("model dir /x", "memory").
  virtual std::string describe() const = 0;
};

// Adapts an open checkpoint.
std::unique_ptr<WeightSource> checkpoint_weights(const io::Checkpoint& checkpoint);

struct CompressorWeights {
  ops::LinearWeight wkv, wgate;  // [coff·d, D]
  Tensor ape;                    // f32 [ratio, coff·d]
  Tensor norm;                   // [d]
};

struct IndexerWeights {
  ops::LinearWeight wq_b;          // [H_i·d_i, q_lora]
  ops::LinearWeight weights_proj;  // [H_i, D]
  CompressorWeights compressor;    // d = d_i, overlapping (ratio 4)
};

struct AttentionWeights {
  ops::LinearWeight wq_a, wq_b, wkv, wo_b;
  std::vector<ops::LinearWeight> wo_a;  // one [o_lora, H·d / o_groups] bf16/f32 slice per group
  Tensor q_norm, kv_norm;
  Tensor sinks;  // f32 [H]
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;
};

struct MoeWeights {
  ops::LinearWeight gate;  // router [E, D]
  Tensor bias;             // f32 [E] (learned routing) or undefined
  Tensor tid2eid;          // i32 [V, k] (hash routing) or undefined
  std::vector<ops::ExpertWeights> experts;
  ops::ExpertWeights shared;
};

struct LayerWeights {
  Tensor attn_norm, ffn_norm;
  ops::HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights moe;
};

struct ModelWeights {
  Tensor embed;  // [V, D]
  std::vector<LayerWeights> layers;
  Tensor norm;
  ops::LinearWeight head;
  ops::HcWeights hc_head;
};

// Loads and checks every backbone tensor of `config` (MTP/DSpark stages are not loaded). Errors
// name the tensor, what was expected and what was found.
ModelWeights load_weights(const WeightSource& source, const io::ModelConfig& config, ops::Backend& backend);

}  // namespace deepinfer::model::v4
