// CPU sparse attention with sinks (the reference kernel's online softmax over index blocks) and
// the lightning indexer's scores and visibility-masked top-k, and V4.1's candidate-block mask.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/rows.h"

namespace deepinfer::ops::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The concatenation of several RowViews, addressed by a virtual row number.
class ConcatRows {
 public:
  explicit ConcatRows(std::span<const RowView> views) {
    std::int64_t offset = 0;
    for (const auto& v : views) {
      sources_.push_back(as_source(v));
      starts_.push_back(offset);
      offset += v.num_rows;
    }
    total_ = offset;
  }
  std::int64_t total() const { return total_; }
  std::int64_t width() const { return sources_.empty() ? 0 : sources_.front().rows.width; }
  const std::vector<RowSource>& sources() const { return sources_; }

  // Row r as f32 (converted into buf when stored as bf16).
  const float* row(std::int64_t r, float* buf) const {
    std::size_t s = sources_.size() - 1;
    while (starts_[s] > r) --s;
    const RowSource& src = sources_[s];
    const std::int64_t local = r - starts_[s];
    const std::uint8_t* p = src.row_ptr(local);
    if (src.rows.is_f32()) return reinterpret_cast<const float*>(p);
    const auto* h = reinterpret_cast<const std::uint16_t*>(p);
    for (std::int64_t i = 0; i < src.rows.width; ++i) buf[i] = bf16_to_f32(h[i]);
    return buf;
  }

 private:
  std::vector<RowSource> sources_;
  std::vector<std::int64_t> starts_;
  std::int64_t total_ = 0;
};

// Heads [0, nh) of one token: q holds their query rows, acc their outputs (nh × d). Each block of
// KV rows is gathered (and converted) once and used by every head; per head the arithmetic is the
// reference kernel's online softmax, independent of how heads are grouped.
struct HeadGroup {
  const float* q;
  const float* sinks;
  std::int64_t heads;
  float* acc;
  float* running_max;
  float* denom;
};

void attend_heads(const HeadGroup& g, const ConcatRows& kv, const std::int32_t* idx, std::int64_t k_count,
                  const AttentionOptions& options, float* row_buf) {
  const std::int64_t d = kv.width();
  std::fill(g.acc, g.acc + g.heads * d, 0.0f);
  std::fill(g.running_max, g.running_max + g.heads, kNegInf);
  std::fill(g.denom, g.denom + g.heads, 0.0f);
  float scores[256];
  const float* rows[256];
  const int block = std::clamp(options.block, 1, 256);
  for (std::int64_t b0 = 0; b0 < k_count; b0 += block) {
    const std::int64_t len = std::min<std::int64_t>(block, k_count - b0);
    for (std::int64_t j = 0; j < len; ++j) {
      const std::int32_t r = idx[b0 + j];
      rows[j] = r < 0 ? nullptr : kv.row(r, row_buf + j * d);
    }
    for (std::int64_t h = 0; h < g.heads; ++h) {
      float block_max = kNegInf;
      for (std::int64_t j = 0; j < len; ++j) {
        scores[j] = rows[j] == nullptr ? kNegInf : dot_f32(g.q + h * d, rows[j], d) * options.scale;
        block_max = std::max(block_max, scores[j]);
      }
      const float new_max = std::max(g.running_max[h], block_max);
      if (new_max == kNegInf) continue;  // nothing visible yet
      const float rescale = std::exp(g.running_max[h] - new_max);
      float* acc = g.acc + h * d;
      for (std::int64_t i = 0; i < d; ++i) acc[i] *= rescale;
      float block_sum = 0.0f;
      for (std::int64_t j = 0; j < len; ++j) {
        if (rows[j] == nullptr) continue;
        const float p = std::exp(scores[j] - new_max);
        block_sum += p;
        kernels().axpy(options.round_probs_bf16 ? round_to_bf16(p) : p, rows[j], acc, d);
      }
      g.denom[h] = g.denom[h] * rescale + block_sum;
      g.running_max[h] = new_max;
    }
  }
  for (std::int64_t h = 0; h < g.heads; ++h) {
    if (g.running_max[h] == kNegInf) continue;  // no key at all: zero output
    const float denom = g.denom[h] + std::exp(g.sinks[h] - g.running_max[h]);
    float* acc = g.acc + h * d;
    for (std::int64_t i = 0; i < d; ++i) acc[i] /= denom;
  }
}

}  // namespace

