// DType tables: sizes and names in one place.
#include "tensor/dtype.h"

#include <array>

#include "common/error.h"

namespace deepinfer {
namespace {

struct DTypeInfo {
  DType dtype;
  int bits;
  bool floating;
  std::string_view name;
  std::string_view safetensors_name;
};

constexpr std::array<DTypeInfo, 14> kInfos = {{
    {DType::kF64, 64, true, "f64", "F64"},
    {DType::kF32, 32, true, "f32", "F32"},
    {DType::kF16, 16, true, "f16", "F16"},
    {DType::kBF16, 16, true, "bf16", "BF16"},
    {DType::kF8E4M3, 8, true, "fp8_e4m3", "F8_E4M3"},
    {DType::kF8E5M2, 8, true, "fp8_e5m2", "F8_E5M2"},
    {DType::kUE8M0, 8, true, "ue8m0", "F8_E8M0"},
    {DType::kF4E2M1, 4, true, "fp4_e2m1", ""},
    {DType::kI64, 64, false, "i64", "I64"},
    {DType::kI32, 32, false, "i32", "I32"},
    {DType::kI16, 16, false, "i16", "I16"},
    {DType::kI8, 8, false, "i8", "I8"},
    {DType::kU8, 8, false, "u8", "U8"},
    {DType::kBool, 8, false, "bool", "BOOL"},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kInfos)
    if (entry.dtype == dtype) return entry;
  throw_error("unknown dtype value {}", static_cast<int>(dtype));
}

}  // namespace

int dtype_bits(DType dtype) { return info(dtype).bits; }

std::size_t dtype_bytes(DType dtype, std::int64_t count) {
  const int bits = dtype_bits(dtype);
  DI_CHECK(bits % 8 == 0 || count % 2 == 0, "{} tensor with an odd element count {} cannot be packed",
           dtype_name(dtype), count);
  return static_cast<std::size_t>(count) * static_cast<std::size_t>(bits) / 8;
}

bool dtype_is_floating(DType dtype) { return info(dtype).floating; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::string_view dtype_safetensors_name(DType dtype) { return info(dtype).safetensors_name; }

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& entry : kInfos)
    if (!entry.safetensors_name.empty() && entry.safetensors_name == name) return entry.dtype;
  if (name == "F8_E8M0FNU") return DType::kUE8M0;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kInfos)
    if (entry.name == name) return entry.dtype;
  if (name == "float32" || name == "fp32" || name == "float") return DType::kF32;
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16" || name == "fp16" || name == "half") return DType::kF16;
  if (name == "fp8" || name == "e4m3" || name == "float8_e4m3fn") return DType::kF8E4M3;
  if (name == "fp4" || name == "e2m1" || name == "float4_e2m1fn_x2") return DType::kF4E2M1;
  if (name == "e8m0" || name == "float8_e8m0fnu") return DType::kUE8M0;
  return dtype_from_safetensors_name(name);
}

}  // namespace deepinfer
