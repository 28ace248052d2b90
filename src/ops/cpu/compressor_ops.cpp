// CPU KV compressor (MODEL_SPEC A4.4 / A5): per-token writes into the group buffers and, at each
// group's last token, the channel-wise softmax pooling (with the CSA overlap of the previous group).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/rows.h"

namespace deepinfer::ops::cpu {
namespace {

// Pools one completed group from the state rows into out (d floats).
void pool_group(const float* kv, const float* score, int ratio, bool overlap, std::int64_t d, float* out) {
  const std::int64_t width = overlap ? 2 * d : d;
  const int slots = overlap ? 2 * ratio : ratio;
  for (std::int64_t c = 0; c < d; ++c) {
    // Slot i: overlap → previous group's first half (rows 0..R-1, column c) then the current
    // group's second half (rows R..2R-1, column d + c); otherwise rows 0..R-1, column c.
    auto at = [&](const float* base, int i) {
      if (!overlap) return base[i * width + c];
      return i < ratio ? base[i * width + c] : base[i * width + d + c];
    };
    float max_score = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < slots; ++i) max_score = std::max(max_score, at(score, i));
    float sum = 0.0f;
    float weights[2 * 128];
    for (int i = 0; i < slots; ++i) {
      weights[i] = std::exp(at(score, i) - max_score);
      sum += weights[i];
    }
    float value = 0.0f;
    for (int i = 0; i < slots; ++i) value += at(kv, i) * (weights[i] / sum);
    out[c] = value;
  }
}

}  // namespace

void CpuBackend::compressor_update(const Tensor& kv, const Tensor& score, const Tensor& ape, std::int64_t start_pos,
                                   CompressorState& state, Tensor& out) {
  const int ratio = state.ratio;
  const bool overlap = state.overlap;
  const std::int64_t coff = overlap ? 2 : 1;
  DI_CHECK(ratio > 0 && ratio <= 128, "compressor_update: ratio {} must be in [1, 128]", ratio);
  DI_CHECK(kv.dtype() == DType::kF32 && score.dtype() == DType::kF32 && ape.dtype() == DType::kF32 &&
               kv.ndim() == 2 && score.shape() == kv.shape() && kv.is_contiguous() && score.is_contiguous(),
           "compressor_update: kv {} / score {} must be equal f32 [T, coff·d]", kv.shape(), score.shape());
  const std::int64_t t_count = kv.dim(0);
  const std::int64_t width = kv.dim(1);
  const std::int64_t d = width / coff;
  DI_CHECK(ape.ndim() == 2 && ape.dim(0) == ratio && ape.dim(1) == width && ape.is_contiguous(),
           "compressor_update: ape {} must be [{}, {}]", ape.shape(), ratio, width);
  DI_CHECK(state.kv.dtype() == DType::kF32 && state.score.dtype() == DType::kF32 &&
               state.kv.shape() == Shape({coff * ratio, width}) && state.score.shape() == state.kv.shape(),
           "compressor_update: state {} must be f32 [{}, {}]", state.kv.shape(), coff * ratio, width);
  std::int64_t complete = 0;
  for (std::int64_t t = 0; t < t_count; ++t) complete += (start_pos + t + 1) % ratio == 0 ? 1 : 0;
  DI_CHECK(out.dtype() == DType::kF32 && out.ndim() == 2 && out.dim(0) == complete && out.dim(1) == d &&
               out.is_contiguous(),
           "compressor_update: out {} must be f32 [{}, {}]", out.shape(), complete, d);

  float* skv = state.kv.data<float>();
  float* ssc = state.score.data<float>();
  const float* ape_v = ape.data<float>();
  const std::int64_t current = overlap ? ratio : 0;
  const auto row_bytes = static_cast<std::size_t>(width) * 4;
  std::int64_t emitted = 0;
  for (std::int64_t t = 0; t < t_count; ++t) {
    const std::int64_t p = start_pos + t;
    const std::int64_t slot = p % ratio;
    float* kv_row = skv + (current + slot) * width;
    float* sc_row = ssc + (current + slot) * width;
    std::memcpy(kv_row, kv.data<float>() + t * width, row_bytes);
    const float* s_in = score.data<float>() + t * width;
    for (std::int64_t i = 0; i < width; ++i) sc_row[i] = s_in[i] + ape_v[slot * width + i];
    if ((p + 1) % ratio != 0) continue;
    pool_group(skv, ssc, ratio, overlap, d, out.data<float>() + emitted * d);
    ++emitted;
    if (overlap) {  // the finished group becomes the "previous group" of the next one
      std::memcpy(skv, skv + ratio * width, static_cast<std::size_t>(ratio) * row_bytes);
      std::memcpy(ssc, ssc + ratio * width, static_cast<std::size_t>(ratio) * row_bytes);
    }
  }
}

}  // namespace deepinfer::ops::cpu
