// Scalar quantise→dequantise and rotation routines on f32 spans, bit-exact to MODEL_SPEC A3.2
// (DeepSeek's act_quant / fp4_act_quant kernels). Shared by the ops and by the linear's input path.
#pragma once

#include <cstdint>

#include "ops/op_types.h"

namespace deepinfer::ops::cpu {

// FP8 E4M3 per block of `block` elements with power-of-two scales; a trailing partial block is
// its own block.
void fake_quant_fp8_span(float* v, std::int64_t n, int block);
// FP4 E2M1 per block with a power-of-two (UE8M0) or e4m3-rounded scale.
void fake_quant_fp4_span(float* v, std::int64_t n, int block, Fp4ScaleKind scale_kind);
// Normalised Walsh–Hadamard transform in Sylvester order; n must be a power of two.
void hadamard_span(float* v, std::int64_t n);

}  // namespace deepinfer::ops::cpu
