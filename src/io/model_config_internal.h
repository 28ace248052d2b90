// Internal to io: the parts of config parsing split out of model_config.cpp.
#pragma once

#include <vector>

#include "io/config_fields.h"
#include "io/model_config.h"

namespace deepinfer::io::detail {

// Engram (V4.1) fields from the text config; vision_config / vision_* from either level.
void parse_engram_and_vision(ModelConfig& config, const ConfigFields& top, const ConfigFields& text);
// MTP / DSpark: kind, stage count (P27) and fields. `stage_ratios` are compress_ratios entries
// past the backbone (one per stage when present).
void parse_draft(ModelConfig& config, const ConfigFields& text, const std::vector<int>& stage_ratios);
// Validates the layer-role inputs and fills config.layers and config.draft.stages.
void derive_schedule(ModelConfig& config, const ConfigFields& text);

}  // namespace deepinfer::io::detail
