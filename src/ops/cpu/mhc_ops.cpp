// CPU mHC (manifold-constrained hyper-connections, MODEL_SPEC A4.2 / A4.7): mixing coefficients
// with Sinkhorn in the reference's order, the collapse of the streams, the post-mix and the head.
#include <algorithm>
#include <cmath>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/rows.h"

namespace deepinfer::ops::cpu {
namespace {

constexpr int kMaxHc = 16;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// mixes[m] = (fn[m] · flat) · rsqrt(mean(flat²) + eps) for m < n_mix.
void hc_mixes(const float* flat, std::int64_t width, const float* fn, int n_mix, float eps, float* mixes) {
  const float inv = 1.0f / std::sqrt(dot_f32(flat, flat, width) / static_cast<float>(width) + eps);
  for (int m = 0; m < n_mix; ++m) mixes[m] = dot_f32(fn + m * width, flat, width) * inv;
}

// comb (n × n, row-major) ← Sinkhorn of its logits: row softmax + eps, column normalisation,
// then (iters − 1) × (row, column) normalisation.
void sinkhorn(float* comb, int n, int iters, float eps) {
  for (int r = 0; r < n; ++r) {
    float* row = comb + r * n;
    const float mx = *std::max_element(row, row + n);
    float sum = 0.0f;
    for (int c = 0; c < n; ++c) {
      row[c] = std::exp(row[c] - mx);
      sum += row[c];
    }
    for (int c = 0; c < n; ++c) row[c] = row[c] / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int c = 0; c < n; ++c) {
      float sum = 0.0f;
      for (int r = 0; r < n; ++r) sum += comb[r * n + c];
      for (int r = 0; r < n; ++r) comb[r * n + c] /= sum + eps;
    }
  };
  normalise_columns();
  for (int it = 1; it < iters; ++it) {
    for (int r = 0; r < n; ++r) {
      float sum = 0.0f;
      for (int c = 0; c < n; ++c) sum += comb[r * n + c];
      for (int c = 0; c < n; ++c) comb[r * n + c] /= sum + eps;
    }
    normalise_columns();
  }
}

// y = Σ_i weights[i] · x_i over the n streams of one token (f32 accumulation in stream order).
void collapse(const float* flat, const float* weights, int n, std::int64_t d, float* y) {
  std::fill(y, y + d, 0.0f);
  for (int i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < d; ++c) y[c] += weights[i] * flat[i * d + c];
}

struct HcParams {
  const float* fn;
  const float* base;
  const float* scale;
};

// pre/post/comb of one token from its flattened stream (MODEL_SPEC A4.2 steps 1-6).
void site_coefficients(const float* flat, std::int64_t width, int n, const HcParams& p, const HcOptions& options,
                       float* pre, float* post, float* comb) {
  float mixes[(2 + kMaxHc) * kMaxHc];
  hc_mixes(flat, width, p.fn, (2 + n) * n, options.norm_eps, mixes);
  for (int i = 0; i < n; ++i) {
    pre[i] = sigmoid(mixes[i] * p.scale[0] + p.base[i]) + options.hc_eps;
    post[i] = 2.0f * sigmoid(mixes[n + i] * p.scale[1] + p.base[n + i]);
  }
  for (int i = 0; i < n * n; ++i) comb[i] = mixes[2 * n + i] * p.scale[2] + p.base[2 * n + i];
  sinkhorn(comb, n, options.sinkhorn_iters, options.hc_eps);
}

struct HcShape {
  std::int64_t tokens;
  int n;
  std::int64_t d;
};

HcShape check_stream(const Tensor& x, const char* op) {
  DI_CHECK(x.ndim() == 3 && x.dim(1) <= kMaxHc, "{}: stream {} must be [T, n_hc <= {}, D]", op, x.shape(), kMaxHc);
  return {x.dim(0), static_cast<int>(x.dim(1)), x.dim(2)};
}

const float* f32_param(const Tensor& t, std::int64_t numel, const char* what) {
  DI_CHECK(t.dtype() == DType::kF32 && t.numel() == numel && t.is_contiguous(), "{}: expected f32 with {} values, got {} {}",
           what, numel, dtype_name(t.dtype()), t.shape());
  return t.data<float>();
}

HcParams site_params(const HcWeights& w, int n, std::int64_t width, const char* op) {
  const int n_mix = (2 + n) * n;
  return {f32_param(w.fn, n_mix * width, op), f32_param(w.base, n_mix, op), f32_param(w.scale, 3, op)};
}

// hc_pre and hc_mix: every token's coefficients; pre_out (f32 [T, n]) receives the pre weights
// when given, y the collapse with them when given.
void site_rows(const Tensor& x, const HcWeights& w, const HcOptions& options, float* pre_out, Tensor& post,
               Tensor& comb, Tensor* y, const char* op) {
  const HcShape s = check_stream(x, op);
  const int n = s.n;
  const std::int64_t width = n * s.d;
  const HcParams params = site_params(w, n, width, op);
  DI_CHECK(post.dtype() == DType::kF32 && post.numel() == s.tokens * n && comb.dtype() == DType::kF32 &&
               comb.numel() == s.tokens * n * n,
           "{}: post {} / comb {} for {} tokens", op, post.shape(), comb.shape(), s.tokens);
  const Rows rx = as_rows(x, width);
  const Rows ry = y != nullptr ? as_rows(*y, s.d) : Rows{};
  DI_CHECK(y == nullptr || ry.rows == s.tokens, "{}: y for {} tokens has {} rows", op, s.tokens, ry.rows);
  float* post_v = post.data<float>();
  float* comb_v = comb.data<float>();
#pragma omp parallel for schedule(static) if (worth_threads(s.tokens * (2 + n) * n * width))
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    const float* flat = load_row(rx, t, scratch(0, width));
    float own[kMaxHc];
    float* pre = pre_out != nullptr ? pre_out + t * n : own;
    site_coefficients(flat, width, n, params, options, pre, post_v + t * n, comb_v + t * n * n);
    if (y == nullptr) continue;
    float* out = scratch(1, s.d);
    collapse(flat, pre, n, s.d, out);
    store_row(ry, t, out);
  }
}

}  // namespace

