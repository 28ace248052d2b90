// RoPE frequency tables with the reference's YaRN correction range and ramp.
#include "model/deepseek_v4/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/backend.h"

namespace deepinfer::model::v4 {

std::vector<float> rope_inv_freq(int rope_dim, double theta, const std::optional<io::YarnConfig>& yarn) {
  const int half = rope_dim / 2;
  std::vector<float> freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    freq[static_cast<std::size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  if (!yarn || yarn->original_max_position_embeddings <= 0) return freq;
  // The dimension index at which `rotations` full turns fit into the original context.
  auto correction_dim = [&](double rotations) {
    return rope_dim * std::log(static_cast<double>(yarn->original_max_position_embeddings) /
                               (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(theta));
  };
  const double low = std::max(std::floor(correction_dim(yarn->beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(yarn->beta_slow)), static_cast<double>(rope_dim - 1));
  if (low == high) high += 0.001;
  const auto factor = static_cast<float>(yarn->factor);
  for (int i = 0; i < half; ++i) {
    const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    float& f = freq[static_cast<std::size_t>(i)];
    f = f / factor * (1.0f - smooth) + f * smooth;
  }
  return freq;
}

ops::RopeTable make_rope_table(ops::Backend& backend, const io::ModelConfig& config, double theta, bool yarn) {
  const auto freq = rope_inv_freq(config.rope_head_dim, theta, yarn ? config.rope.yarn : std::nullopt);
  const Tensor host = Tensor::from_f32(Shape{static_cast<std::int64_t>(freq.size())}, freq);
  return {backend.upload(host), config.rope_head_dim};
}

}  // namespace deepinfer::model::v4
