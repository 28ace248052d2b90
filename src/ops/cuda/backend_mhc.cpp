// CUDA backend mHC ops: hyper-connection mixing (hc_pre / hc_post / hc_head, hc_post_pre_norm, with V4.1's
// hc_mix / hc_collapse) and V4.1's Engram gate. The MoE ops live in
// backend_moe.cpp.
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

// hc_pre_norm's arguments: the site's, the collapse y and its RMSNorm weight.
HcArgs pre_norm_args(const CudaBackend& be, const Tensor& x, const HcWeights& w, const HcOptions& options,
                     const Tensor& norm_weight, float norm_eps, Tensor& y, Tensor& post, Tensor& comb, const char* op) {
  HcArgs a = site_args(be, x, w, options, post, comb, op);
  const std::string name(op);
  a.y = be.rows_of(y, a.d, (name + " y").c_str());
  DI_CHECK(a.y.rows == a.x.rows, "{}: y {} for {} tokens", op, y.shape(), a.x.rows);
  a.norm_w = be.rows_of(norm_weight, (name + " weight").c_str());
  DI_CHECK(a.norm_w.width == a.d && a.norm_w.rows == 1, "{}: weight {} for rows of {}", op, norm_weight.shape(), a.d);
  a.rms_eps = norm_eps;
  return a;
}

// hc_post's operands, checked: f [T, D] and the residual stream, out of the residual's shape.
struct PostOperands {
  DevRows f, residual, out;
  const float* post;
  const float* comb;
};

PostOperands post_operands(const CudaBackend& be, const Tensor& f, const Tensor& residual, const Tensor& post,
                           const Tensor& comb, const Tensor& out, const char* op) {
  const HcShape s = check_stream(residual, op);
  DI_CHECK(out.shape() == residual.shape(), "{}: out {} must match the stream {}", op, out.shape(), residual.shape());
  const std::string name(op);
  PostOperands o;
  o.f = be.rows_of(f, s.d, (name + " f").c_str());
  DI_CHECK(o.f.rows == s.tokens, "{}: f {} for {} tokens", op, f.shape(), s.tokens);
  o.post = be.f32_of(post, s.tokens * s.n, (name + " post").c_str());
  o.comb = be.f32_of(comb, s.tokens * s.n * s.n, (name + " comb").c_str());
  o.residual = be.rows_of(residual, s.n * s.d, (name + " residual").c_str());
  o.out = be.rows_of(out, s.n * s.d, (name + " out").c_str());
  return o;
}

}  // namespace

void CudaBackend::launch_hc_site(HcArgs& a, const char* op) {
  activate();
  a.partial = hc_partial_scratch(*this, a);
  launch_hc_mix(a, stream_);
  DI_CUDA_CHECK_LAUNCH(op);
}

void CudaBackend::hc_pre(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y, Tensor& post,
                         Tensor& comb) {
  HcArgs a = site_args(*this, x, w, options, post, comb, "hc_pre");
  a.y = rows_of(y, a.d, "hc_pre y");
  DI_CHECK(a.y.rows == a.x.rows, "hc_pre: y {} for {} tokens", y.shape(), a.x.rows);
  launch_hc_site(a, "hc_pre");
}

// One kernel pair for hc_pre + rms_norm: the finish kernel normalises the collapsed row it holds
// (same per-thread and per-warp order as rms_norm_kernel, so the result is bit-identical).
void CudaBackend::hc_pre_norm(const Tensor& x, const HcWeights& w, const HcOptions& options, const Tensor& norm_weight,
                              float norm_eps, Tensor& y, Tensor& post, Tensor& comb) {
  HcArgs a = pre_norm_args(*this, x, w, options, norm_weight, norm_eps, y, post, comb, "hc_pre_norm");
  launch_hc_site(a, "hc_pre_norm");
}

// hc_post folded into the next site's partial kernel (hc_post_fused_max_rows; decode-sized steps, n <= 4):
// one launch fewer, the same bits (the partial blocks compute hc_post_kernel's expression and sum the value
// it would have stored). Otherwise the two ops.
void CudaBackend::hc_post_pre_norm(const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
                                   Tensor& out, const HcWeights& w, const HcOptions& options,
                                   const Tensor& norm_weight, float norm_eps, Tensor& y, Tensor& post_out,
                                   Tensor& comb_out) {
  const HcShape s = check_stream(residual, "hc_post_pre_norm");
  if (s.tokens > options_.hc_post_fused_max_rows || s.n > kHcFusedPostStreams || s.tokens >= kHcMixPrefillRows ||
      s.tokens == 0 || s.n * s.d >= (std::int64_t{1} << 31)) {
    Backend::hc_post_pre_norm(f, residual, post, comb, out, w, options, norm_weight, norm_eps, y, post_out, comb_out);
    return;
  }
  const PostOperands o = post_operands(*this, f, residual, post, comb, out, "hc_post_pre_norm");
  HcArgs a = pre_norm_args(*this, out, w, options, norm_weight, norm_eps, y, post_out, comb_out, "hc_post_pre_norm");
  a.post_f = o.f;
  a.post_residual = o.residual;
  a.post_in = o.post;
  a.comb_in = o.comb;
  launch_hc_site(a, "hc_post_pre_norm");
}

void CudaBackend::hc_post(const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
                          Tensor& out) {
  const HcShape s = check_stream(residual, "hc_post");
  const PostOperands o = post_operands(*this, f, residual, post, comb, out, "hc_post");
  activate();
  launch_hc_post(o.f, o.residual, o.post, o.comb, s.n, s.d, o.out, stream_);
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
  launch_hc_site(a, "hc_head");
}

void CudaBackend::hc_mix(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& pre, Tensor& post,
                         Tensor& comb) {
  HcArgs a = site_args(*this, x, w, options, post, comb, "hc_mix");
  a.pre = f32_mut(pre, a.x.rows * a.n, "hc_mix pre");  // a.y left empty: the collapse comes one site later
  launch_hc_site(a, "hc_mix");
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
