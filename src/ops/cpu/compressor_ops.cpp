// CPU KV compressor (MODEL_SPEC A4.4 / A5) over a batch: each group's last token pools the group
// channel-wise (softmax; CSA also pools the previous group), then each sequence's ring keeps its last rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/rows.h"

namespace deepinfer::ops::cpu {
namespace {

// Pools one completed group (d floats into out) from per-slot row pointers; the arithmetic and its
// order are the reference's: max, sum of exponentials, weighted sum in slot order.
void pool_group(const float* const* kv, const float* const* score, int slots, int ratio, bool overlap, std::int64_t d,
                float* out) {
  for (std::int64_t c = 0; c < d; ++c) {
    auto col = [&](int i) { return overlap && i >= ratio ? d + c : c; };
    float max_score = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < slots; ++i) max_score = std::max(max_score, score[i][col(i)]);
    float sum = 0.0f;
    float weights[2 * 128];
    for (int i = 0; i < slots; ++i) {
      weights[i] = std::exp(score[i][col(i)] - max_score);
      sum += weights[i];
    }
    float value = 0.0f;
    for (int i = 0; i < slots; ++i) value += kv[i][col(i)] * (weights[i] / sum);
    out[c] = value;
  }
}

// Row of this call holding position q of the same sequence as row t (position p), or -1.
std::int64_t input_row(const std::int32_t* pos, const std::int32_t* slots, std::int64_t t, std::int64_t q) {
  const std::int64_t back = pos[t] - q;
  if (back < 0 || back > t) return -1;
  const std::int64_t r = t - back;
  return slots[r] == slots[t] && pos[r] == q ? r : -1;
}

}  // namespace

void CpuBackend::compressor_update(const Tensor& kv, const Tensor& score, const Tensor& ape, const Tensor& positions,
                                   const Tensor& slots, CompressorState& state, Tensor& out) {
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
  const std::int64_t ring = coff * ratio;
  DI_CHECK(ape.ndim() == 2 && ape.dim(0) == ratio && ape.dim(1) == width && ape.is_contiguous(),
           "compressor_update: ape {} must be [{}, {}]", ape.shape(), ratio, width);
  DI_CHECK(state.kv.dtype() == DType::kF32 && state.score.dtype() == DType::kF32 && state.kv.ndim() == 2 &&
               state.kv.dim(1) == width && state.kv.dim(0) % ring == 0 && state.score.shape() == state.kv.shape() &&
               state.kv.is_contiguous() && state.score.is_contiguous(),
           "compressor_update: state {} must be f32 [slots · {}, {}]", state.kv.shape(), ring, width);
  for (const Tensor* t : {&positions, &slots})
    DI_CHECK(t->dtype() == DType::kI32 && t->numel() == t_count && t->is_contiguous(),
             "compressor_update: positions / slots {} must be i32 [{}]", t->shape(), t_count);
  DI_CHECK(out.dtype() == DType::kF32 && out.shape() == Shape({t_count, d}) && out.is_contiguous(),
           "compressor_update: out {} must be f32 [{}, {}]", out.shape(), t_count, d);
  const std::int32_t* pos = positions.data<std::int32_t>();
  const std::int32_t* slot = slots.data<std::int32_t>();
  const std::int64_t num_slots = state.num_slots();
  for (std::int64_t t = 0; t < t_count; ++t)
    DI_CHECK(slot[t] >= -1 && slot[t] < num_slots && (slot[t] < 0 || pos[t] >= 0),
             "compressor_update: row {} has slot {} (pool of {}) at position {}", t, slot[t], num_slots, pos[t]);

  float* skv = state.kv.data<float>();
  float* ssc = state.score.data<float>();
  const float* ape_v = ape.data<float>();
  const float* in_kv = kv.data<float>();
  const float* in_sc = score.data<float>();
  // Biased scores of this call's rows (the values the ring would hold).
  std::vector<float> biased(static_cast<std::size_t>(t_count * width));
  for (std::int64_t t = 0; t < t_count; ++t) {
    if (slot[t] < 0) continue;
    const std::int64_t r = pos[t] % ratio;
    for (std::int64_t i = 0; i < width; ++i)
      biased[static_cast<std::size_t>(t * width + i)] = in_sc[t * width + i] + ape_v[r * width + i];
  }
  auto ring_row = [&](std::int64_t s, std::int64_t q) { return s * ring + ((q % ring) + ring) % ring; };
#pragma omp parallel for schedule(static) if (worth_threads(t_count * d * ring))
  for (std::int64_t t = 0; t < t_count; ++t) {
    float* dst = out.data<float>() + t * d;
    const std::int64_t p = pos[t];
    if (slot[t] < 0 || (p + 1) % ratio != 0) {
      std::fill(dst, dst + d, 0.0f);
      continue;
    }
    const float* rows_kv[2 * 128];
    const float* rows_sc[2 * 128];
    const std::int64_t base = p + 1 - ring;
    for (std::int64_t i = 0; i < ring; ++i) {
      const std::int64_t r = input_row(pos, slot, t, base + i);
      rows_kv[i] = r >= 0 ? in_kv + r * width : skv + ring_row(slot[t], base + i) * width;
      rows_sc[i] = r >= 0 ? biased.data() + r * width : ssc + ring_row(slot[t], base + i) * width;
    }
    pool_group(rows_kv, rows_sc, static_cast<int>(ring), ratio, overlap, d, dst);
  }
  // The ring keeps each sequence's last coff·ratio rows (written after every group has pooled).
  const auto row_bytes = static_cast<std::size_t>(width) * 4;
  for (std::int64_t t = 0; t < t_count; ++t) {
    if (slot[t] < 0) continue;
    const std::int64_t dst = ring_row(slot[t], pos[t]);
    std::memcpy(skv + dst * width, in_kv + t * width, row_bytes);
    std::memcpy(ssc + dst * width, biased.data() + t * width, row_bytes);
  }
}

}  // namespace deepinfer::ops::cpu
