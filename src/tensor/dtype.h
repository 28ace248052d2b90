// Element types of tensors on disk and in memory, with their sizes and safetensors names.
// kF4E2M1 is packed two per byte along the last dimension (low nibble = even index).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace deepinfer {

enum class DType : std::uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP E4M3FN: no infinities, max 448, S.1111.111 = NaN
  kF8E5M2,
  kUE8M0,   // unsigned power-of-two scale 2^(e-127), 0xFF = NaN
  kF4E2M1,  // OCP E2M1, two codes per byte
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
};

// Bits per element (4 for kF4E2M1).
int dtype_bits(DType dtype);
// Bytes occupied by `count` elements; count must be even for kF4E2M1.
std::size_t dtype_bytes(DType dtype, std::int64_t count);
bool dtype_is_floating(DType dtype);

// Our short name ("bf16", "fp8_e4m3", ...), used in messages and `inspect`.
std::string_view dtype_name(DType dtype);
// The safetensors header spelling ("BF16", "F8_E4M3", ...). kF4E2M1 has none: it is stored as I8/U8.
std::string_view dtype_safetensors_name(DType dtype);
std::optional<DType> dtype_from_safetensors_name(std::string_view name);
// Parses our short names and the common aliases ("bfloat16", "float32", "fp8", "e4m3", ...).
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace deepinfer
