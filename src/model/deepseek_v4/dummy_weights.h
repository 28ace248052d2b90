// Random weights of a real V4 geometry without a checkpoint (`--load-format dummy`, benchmarks): every
// tensor of the weight manifest, made on demand in its release format (FP8 block weights with UE8M0
// scales, packed FP4 experts, bf16/f32 rest), deterministic per (seed, tensor name).
#pragma once

#include <cstdint>
#include <memory>

#include "io/model_config.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// `config` cut to its first `layers` backbone layers (real widths, ratios and hash layers kept; no
// draft stages) and set to the release formats: FP8 128x128 blocks with UE8M0 scales, FP4 experts.
// layers <= 0 keeps every layer. Throws deepinfer::Error for a non-V4 config or too many layers.
io::ModelConfig dummy_model_config(const io::ModelConfig& config, int layers);

// A WeightSource that synthesises each tensor of build_weight_manifest(config) when asked. Values:
// norms ~1, embeddings ~N(0,1)-sized, projections ~1/sqrt(fan_in) RMS (FP8 codes in [0.5, 2) times a
// power-of-two block scale; FP4 codes uniform times a power-of-two scale), small biases; tid2eid rows
// of distinct experts. Large tensors are filled on all cores.
std::unique_ptr<WeightSource> dummy_weights(const io::ModelConfig& config, std::uint64_t seed);

}  // namespace deepinfer::model::v4
