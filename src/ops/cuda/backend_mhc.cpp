// CUDA backend mHC ops: hyper-connection mixing (hc_pre / hc_post / hc_head, with V4.1's hc_mix /
// hc_collapse) and V4.1's Engram gate. The MoE ops live in backend_moe.cpp.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

struct HcShape {
  std::int64_t tokens;
  int n;
  std::int64_t d;
};

HcShape check_stream(const Tensor& x, const char* op) {
  DI_CHECK(x.ndim() == 3 && x.dim(1) >= 1 && x.dim(1) <= 16, "{}: stream {} must be [T, n_hc <= 16, D]", op, x.shape());
  return {x.dim(0), static_cast<int>(x.dim(1)), x.dim(2)};
}

// The arguments shared by hc_pre and hc_mix: a full site's weights, post and comb outputs.
HcArgs site_args(const CudaBackend& be, const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& post,
                 Tensor& comb, const char* op) {
  const HcShape s = check_stream(x, op);
  const int n_mix = (2 + s.n) * s.n;
  const std::string name(op);
  HcArgs a;
  a.fn = be.f32_of(w.fn, n_mix * s.n * s.d, (name + " fn").c_str());
  a.base = be.f32_of(w.base, n_mix, (name + " base").c_str());
  a.scale = be.f32_of(w.scale, 3, (name + " scale").c_str());
  a.post = be.f32_mut(post, s.tokens * s.n, (name + " post").c_str());
  a.comb = be.f32_mut(comb, s.tokens * s.n * s.n, (name + " comb").c_str());
  a.x = be.rows_of(x, s.n * s.d, (name + " x").c_str());
  a.n = s.n;
  a.d = s.d;
  a.norm_eps = options.norm_eps;
  a.hc_eps = options.hc_eps;
  a.iters = options.sinkhorn_iters;
  a.head = 0;
  return a;
}

// Scratch for the mixing dot products' per-slice partial sums (launch_hc_mix).
float* hc_partial_scratch(CudaBackend& be, const HcArgs& a) {
  const std::int64_t floats = hc_mix_partial_floats(a.x.rows, a.n, a.d, a.head != 0);
  return reinterpret_cast<float*>(be.scratch(static_cast<std::size_t>(floats) * sizeof(float), "hc mixing"));
}

}  // namespace

void CudaBackend::hc_pre(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y, Tensor& post,
                         Tensor& comb) {
  HcArgs a = site_args(*this, x, w, options, post, comb, "hc_pre");
  a.y = rows_of(y, a.d, "hc_pre y");
  DI_CHECK(a.y.rows == a.x.rows, "hc_pre: y {} for {} tokens", y.shape(), a.x.rows);
  activate();
  a.partial = hc_partial_scratch(*this, a);
  launch_hc_mix(a, stream_);
  DI_CUDA_CHECK_LAUNCH("hc_pre");
}

// One kernel pair for hc_pre + rms_norm: the finish kernel normalises the collapsed row it holds
// (same per-thread and per-warp order as rms_norm_kernel, so the result is bit-identical).
void CudaBackend::hc_pre_norm(const Tensor& x, const HcWeights& w, const HcOptions& options, const Tensor& norm_weight,
                              float norm_eps, Tensor& y, Tensor& post, Tensor& comb) {
  HcArgs a = site_args(*this, x, w, options, post, comb, "hc_pre_norm");
  a.y = rows_of(y, a.d, "hc_pre_norm y");
  DI_CHECK(a.y.rows == a.x.rows, "hc_pre_norm: y {} for {} tokens", y.shape(), a.x.rows);
  a.norm_w = rows_of(norm_weight, "hc_pre_norm weight");
  DI_CHECK(a.norm_w.width == a.d && a.norm_w.rows == 1, "hc_pre_norm: weight {} for rows of {}",
           norm_weight.shape(), a.d);
  a.rms_eps = norm_eps;
  activate();
  a.partial = hc_partial_scratch(*this, a);
  launch_hc_mix(a, stream_);
  DI_CUDA_CHECK_LAUNCH("hc_pre_norm");
}

