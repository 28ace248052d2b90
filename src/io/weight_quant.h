// The stored weight formats of DeepSeek-V4 / V4.1 checkpoints (MODEL_SPEC A3.1) and conversions
// between them and f32:
//  * FP8 block weights: E4M3 values, one scale per block of rows x cols (V4 128x128, V4.1 32x32,
//    Engram tables 1x32); scale tensor [ceil(out/rows), ceil(in/cols)]; w = fp8 * scale.
//  * FP4 routed experts: E2M1 codes packed two per byte along K (low nibble = even k), stored as
//    I8/U8 [out, in/2]; one scale per 32 consecutive K elements, [out, in/32]; w = e2m1 * scale.
// Scales are UE8M0 (2^(e-127)) as released, or any float type (HF's weight_scale_inv is f32).
#pragma once

#include <utility>

#include "tensor/tensor.h"

namespace deepinfer::io {

inline constexpr int kFp4BlockSize = 32;  // FP4 scale granularity along K (V4 and V4.1)

// Reinterprets packed FP4 bytes (I8 or U8, [.., n]) as kF4E2M1 with logical shape [.., 2n]; no copy.
// A kF4E2M1 tensor is returned unchanged.
Tensor fp4_view(const Tensor& packed);

// Dequantises an FP8 E4M3 weight [out, in] with block scales [ceil(out/rows), ceil(in/cols)] to
// `out_dtype` (f32 or bf16). Shapes and dtypes are checked; errors name `what` (e.g. the tensor).
Tensor dequantize_fp8_block(const Tensor& weight, const Tensor& scale, int block_rows, int block_cols,
                            DType out_dtype = DType::kF32, std::string_view what = "fp8 weight");
inline Tensor dequantize_fp8_block(const Tensor& weight, const Tensor& scale, int block) {
  return dequantize_fp8_block(weight, scale, block, block);
}

// Dequantises an FP4 weight (packed I8/U8 [out, in/2] or kF4E2M1 [out, in]) with scales
// [out, in/32] to `out_dtype` (f32 or bf16).
Tensor dequantize_fp4(const Tensor& weight, const Tensor& scale, DType out_dtype = DType::kF32,
                      std::string_view what = "fp4 weight");

// Quantises an f32 [out, in] weight to FP8 E4M3 with UE8M0 block scales the way DeepSeek's
// release does: scale = pow2ceil(amax / 448) per block (amax floored at 1e-4), values
// round-to-nearest-even. Returns {weight kF8E4M3, scale kUE8M0}.
std::pair<Tensor, Tensor> quantize_fp8_block(const Tensor& weight, int block_rows, int block_cols);

// Quantises an f32 [out, in] weight (in divisible by 32) to packed FP4 with UE8M0 scales per 32:
// scale = pow2ceil(amax / 6) (amax floored at 6 * 2^-126). Returns {weight kF4E2M1 [out, in],
// scale kUE8M0 [out, in/32]}.
std::pair<Tensor, Tensor> quantize_fp4(const Tensor& weight);

}  // namespace deepinfer::io
