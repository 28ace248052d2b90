// A V4 model opened from a checkpoint directory in one call: the mapped checkpoint, the weight
// source over it and the loaded model, kept together so the views stay valid. Used by the CLI
// commands that run the model (eval-logits, perplexity) and by model runners.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "io/checkpoint.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::model::v4 {

struct LoadedModel {
  std::unique_ptr<io::Checkpoint> checkpoint;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Model> model;
};

// Opens `directory` (config.json + safetensors) and loads the backbone. mode: as given, or the
// checkpoint's default (reference-qat when it is quantised, else exact).
LoadedModel open_model(const std::filesystem::path& directory, std::optional<NumericMode> mode,
                       ops::Backend& backend);

}  // namespace deepinfer::model::v4
