// FP8-block and FP4 weight formats: dequantisation for loading and checks, quantisation for the
// tiny checkpoints we write. Scalar conversions come from tensor/float_formats.h (bit-exact).
#include "io/weight_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "tensor/float_formats.h"

namespace deepinfer::io {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Scales are UE8M0 as released; HF stores weight_scale_inv as f32 (any float type is accepted).
void check_scale_dtype(const Tensor& scale, std::string_view what) {
  DI_CHECK(scale.dtype() == DType::kUE8M0 || scale.dtype() == DType::kF32 || scale.dtype() == DType::kBF16 ||
               scale.dtype() == DType::kF16,
           "{}: scale dtype {} is not ue8m0 or a float type", what, dtype_name(scale.dtype()));
}

void check_host_2d(const Tensor& t, std::string_view what, std::string_view role) {
  DI_CHECK(t.device().is_cpu(), "{}: {} is not on the host", what, role);
  DI_CHECK(t.ndim() == 2, "{}: {} must be 2-D, got shape {}", what, role, t.shape());
  DI_CHECK(t.is_contiguous(), "{}: {} must be contiguous", what, role);
}

// Reads the whole scale tensor as f32 once (scales are small).
std::vector<float> scales_f32(const Tensor& scale) {
  std::vector<float> out(static_cast<std::size_t>(scale.numel()));
  if (scale.dtype() == DType::kUE8M0) {
    const auto* codes = scale.data<std::uint8_t>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = ue8m0_to_f32(codes[i]);
  } else if (scale.dtype() == DType::kF32) {
    std::memcpy(out.data(), scale.raw_data(), out.size() * sizeof(float));
  } else {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = scale.item_f32(static_cast<std::int64_t>(i));
  }
  return out;
}

void store_row(Tensor& out, std::int64_t row, const std::vector<float>& values) {
  if (out.dtype() == DType::kF32) {
    std::memcpy(out.data<float>() + row * out.dim(1), values.data(), values.size() * sizeof(float));
    return;
  }
  auto* dst = out.data<std::uint16_t>() + row * out.dim(1);
  for (std::size_t k = 0; k < values.size(); ++k) dst[k] = f32_to_bf16(values[k]);
}

Tensor output_tensor(std::int64_t rows, std::int64_t cols, DType out_dtype, std::string_view what) {
  DI_CHECK(out_dtype == DType::kF32 || out_dtype == DType::kBF16, "{}: dequantise to f32 or bf16, not {}", what,
           dtype_name(out_dtype));
  return Tensor::empty(Shape{rows, cols}, out_dtype);
}

}  // namespace

Tensor fp4_view(const Tensor& packed) {
  if (packed.dtype() == DType::kF4E2M1) return packed;
  DI_CHECK(packed.dtype() == DType::kI8 || packed.dtype() == DType::kU8,
           "fp4_view: packed fp4 weights are stored as i8 or u8, got {}", dtype_name(packed.dtype()));
  DI_CHECK(packed.ndim() >= 1 && packed.is_contiguous(), "fp4_view: need a contiguous tensor with at least one dimension");
  Shape logical = packed.shape();
  logical[-1] *= 2;
  // Same bytes, new element type: a view sharing the original's storage (the copy keeps it alive).
  auto keep = std::make_shared<Tensor>(packed);
  return Tensor::view_of(keep->raw_data(), logical, DType::kF4E2M1, std::shared_ptr<const void>(keep, keep.get()),
                         packed.device());
}

Tensor dequantize_fp8_block(const Tensor& weight, const Tensor& scale, int block_rows, int block_cols, DType out_dtype,
                            std::string_view what) {
  check_host_2d(weight, what, "weight");
  check_host_2d(scale, what, "scale");
  DI_CHECK(weight.dtype() == DType::kF8E4M3, "{}: expected an fp8_e4m3 weight, got {}", what, dtype_name(weight.dtype()));
  check_scale_dtype(scale, what);
  DI_CHECK(block_rows > 0 && block_cols > 0, "{}: block size {}x{} must be positive", what, block_rows, block_cols);
  const std::int64_t rows = weight.dim(0), cols = weight.dim(1);
  const Shape want{ceil_div(rows, block_rows), ceil_div(cols, block_cols)};
  DI_CHECK(scale.shape() == want, "{}: scale shape {} does not match weight {} with {}x{} blocks (expected {})", what,
           scale.shape(), weight.shape(), block_rows, block_cols, want);
  const std::vector<float> s = scales_f32(scale);
  Tensor out = output_tensor(rows, cols, out_dtype, what);
  const auto* codes = weight.data<std::uint8_t>();
  std::vector<float> row_values(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row_scales = s.data() + (r / block_rows) * want[1];
    for (std::int64_t c = 0; c < cols; ++c)
      row_values[static_cast<std::size_t>(c)] = e4m3_to_f32(codes[r * cols + c]) * row_scales[c / block_cols];
    store_row(out, r, row_values);
  }
  return out;
}