void CpuBackend::sparse_attention(const Tensor& q, std::span<const RowView> sources, const Tensor& indices,
                                  const Tensor& sinks, const AttentionOptions& options, Tensor& out) {
  DI_CHECK(q.ndim() == 3 && out.shape() == q.shape(), "sparse_attention: q {} and out {} must be [T, H, d]",
           q.shape(), out.shape());
  DI_CHECK(!sources.empty(), "sparse_attention: no KV sources");
  const ConcatRows kv(sources);
  const std::int64_t t_count = q.dim(0);
  const std::int64_t heads = q.dim(1);
  const std::int64_t d = q.dim(2);
  DI_CHECK(kv.width() == d, "sparse_attention: KV rows of {} for head_dim {}", kv.width(), d);
  for (const auto& s : kv.sources())
    DI_CHECK(s.rows.width == d, "sparse_attention: KV sources must share the row width {}", d);
  DI_CHECK(indices.dtype() == DType::kI32 && indices.ndim() == 2 && indices.dim(0) == t_count &&
               indices.stride(1) == 1,
           "sparse_attention: indices {} must be i32 [T={}, K]", indices.shape(), t_count);
  DI_CHECK(sinks.dtype() == DType::kF32 && sinks.numel() == heads, "sparse_attention: sinks {} for {} heads",
           sinks.shape(), heads);
  DI_CHECK(options.block > 0 && options.block <= 256, "sparse_attention: block {} must be in [1, 256]",
           options.block);
  const std::int64_t k_count = indices.dim(1);
  const std::int64_t idx_stride = indices.stride(0);
  const std::int32_t* idx = indices.data<std::int32_t>();
  for (std::int64_t t = 0; t < t_count; ++t)
    for (std::int64_t j = 0; j < k_count; ++j) {
      const std::int32_t r = idx[t * idx_stride + j];
      DI_CHECK(r >= -1 && r < kv.total(), "sparse_attention: index {} outside the {} KV rows", r, kv.total());
    }
  const Rows rq = as_rows(q, d);
  const Rows ro = as_rows(out, d);
  const float* sink = sinks.data<float>();
  // Few tokens (decode): split the heads too, so every thread has work.
  const std::int64_t threads = omp_get_max_threads();
  const std::int64_t groups = t_count >= threads ? 1 : std::min(heads, (threads + t_count - 1) / t_count);
  const std::int64_t per_group = (heads + groups - 1) / groups;
#pragma omp parallel for schedule(dynamic, 1) collapse(2) if (worth_threads(t_count * heads * k_count * d))
  for (std::int64_t t = 0; t < t_count; ++t) {
    for (std::int64_t grp = 0; grp < groups; ++grp) {
      const std::int64_t h0 = grp * per_group;
      const std::int64_t nh = std::min(per_group, heads - h0);
      if (nh <= 0) continue;
      float* qbuf = scratch(0, static_cast<std::size_t>(nh * d));
      for (std::int64_t h = 0; h < nh; ++h) load_row_into(rq, t * heads + h0 + h, qbuf + h * d);
      float* acc = scratch(1, static_cast<std::size_t>(nh * (d + 2)));
      float* row_buf = scratch(2, static_cast<std::size_t>(options.block * d));
      const HeadGroup g{qbuf, sink + h0, nh, acc, acc + nh * d, acc + nh * d + nh};
      attend_heads(g, kv, idx + t * idx_stride, k_count, options, row_buf);
      for (std::int64_t h = 0; h < nh; ++h) store_row(ro, t * heads + h0 + h, acc + h * d);
    }
  }
}

