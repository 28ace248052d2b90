// Default bodies of the ops a backend may not have yet: they fail with a message naming the
// backend and the op, so a model needing them stops at its first forward with a clear error. Also
// the reference composition of linear_grouped (a loop of linear()).
#include "ops/backend.h"

#include "common/error.h"

namespace deepinfer::ops {
namespace {

[[noreturn]] void missing(const Backend& be, const char* op) {
  throw_error("op {} is not implemented on the {} backend yet (DeepSeek-V4.1 needs it)", op, be.name());
}

}  // namespace

void check_linear_grouped(const Tensor& x, std::span<const LinearWeight> w, const Tensor& out) {
  DI_CHECK(!w.empty(), "linear_grouped: no weights");
  const LinearWeight& w0 = w.front();
  DI_CHECK(w0.data.ndim() == 2, "linear_grouped: weight 0 has shape {}, expected [N, K]", w0.data.shape());
  for (std::size_t g = 1; g < w.size(); ++g)
    DI_CHECK(w[g].format == w0.format && w[g].block == w0.block && w[g].data.shape() == w0.data.shape(),
             "linear_grouped: weight {} (shape {}) differs in format or shape from weight 0 (shape {})", g,
             w[g].data.shape(), w0.data.shape());
  const auto groups = static_cast<std::int64_t>(w.size());
  DI_CHECK(x.ndim() == 2 && x.dim(1) == groups * w0.in_features(),
           "linear_grouped: x {} does not hold {} groups of K = {}", x.shape(), groups, w0.in_features());
  DI_CHECK(out.ndim() == 2 && out.dim(0) == x.dim(0) && out.dim(1) == groups * w0.out_features(),
           "linear_grouped: out {} is not [{}, {} groups of N = {}]", out.shape(), x.dim(0), groups,
           w0.out_features());
}

void Backend::linear_grouped(const Tensor& x, std::span<const LinearWeight> w, const LinearOptions& options,
                             Tensor& out) {
  check_linear_grouped(x, w, out);
  const std::int64_t k = w.front().in_features(), n = w.front().out_features();
  for (std::size_t g = 0; g < w.size(); ++g) {
    const auto gi = static_cast<std::int64_t>(g);
    Tensor out_g = out.narrow(1, gi * n, n);
    linear(x.narrow(1, gi * k, k), w[g], options, out_g);
  }
}

void Backend::hc_mix(const Tensor&, const HcWeights&, const HcOptions&, Tensor&, Tensor&, Tensor&) {
  missing(*this, "hc_mix");
}

void Backend::rms_norm_rope(Tensor& x, const Tensor* weight, float eps, const Tensor& positions,
                            const RopeTable& table) {
  rms_norm(x, weight, eps, x);
  rope(x, positions, table, false);
}

void Backend::hc_pre_norm(const Tensor& x, const HcWeights& w, const HcOptions& options, const Tensor& norm_weight,
                          float norm_eps, Tensor& y, Tensor& post, Tensor& comb) {
  hc_pre(x, w, options, y, post, comb);
  rms_norm(y, &norm_weight, norm_eps, y);
}

void Backend::hc_collapse(const Tensor&, const Tensor&, Tensor&) { missing(*this, "hc_collapse"); }

void Backend::engram_gate(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, Tensor&) {
  missing(*this, "engram_gate");
}

}  // namespace deepinfer::ops