void CudaBackend::hc_post(const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
                          Tensor& out) {
  const HcShape s = check_stream(residual, "hc_post");
  DI_CHECK(out.shape() == residual.shape(), "hc_post: out {} must match the stream {}", out.shape(), residual.shape());
  const DevRows rf = rows_of(f, s.d, "hc_post f");
  DI_CHECK(rf.rows == s.tokens, "hc_post: f {} for {} tokens", f.shape(), s.tokens);
  const float* pv = f32_of(post, s.tokens * s.n, "hc_post post");
  const float* cv = f32_of(comb, s.tokens * s.n * s.n, "hc_post comb");
  const DevRows rr = rows_of(residual, s.n * s.d, "hc_post residual");
  const DevRows ro = rows_of(out, s.n * s.d, "hc_post out");
  activate();
  launch_hc_post(rf, rr, pv, cv, s.n, s.d, ro, stream_);
  DI_CUDA_CHECK_LAUNCH("hc_post");
}

void CudaBackend::hc_head(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y) {
  const HcShape s = check_stream(x, "hc_head");
  HcArgs a;
  a.fn = f32_of(w.fn, s.n * s.n * s.d, "hc_head fn");
  a.base = f32_of(w.base, s.n, "hc_head base");
  a.scale = f32_of(w.scale, 1, "hc_head scale");
  a.x = rows_of(x, s.n * s.d, "hc_head x");
  a.y = rows_of(y, s.d, "hc_head y");
  DI_CHECK(a.y.rows == s.tokens, "hc_head: y {} for {} tokens", y.shape(), s.tokens);
  a.n = s.n;
  a.d = s.d;
  a.norm_eps = options.norm_eps;
  a.hc_eps = options.hc_eps;
  a.head = 1;
  activate();
  a.partial = hc_partial_scratch(*this, a);
  launch_hc_mix(a, stream_);
  DI_CUDA_CHECK_LAUNCH("hc_head");
}

void CudaBackend::hc_mix(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& pre, Tensor& post,
                         Tensor& comb) {
  HcArgs a = site_args(*this, x, w, options, post, comb, "hc_mix");
  a.pre = f32_mut(pre, a.x.rows * a.n, "hc_mix pre");  // a.y left empty: the collapse comes one site later
  activate();
  a.partial = hc_partial_scratch(*this, a);
  launch_hc_mix(a, stream_);
  DI_CUDA_CHECK_LAUNCH("hc_mix");
}

void CudaBackend::hc_collapse(const Tensor& x, const Tensor& pre, Tensor& y) {
  const HcShape s = check_stream(x, "hc_collapse");
  const float* pv = f32_of(pre, s.tokens * s.n, "hc_collapse pre");
  const DevRows rx = rows_of(x, s.n * s.d, "hc_collapse x");
  const DevRows ry = rows_of(y, s.d, "hc_collapse y");
  DI_CHECK(ry.rows == s.tokens, "hc_collapse: y {} for {} tokens", y.shape(), s.tokens);
  activate();
  launch_hc_collapse(rx, pv, s.n, s.d, ry, stream_);
  DI_CUDA_CHECK_LAUNCH("hc_collapse");
}

void CudaBackend::engram_gate(const Tensor& x, const Tensor& key, const Tensor& value, const Tensor& omega, float eps,
                              Tensor& out) {
  DI_CHECK(x.ndim() == 3 && out.shape() == x.shape() && key.ndim() >= 2 && key.dim(0) == x.dim(0) &&
               key.numel() == x.numel(),
           "engram_gate: x {} / key {} / out {} must be [T, n, D]", x.shape(), key.shape(), out.shape());
  const std::int64_t tokens = x.dim(0), n = x.dim(1), d = x.dim(2);
  DI_CHECK(n >= 1 && n <= 16, "engram_gate: {} copies in x {} (1..16)", n, x.shape());
  DI_CHECK(omega.shape() == Shape({n, d}), "engram_gate: omega {} must be f32 [{}, {}]", omega.shape(), n, d);
  EngramGateArgs a;
  a.omega = f32_of(omega, n * d, "engram_gate omega");
  a.x = rows_of(x, n * d, "engram_gate x");
  a.key = rows_of(key, n * d, "engram_gate key");
  a.value = rows_of(value, d, "engram_gate value");
  a.out = rows_of(out, n * d, "engram_gate out");
  DI_CHECK(a.value.rows == tokens && a.key.rows == tokens && a.out.rows == tokens,
           "engram_gate: key {} / value {} / out {} for {} tokens", key.shape(), value.shape(), out.shape(), tokens);
  a.n = static_cast<int>(n);
  a.d = d;
  a.eps = eps;
  activate();
  launch_engram_gate(a, stream_);
  DI_CUDA_CHECK_LAUNCH("engram_gate");
}

}  // namespace deepinfer::ops::cuda