Tensor dequantize_fp4(const Tensor& weight, const Tensor& scale, DType out_dtype, std::string_view what) {
  check_host_2d(weight, what, "weight");
  check_host_2d(scale, what, "scale");
  check_scale_dtype(scale, what);
  const Tensor codes = fp4_view(weight);
  const std::int64_t rows = codes.dim(0), cols = codes.dim(1);
  DI_CHECK(cols % kFp4BlockSize == 0, "{}: fp4 weight {} needs K divisible by {}", what, codes.shape(), kFp4BlockSize);
  const Shape want{rows, cols / kFp4BlockSize};
  DI_CHECK(scale.shape() == want, "{}: scale shape {} does not match fp4 weight {} (expected {})", what, scale.shape(),
           codes.shape(), want);
  const std::vector<float> s = scales_f32(scale);
  Tensor out = output_tensor(rows, cols, out_dtype, what);
  const auto* packed = codes.data<std::uint8_t>();
  std::vector<float> row_values(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* row = packed + r * (cols / 2);
    for (std::int64_t k = 0; k < cols; ++k)
      row_values[static_cast<std::size_t>(k)] = e2m1_to_f32(fp4_unpack(row, k)) * s[static_cast<std::size_t>(r * want[1] + k / kFp4BlockSize)];
    store_row(out, r, row_values);
  }
  return out;
}

std::pair<Tensor, Tensor> quantize_fp8_block(const Tensor& weight, int block_rows, int block_cols) {
  check_host_2d(weight, "quantize_fp8_block", "weight");
  DI_CHECK(weight.dtype() == DType::kF32, "quantize_fp8_block: expected an f32 weight, got {}", dtype_name(weight.dtype()));
  const std::int64_t rows = weight.dim(0), cols = weight.dim(1);
  const std::int64_t brs = ceil_div(rows, block_rows), bcs = ceil_div(cols, block_cols);
  Tensor q = Tensor::empty(Shape{rows, cols}, DType::kF8E4M3);
  Tensor s = Tensor::empty(Shape{brs, bcs}, DType::kUE8M0);
  const float* w = weight.data<float>();
  for (std::int64_t br = 0; br < brs; ++br) {
    for (std::int64_t bc = 0; bc < bcs; ++bc) {
      const std::int64_t r1 = std::min(rows, (br + 1) * block_rows), c1 = std::min(cols, (bc + 1) * block_cols);
      float amax = 1e-4f;
      for (std::int64_t r = br * block_rows; r < r1; ++r)
        for (std::int64_t c = bc * block_cols; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const std::uint8_t code = ue8m0_ceil_code(amax * (1.0f / kE4M3Max));
      s.data<std::uint8_t>()[br * bcs + bc] = code;
      const float inverse = 1.0f / ue8m0_to_f32(code);  // exact: a power of two
      for (std::int64_t r = br * block_rows; r < r1; ++r)
        for (std::int64_t c = bc * block_cols; c < c1; ++c)
          q.data<std::uint8_t>()[r * cols + c] = f32_to_e4m3(w[r * cols + c] * inverse);
    }
  }
  return {q, s};
}

std::pair<Tensor, Tensor> quantize_fp4(const Tensor& weight) {
  check_host_2d(weight, "quantize_fp4", "weight");
  DI_CHECK(weight.dtype() == DType::kF32, "quantize_fp4: expected an f32 weight, got {}", dtype_name(weight.dtype()));
  const std::int64_t rows = weight.dim(0), cols = weight.dim(1);
  DI_CHECK(cols % kFp4BlockSize == 0, "quantize_fp4: K = {} is not divisible by {}", cols, kFp4BlockSize);
  Tensor q = Tensor::empty(Shape{rows, cols}, DType::kF4E2M1);
  Tensor s = Tensor::empty(Shape{rows, cols / kFp4BlockSize}, DType::kUE8M0);
  const float* w = weight.data<float>();
  auto* packed = q.data<std::uint8_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < cols / kFp4BlockSize; ++b) {
      const float* block = w + r * cols + b * kFp4BlockSize;
      float amax = 6.0f * std::ldexp(1.0f, -126);
      for (int k = 0; k < kFp4BlockSize; ++k) amax = std::max(amax, std::fabs(block[k]));
      const std::uint8_t code = ue8m0_ceil_code(amax * (1.0f / kE2M1Max));
      s.data<std::uint8_t>()[r * (cols / kFp4BlockSize) + b] = code;
      const float inverse = 1.0f / ue8m0_to_f32(code);
      for (int k = 0; k < kFp4BlockSize; k += 2) {
        packed[(r * cols + b * kFp4BlockSize + k) / 2] =
            fp4_pack(f32_to_e2m1(block[k] * inverse), f32_to_e2m1(block[k + 1] * inverse));
      }
    }
  }
  return {q, s};
}

}  // namespace deepinfer::io