void CpuBackend::indexer_scores(const Tensor& q, const RowView& keys, const Tensor& row_base, const Tensor& num_keys,
                                const Tensor& weights, Tensor& out) {
  DI_CHECK(q.ndim() == 3, "indexer_scores: q {} must be [T, H, d]", q.shape());
  const std::int64_t t_count = q.dim(0);
  const std::int64_t heads = q.dim(1);
  const std::int64_t d = q.dim(2);
  const RowSource k = as_source(keys);
  DI_CHECK(k.rows.width == d, "indexer_scores: keys of width {} for q {}", k.rows.width, q.shape());
  DI_CHECK(weights.dtype() == DType::kF32 && weights.numel() == t_count * heads && weights.is_contiguous(),
           "indexer_scores: weights {} for q {}", weights.shape(), q.shape());
  DI_CHECK(out.dtype() == DType::kF32 && out.ndim() == 2 && out.dim(0) == t_count && out.stride(1) == 1,
           "indexer_scores: out {} must be f32 [{}, n]", out.shape(), t_count);
  for (const Tensor* t : {&row_base, &num_keys})
    DI_CHECK(t->dtype() == DType::kI32 && t->numel() == t_count && t->is_contiguous(),
             "indexer_scores: row_base / num_keys {} must be i32 [{}]", t->shape(), t_count);
  const std::int64_t width = out.dim(1);
  const std::int32_t* base = row_base.data<std::int32_t>();
  const std::int32_t* count = num_keys.data<std::int32_t>();
  std::int64_t work = 0;
  for (std::int64_t t = 0; t < t_count; ++t) {
    DI_CHECK(count[t] >= 0 && count[t] <= width && (count[t] == 0 || (base[t] >= 0 && base[t] + count[t] <= k.num_rows)),
             "indexer_scores: token {} reads {} keys from row {} ({} rows, out width {})", t, count[t], base[t],
             k.num_rows, width);
    work += count[t];
  }
  const Rows rq = as_rows(q, d);
  const float* w = weights.data<float>();
  float* o = out.data<float>();
  const std::int64_t o_stride = out.stride(0);
#pragma omp parallel for schedule(static) if (worth_threads(work * heads * d))
  for (std::int64_t t = 0; t < t_count; ++t) {
    float* qbuf = scratch(0, static_cast<std::size_t>(heads * d));
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* qv = load_row(rq, t * heads + h, qbuf + h * d);
      if (qv != qbuf + h * d) std::copy(qv, qv + d, qbuf + h * d);
    }
    float* kbuf = scratch(1, d);
    for (std::int64_t s = 0; s < count[t]; ++s) {
      const std::uint8_t* p = k.row_ptr(base[t] + s);
      const float* kv = reinterpret_cast<const float*>(p);
      if (!k.rows.is_f32()) {
        const auto* bits = reinterpret_cast<const std::uint16_t*>(p);
        for (std::int64_t i = 0; i < d; ++i) kbuf[i] = bf16_to_f32(bits[i]);
        kv = kbuf;
      }
      float score = 0.0f;
      for (std::int64_t h = 0; h < heads; ++h)
        score += w[t * heads + h] * std::max(dot_f32(qbuf + h * d, kv, d), 0.0f);
      o[t * o_stride + s] = score;
    }
    std::fill(o + t * o_stride + count[t], o + t * o_stride + width, kNegInf);
  }
}