void CpuBackend::hc_pre(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y, Tensor& post,
                        Tensor& comb) {
  site_rows(x, w, options, nullptr, post, comb, &y, "hc_pre");
}

void CpuBackend::hc_mix(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& pre, Tensor& post,
                        Tensor& comb) {
  DI_CHECK(pre.dtype() == DType::kF32 && x.ndim() == 3 && pre.numel() == x.dim(0) * x.dim(1) && pre.is_contiguous(),
           "hc_mix: pre {} {} for stream {}", dtype_name(pre.dtype()), pre.shape(), x.shape());
  site_rows(x, w, options, pre.data<float>(), post, comb, nullptr, "hc_mix");
}

void CpuBackend::hc_collapse(const Tensor& x, const Tensor& pre, Tensor& y) {
  const HcShape s = check_stream(x, "hc_collapse");
  const float* pre_v = f32_param(pre, s.tokens * s.n, "hc_collapse pre");
  const Rows rx = as_rows(x, s.n * s.d);
  const Rows ry = as_rows(y, s.d);
  DI_CHECK(ry.rows == s.tokens, "hc_collapse: y {} for {} tokens", y.shape(), s.tokens);
#pragma omp parallel for schedule(static) if (worth_threads(s.tokens * s.n * s.d))
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    const float* flat = load_row(rx, t, scratch(0, s.n * s.d));
    float* out = scratch(1, s.d);
    collapse(flat, pre_v + t * s.n, s.n, s.d, out);
    store_row(ry, t, out);
  }
}

void CpuBackend::hc_post(const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
                         Tensor& out) {
  const HcShape s = check_stream(residual, "hc_post");
  const int n = s.n;
  DI_CHECK(out.shape() == residual.shape(), "hc_post: out {} must match the stream {}", out.shape(),
           residual.shape());
  const Rows rf = as_rows(f, s.d);
  DI_CHECK(rf.rows == s.tokens, "hc_post: f {} for {} tokens", f.shape(), s.tokens);
  const float* post_v = f32_param(post, s.tokens * n, "hc_post post");
  const float* comb_v = f32_param(comb, s.tokens * n * n, "hc_post comb");
  const Rows rr = as_rows(residual, n * s.d);
  const Rows ro = as_rows(out, n * s.d);
#pragma omp parallel for schedule(static) if (worth_threads(s.tokens * n * n * s.d))
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    const float* fv = load_row(rf, t, scratch(0, s.d));
    const float* res = load_row(rr, t, scratch(1, n * s.d));
    float* o = scratch(2, n * s.d);
    const float* c = comb_v + t * n * n;
    for (int k = 0; k < n; ++k) {
      float* ok = o + k * s.d;
      std::fill(ok, ok + s.d, 0.0f);
      for (int j = 0; j < n; ++j) {
        const float cjk = c[j * n + k];
        const float* rj = res + j * s.d;
        for (std::int64_t i = 0; i < s.d; ++i) ok[i] += cjk * rj[i];
      }
      const float pk = post_v[t * n + k];
      for (std::int64_t i = 0; i < s.d; ++i) ok[i] = pk * fv[i] + ok[i];
    }
    store_row(ro, t, o);
  }
}

void CpuBackend::hc_head(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y) {
  const HcShape s = check_stream(x, "hc_head");
  const int n = s.n;
  const std::int64_t width = n * s.d;
  const float* fn = f32_param(w.fn, n * width, "hc_head fn");
  const float* base = f32_param(w.base, n, "hc_head base");
  const float* scale = f32_param(w.scale, 1, "hc_head scale");
  const Rows rx = as_rows(x, width);
  const Rows ry = as_rows(y, s.d);
  DI_CHECK(ry.rows == s.tokens, "hc_head: y {} for {} tokens", y.shape(), s.tokens);
#pragma omp parallel for schedule(static) if (worth_threads(s.tokens * n * width))
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    const float* flat = load_row(rx, t, scratch(0, width));
    float mixes[kMaxHc];
    hc_mixes(flat, width, fn, n, options.norm_eps, mixes);
    float pre[kMaxHc];
    for (int i = 0; i < n; ++i) pre[i] = sigmoid(mixes[i] * scale[0] + base[i]) + options.hc_eps;
    float* out = scratch(1, s.d);
    collapse(flat, pre, n, s.d, out);
    store_row(ry, t, out);
  }
}

}  // namespace deepinfer::ops::cpu
