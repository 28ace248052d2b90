// CPU MoE: routing (score function, bias-corrected or hash selection, normalised weights) and the
// routed experts (SwiGLU with clamps, routing weight applied before the down projection).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/rows.h"

namespace deepinfer::ops::cpu {
namespace {

float score_of(float logit, ScoreFunc f) {
  switch (f) {
    case ScoreFunc::kSqrtSoftplus: {
      const float sp = logit > 20.0f ? logit : std::log1p(std::exp(logit));  // torch softplus, threshold 20
      return std::sqrt(sp);
    }
    case ScoreFunc::kSigmoid:
      return 1.0f / (1.0f + std::exp(-logit));
    case ScoreFunc::kSoftmax:
      break;
  }
  return logit;  // softmax is applied over the whole row by the caller
}

void row_scores(const float* logits, std::int64_t e, ScoreFunc f, float* scores) {
  if (f != ScoreFunc::kSoftmax) {
    for (std::int64_t i = 0; i < e; ++i) scores[i] = score_of(logits[i], f);
    return;
  }
  const float mx = *std::max_element(logits, logits + e);
  float sum = 0.0f;
  for (std::int64_t i = 0; i < e; ++i) {
    scores[i] = std::exp(logits[i] - mx);
    sum += scores[i];
  }
  for (std::int64_t i = 0; i < e; ++i) scores[i] /= sum;
}

}  // namespace

void CpuBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                           const RouteOptions& options, Tensor& expert_ids, Tensor& weights) {
  DI_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2 && logits.is_contiguous(),
           "moe_route: logits {} must be contiguous f32 [T, E]", logits.shape());
  const std::int64_t t_count = logits.dim(0);
  const std::int64_t e = logits.dim(1);
  const int k = options.top_k;
  DI_CHECK(k > 0 && k <= e, "moe_route: top_k {} for {} experts", k, e);
  DI_CHECK(expert_ids.dtype() == DType::kI32 && expert_ids.numel() == t_count * k && weights.dtype() == DType::kF32 &&
               weights.numel() == t_count * k,
           "moe_route: outputs {} / {} for [{}, {}]", expert_ids.shape(), weights.shape(), t_count, k);
  DI_CHECK(bias == nullptr || (bias->dtype() == DType::kF32 && bias->numel() == e), "moe_route: bias must be f32 [{}]",
           e);
  const std::int32_t* table = nullptr;
  const std::int32_t* ids = nullptr;
  if (tid2eid != nullptr) {
    DI_CHECK(tid2eid->dtype() == DType::kI32 && tid2eid->ndim() == 2 && tid2eid->dim(1) == k,
             "moe_route: tid2eid {} must be i32 [V, {}]", tid2eid->shape(), k);
    DI_CHECK(token_ids != nullptr && token_ids->dtype() == DType::kI32 && token_ids->numel() == t_count,
             "moe_route: hash routing needs {} i32 token ids", t_count);
    table = tid2eid->data<std::int32_t>();
    ids = token_ids->data<std::int32_t>();
    for (std::int64_t t = 0; t < t_count; ++t) {
      DI_CHECK(ids[t] >= 0 && ids[t] < tid2eid->dim(0), "moe_route: token id {} outside tid2eid", ids[t]);
      for (int j = 0; j < k; ++j) {
        const std::int32_t x = table[static_cast<std::int64_t>(ids[t]) * k + j];
        DI_CHECK(x >= 0 && x < e, "moe_route: tid2eid[{}] names expert {} of {}", ids[t], x, e);
      }
    }
  }
  const float* lg = logits.data<float>();
  const float* b = bias != nullptr ? bias->data<float>() : nullptr;
  std::int32_t* out_ids = expert_ids.data<std::int32_t>();
  float* out_w = weights.data<float>();
#pragma omp parallel for schedule(static) if (worth_threads(t_count * e * 8))
  for (std::int64_t t = 0; t < t_count; ++t) {
    float* scores = scratch(0, e);
    row_scores(lg + t * e, e, options.score_func, scores);
    std::int32_t* sel = out_ids + t * k;
    if (table != nullptr) {
      std::copy_n(table + static_cast<std::int64_t>(ids[t]) * k, k, sel);
    } else {
      float* biased = scratch(1, e);
      for (std::int64_t i = 0; i < e; ++i) biased[i] = scores[i] + (b != nullptr ? b[i] : 0.0f);
      thread_local std::vector<std::int32_t> order;
      order.resize(static_cast<std::size_t>(e));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [biased](std::int32_t x, std::int32_t y) {
        return biased[x] > biased[y] || (biased[x] == biased[y] && x < y);
      });
      std::copy_n(order.begin(), k, sel);
    }
    float* w = out_w + t * k;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      w[j] = scores[sel[j]];
      sum += w[j];
    }
    for (int j = 0; j < k; ++j) {
      if (options.normalize) w[j] /= sum + options.normalize_eps;
      w[j] *= options.route_scale;
    }
  }
}