void CpuBackend::topk_visible(const Tensor& scores, const Tensor& positions, int ratio, int k, const Tensor& offsets,
                              Tensor& out) {
  DI_CHECK(scores.dtype() == DType::kF32 && scores.ndim() == 2 && scores.stride(1) == 1,
           "topk_visible: scores {} must be f32 [T, n]", scores.shape());
  const std::int64_t t_count = scores.dim(0);
  const std::int64_t n = scores.dim(1);
  DI_CHECK(positions.dtype() == DType::kI32 && positions.numel() == t_count, "topk_visible: {} positions for {} rows",
           positions.numel(), t_count);
  DI_CHECK(offsets.dtype() == DType::kI32 && offsets.numel() == t_count && offsets.is_contiguous(),
           "topk_visible: offsets {} must be i32 [{}]", offsets.shape(), t_count);
  DI_CHECK(out.dtype() == DType::kI32 && out.ndim() == 2 && out.dim(0) == t_count && out.dim(1) == k &&
               out.stride(1) == 1,
           "topk_visible: out {} must be i32 [{}, {}]", out.shape(), t_count, k);
  DI_CHECK(ratio > 0 && k >= 0, "topk_visible: ratio {} / k {}", ratio, k);
  const float* sc = scores.data<float>();
  const std::int32_t* pos = positions.data<std::int32_t>();
  const std::int32_t* off = offsets.data<std::int32_t>();
  std::int32_t* o = out.data<std::int32_t>();
#pragma omp parallel for schedule(static) if (worth_threads(t_count * n * 8))
  for (std::int64_t t = 0; t < t_count; ++t) {
    const std::int64_t visible =
        std::clamp<std::int64_t>((static_cast<std::int64_t>(pos[t]) + 1) / ratio, 0, n);
    const float* row = sc + t * scores.stride(0);
    thread_local std::vector<std::int32_t> order;
    order.clear();
    for (std::int32_t s = 0; s < visible; ++s)
      if (row[s] != -std::numeric_limits<float>::infinity()) order.push_back(s);  // masked out (V4.1 candidates)
    const std::int64_t take = std::min<std::int64_t>(k, static_cast<std::int64_t>(order.size()));
    auto better = [row](std::int32_t a, std::int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
    std::partial_sort(order.begin(), order.begin() + take, order.end(), better);
    std::int32_t* dst = o + t * out.stride(0);
    for (std::int64_t j = 0; j < k; ++j) dst[j] = j < take ? order[static_cast<std::size_t>(j)] + off[t] : -1;
  }
}

void CpuBackend::candidate_mask(const Tensor& scores, const Tensor& positions, int ratio, int block, int top_blocks,
                                Tensor& out) {
  DI_CHECK(scores.dtype() == DType::kF32 && scores.ndim() == 2 && scores.is_contiguous() && out.shape() == scores.shape() &&
               out.dtype() == DType::kF32 && out.is_contiguous(),
           "candidate_mask: scores {} / out {} must be equal contiguous f32 [T, n]", scores.shape(), out.shape());
  const std::int64_t rows = scores.dim(0), n = scores.dim(1);
  DI_CHECK(positions.dtype() == DType::kI32 && positions.numel() == rows, "candidate_mask: {} positions for {} rows",
           positions.numel(), rows);
  DI_CHECK(ratio > 0 && block > 0 && top_blocks > 0, "candidate_mask: ratio {} / block {} / top_blocks {}", ratio, block,
           top_blocks);
  const std::int64_t blocks = (n + block - 1) / block;
  const std::int64_t take = std::min<std::int64_t>(top_blocks, blocks);
  const std::int32_t* pos = positions.data<std::int32_t>();
  constexpr float kInf = std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) if (worth_threads(rows * n))
  for (std::int64_t t = 0; t < rows; ++t) {
    const float* row = scores.data<float>() + t * n;
    float* dst = out.data<float>() + t * n;
    const std::int64_t visible = std::clamp<std::int64_t>((static_cast<std::int64_t>(pos[t]) + 1) / ratio, 0, n);
    thread_local std::vector<float> best;
    thread_local std::vector<std::int64_t> order;
    best.assign(static_cast<std::size_t>(blocks), -kInf);
    for (std::int64_t s = 0; s < visible; ++s)
      best[static_cast<std::size_t>(s / block)] = std::max(best[static_cast<std::size_t>(s / block)], row[s]);
    if (visible > 0) best[static_cast<std::size_t>((visible - 1) / block)] = kInf;  // partly filled: always kept
    order.resize(static_cast<std::size_t>(blocks));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + take, order.end(), [&](std::int64_t a, std::int64_t b) {
      const float x = best[static_cast<std::size_t>(a)], y = best[static_cast<std::size_t>(b)];
      return x > y || (x == y && a < b);
    });
    std::fill(dst, dst + n, -kInf);
    for (std::int64_t i = 0; i < take; ++i) {
      const std::int64_t b = order[static_cast<std::size_t>(i)];
      if (best[static_cast<std::size_t>(b)] == -kInf) continue;
      std::fill(dst + b * block, dst + std::min(n, (b + 1) * block), 0.0f);
    }
  }
}

}  // namespace deepinfer::ops::cpu
