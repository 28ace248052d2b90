// RoPE frequencies of V4 (MODEL_SPEC A3.5): θ^(-2i/r) for the r rope dims, blended towards θ/f by
// YaRN's linear ramp on compressed layers. No attention-scale (mscale) correction anywhere.
#pragma once

#include <optional>
#include <vector>

#include "io/model_config.h"

namespace deepinfer::model::v4 {

// inv_freq[i], i < rope_dim / 2, computed in f32 like the reference's precompute_freqs_cis.
std::vector<float> rope_inv_freq(int rope_dim, double theta, const std::optional<io::YarnConfig>& yarn);

}  // namespace deepinfer::model::v4
