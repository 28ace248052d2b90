// Random weights of a real V4 / V4.1 geometry without a checkpoint (`--load-format dummy`, benchmarks): every
// tensor of the weight manifest, made on demand in its release format (FP8 block weights with UE8M0
// scales, packed FP4 experts, bf16/f32 rest), deterministic per (seed, tensor name).
#pragma once

#include <cstdint>
#include <memory>

#include "io/model_config.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/weights.h"
#include "model/sequence_model.h"
#include "ops/backend.h"

namespace deepinfer::model::v4 {

// `config` (V4 or V4.1) cut to its first `layers` backbone layers (real widths, ratios and hash
// layers kept; V4.1: KV / index / candidate sources and Engram layers of the kept layers; no draft
// stages) and set to the release formats: FP8 blocks (V4 128x128, V4.1 32x32) with UE8M0 scales, FP4
// experts, V4.1 Engram tables FP8 with a UE8M0 scale per 32 values. layers <= 0 keeps every layer.
// Throws deepinfer::Error for another model type, too many layers, or a cut that changes a kept
// layer's role (its sources, Full / Reuse / Reindex, Engram).
io::ModelConfig dummy_model_config(const io::ModelConfig& config, int layers);

// A WeightSource that synthesises each tensor of build_weight_manifest(config) when asked. Values:
// norms ~1, embeddings ~N(0,1)-sized, projections ~1/sqrt(fan_in) RMS (FP8 codes in [0.5, 2) times a
// power-of-two block scale; FP4 codes uniform times a power-of-two scale), small biases; tid2eid rows
// of distinct experts. Values are counter-based (ops/random_fill.h). With `device` a CUDA backend,
// tensors of 1 MiB and more are generated in its memory by a kernel (handed out as device tensors,
// which WeightLoader keeps as they are); they hold the same bytes as the host generator's.
std::unique_ptr<WeightSource> dummy_weights(const io::ModelConfig& config, std::uint64_t seed,
                                            ops::Backend* device = nullptr);

// A model (V4 or V4.1 by config.arch) loaded from dummy_weights(config, seed, &backend) (the tensors it makes
// are owned, so the source need not outlive the model). V4.1 Engram hashing has no tokenizer: token
// t maps to compressed id t mod engram_compressed_vocab_size (or t when the config states none).
std::unique_ptr<SequenceModel> load_dummy_model(const io::ModelConfig& config, std::uint64_t seed, ops::Backend& backend, NumericMode mode);

}  // namespace deepinfer::model::v4
