// RoPE frequencies of V4 (MODEL_SPEC A3.5): θ^(-2i/r) for the r rope dims, blended towards θ/f by
// YaRN's linear ramp on compressed layers. No attention-scale (mscale) correction anywhere.
#pragma once

#include <optional>
#include <vector>

#include "io/model_config.h"
#include "ops/op_types.h"

namespace deepinfer::ops {
class Backend;
}

namespace deepinfer::model::v4 {

// inv_freq[i], i < rope_dim / 2, computed in f32 like the reference's precompute_freqs_cis.
std::vector<float> rope_inv_freq(int rope_dim, double theta, const std::optional<io::YarnConfig>& yarn);
// The table of one RoPE flavour on the backend: `theta`, with the config's YaRN when `yarn`.
ops::RopeTable make_rope_table(ops::Backend& backend, const io::ModelConfig& config, double theta, bool yarn);

}  // namespace deepinfer::model::v4