void CpuBackend::moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                             std::span<const ExpertWeights> experts, const MoeOptions& options, Tensor& out) {
  const Rows rx = as_rows(x);
  const std::int64_t t_count = rx.rows;
  const std::int64_t dim = rx.width;
  DI_CHECK(expert_ids.dtype() == DType::kI32 && expert_ids.ndim() == 2 && expert_ids.dim(0) == t_count &&
               weights.dtype() == DType::kF32 && weights.numel() == expert_ids.numel(),
           "moe_experts: ids {} / weights {} for {} tokens", expert_ids.shape(), weights.shape(), t_count);
  DI_CHECK(out.dtype() == DType::kF32 && out.numel() == t_count * dim && out.is_contiguous(),
           "moe_experts: out {} must be contiguous f32 [{}, {}]", out.shape(), t_count, dim);
  const std::int64_t k = expert_ids.dim(1);
  const std::int32_t* ids = expert_ids.data<std::int32_t>();
  const float* wts = weights.data<float>();
  float* o = out.data<float>();
  std::fill(o, o + t_count * dim, 0.0f);

  // (token, slot) pairs per expert, experts in ascending order so every token accumulates its
  // experts in the same order whatever the batch.
  std::vector<std::vector<std::int64_t>> assigned(experts.size());
  for (std::int64_t i = 0; i < t_count * k; ++i) {
    DI_CHECK(ids[i] >= 0 && static_cast<std::size_t>(ids[i]) < experts.size(), "moe_experts: expert id {} of {}",
             ids[i], experts.size());
    assigned[static_cast<std::size_t>(ids[i])].push_back(i);
  }
  const DType mid = options.intermediate_dtype;
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const auto& pairs = assigned[e];
    if (pairs.empty()) continue;
    const ExpertWeights& ew = experts[e];
    validate_weight(ew.w1);
    validate_weight(ew.w3);
    validate_weight(ew.w2);
    const auto c = static_cast<std::int64_t>(pairs.size());
    const std::int64_t inter = ew.w1.out_features();
    float* xin = scratch(4, static_cast<std::size_t>(c * dim));
    float* gate = scratch(5, static_cast<std::size_t>(c * inter));
    float* up = scratch(6, static_cast<std::size_t>(c * inter));
    float* yout = scratch(7, static_cast<std::size_t>(c * dim));
    for (std::int64_t i = 0; i < c; ++i) {
      const float* src = load_row(rx, pairs[static_cast<std::size_t>(i)] / k, xin + i * dim);
      if (src != xin + i * dim) std::copy(src, src + dim, xin + i * dim);
    }
    const Rows xr{reinterpret_cast<std::uint8_t*>(xin), c, dim, dim, DType::kF32};
    const Rows gr{reinterpret_cast<std::uint8_t*>(gate), c, inter, inter, DType::kF32};
    const Rows ur{reinterpret_cast<std::uint8_t*>(up), c, inter, inter, DType::kF32};
    linear_rows(xr, ew.w1, options.act_quant_block, gr);
    linear_rows(xr, ew.w3, options.act_quant_block, ur);
    const float limit = options.swiglu_limit;
    for (std::int64_t i = 0; i < c; ++i) {
      const float rw = wts[pairs[static_cast<std::size_t>(i)]];
      for (std::int64_t j = 0; j < inter; ++j) {
        float g = round_to(mid, gate[i * inter + j]);
        float u = round_to(mid, up[i * inter + j]);
        if (limit > 0.0f) {
          u = std::clamp(u, -limit, limit);
          g = std::min(g, limit);
        }
        gate[i * inter + j] = round_to(mid, rw * (g / (1.0f + std::exp(-g)) * u));
      }
    }
    const Rows yr{reinterpret_cast<std::uint8_t*>(yout), c, dim, dim, DType::kF32};
    linear_rows(gr, ew.w2, options.act_quant_block, yr);
    for (std::int64_t i = 0; i < c; ++i) {
      float* dst = o + (pairs[static_cast<std::size_t>(i)] / k) * dim;
      for (std::int64_t j = 0; j < dim; ++j) dst[j] += round_to(mid, yout[i * dim + j]);
    }
  }
}

}  // namespace deepinfer::ops::cpu
