// A DeepSeek model opened from a checkpoint directory in one call: the mapped checkpoint, the
// weight source over it and the loaded model — V4 or V4.1, picked by the config's model type —
// kept together so the views stay valid. Used by the CLI commands that run the model
// (eval-logits, perplexity) and by the engine's model runner.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "io/checkpoint.h"
#include "model/deepseek_v4/model.h"
#include "model/sequence_model.h"

namespace deepinfer::model::v4 {

struct LoadedModel {
  std::unique_ptr<io::Checkpoint> checkpoint;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<SequenceModel> model;
};

// Opens `directory` (config.json + safetensors) and loads the backbone of its deepseek_v4 or
// deepseek_v41 model. mode: as given, or the checkpoint's default (reference-qat when it is
// quantised, else exact). V4.1: Engram hashes use the compressed token map of the directory's
// tokenizer.json (an identity map when there is none and the config states no compressed vocabulary
// size); vision-tower tensors are ignored (text only); bounded replay follows
// DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE / _KEEP_TOKENS.
LoadedModel open_model(const std::filesystem::path& directory, std::optional<NumericMode> mode,
                       ops::Backend& backend);

}  // namespace deepinfer::model::v4
