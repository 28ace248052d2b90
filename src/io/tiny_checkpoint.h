// Small random checkpoints in DeepSeek's official on-disk format (config.json in the released
// spelling + sharded safetensors with DeepSeek's tensor names), for tests, benchmarks and the
// bundled main job. Used by `deepinfer make-tiny`.
//
// The built-in geometries keep every layer role of the real models and the divisibility the
// quantised formats need (MODEL_SPEC C2.6): hidden size, expert widths and every quantised K are
// multiples of 128 (V4 FP8 block) and 32 (FP4 / V4.1 blocks); head_dim 128 = 64 NoPE + 64 RoPE
// dims; index_head_dim 128.
//  V4  (5 layers): SWA, SWA, CSA, HCA, CSA; layers 0-2 hash-routed; 3 DSpark stages (0731 format)
//                  or one MTP stage (preview format).
//  V4.1 (12 layers): SWA, SWA (+Engram), Full(2), Reuse(2), Full(2, +Engram), Reuse(2),
//                  Full(1, candidate source), Reuse(1) x2, Reindex(1), Reuse(1) x2; 3 DSpark stages.
// Weights are normal(0, 1/sqrt(fan_in)) so logits are far from flat; a given seed always writes
// the same bytes.
#pragma once

#include <cstdint>
#include <filesystem>

#include "io/model_config.h"

namespace deepinfer::io {

struct TinyModelOptions {
  ModelArch arch = ModelArch::kDeepseekV4;
  std::int64_t vocab_size = 4096;  // make-tiny sizes it to the tokenizer when one is given
  bool fp8 = false;                // FP8 block weights + FP4 experts exactly as released; else BF16
  DraftKind draft = DraftKind::kDSpark;  // V4 may also use kMtp or kNone; V4.1 kDSpark or kNone
};

// The built-in tiny configuration.
ModelConfig tiny_model_config(const TinyModelOptions& options);

struct TinyCheckpointStats {
  std::int64_t tensors = 0;  // stored tensors, scales included
  std::int64_t bytes = 0;    // tensor bytes written
  int shards = 0;
};

// Writes config.json, model-0000k-of-0000n.safetensors and model.safetensors.index.json for
// `config` (any valid ModelConfig, e.g. one read with --config) into `directory` (created if
// needed), with random weights drawn from `seed`.
TinyCheckpointStats write_random_checkpoint(const ModelConfig& config, const std::filesystem::path& directory,
                                            std::uint64_t seed);

// The model vocabulary for a tokenizer of `tokens` tokens: rounded up to a multiple of 1280, the
// padding DeepSeek applies (128,815 tokens -> 129,280).
std::int64_t padded_vocab_size(std::int64_t tokens);

}  // namespace deepinfer::io
