// Default bodies of the ops a backend may not have yet: they fail with a message naming the
// backend and the op, so a model needing them stops at its first forward with a clear error.
#include "ops/backend.h"

#include "common/error.h"

namespace deepinfer::ops {
namespace {

[[noreturn]] void missing(const Backend& be, const char* op) {
  throw_error("op {} is not implemented on the {} backend yet (DeepSeek-V4.1 needs it)", op, be.name());
}

}  // namespace

void Backend::hc_mix(const Tensor&, const HcWeights&, const HcOptions&, Tensor&, Tensor&, Tensor&) {
  missing(*this, "hc_mix");
}

void Backend::hc_collapse(const Tensor&, const Tensor&, Tensor&) { missing(*this, "hc_collapse"); }

void Backend::engram_gate(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, Tensor&) {
  missing(*this, "engram_gate");
}

}  // namespace deepinfer::ops
