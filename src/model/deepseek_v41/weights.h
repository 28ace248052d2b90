// The V4.1 weights as its forward pass uses them (MODEL_SPEC B2): the block parts V4 also has
// (mHC sites, norms, the attention core, MoE) in v4's structs, plus what CSA2 layers own (the
// KV source's compressor and index-key projection, an index source's queries) and Engram.
// Engram tables stay in host memory: they are lookup-only (gathered rows are uploaded per step).
#pragma once

#include <optional>
#include <vector>

#include "io/model_config.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v41 {

// A KV source (Full layer): compressor (ratio 2: gated pooling; ratio 1: projection only) and the
// indexer's key projection of the pre-RoPE latent.
struct SourceWeights {
  ops::LinearWeight wkv;    // [d, D]
  ops::LinearWeight wgate;  // [d, D], ratio 2 only
  Tensor ape;               // f32 zeros [ratio, d]: V4.1 has no position bias (the op takes one)
  Tensor norm;              // [d]
  ops::LinearWeight wk;     // [d_i, d]
  Tensor k_norm;            // [d_i]
};

// An index source (Full or Reindex layer): the indexer's queries and head weights.
struct IndexQueryWeights {
  ops::LinearWeight wq_b;          // [H_i·d_i, q_lora]
  ops::LinearWeight weights_proj;  // [H_i, D]
};

struct EngramWeights {
  Tensor table;         // host: e4m3 [rows, head_dim] (+ scale) or float [rows, head_dim]
  Tensor table_scale;   // host: ue8m0 / f32 [rows, head_dim / 32], undefined for float tables
  ops::LinearWeight wkv;  // [(hc + 1)·D, lookups·head_dim]
  Tensor omega;         // f32 [hc, D] = q_weight ⊙ k_weight
};

struct LayerWeights {
  v4::LayerWeights block;  // norms, mHC sites, attention core (no compressor/indexer), MoE
  std::optional<SourceWeights> source;
  std::optional<IndexQueryWeights> index;
  std::optional<EngramWeights> engram;
};

struct ModelWeights {
  Tensor embed;  // [V, D]
  std::vector<LayerWeights> layers;
  Tensor norm;
  ops::LinearWeight head;
};

// Loads and checks every backbone tensor of a deepseek_v41 config; DSpark stages and the vision
// tower are not loaded.
ModelWeights load_weights(const v4::WeightSource& source, const io::ModelConfig& config, ops::Backend& backend);

}  // namespace deepinfer::model::v41
