// Scalar conversions between f32 and the narrow float formats, bit-exact to the OCP definitions:
// round to nearest, ties to even; NaN stays NaN. Header-only and branch-light: the CPU kernels
// call them per element.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace deepinfer {

// ---- bfloat16 ---------------------------------------------------------------------------------
inline float bf16_to_f32(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t{bits} << 16); }

inline std::uint16_t f32_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

// Rounds an f32 to the nearest bf16 value and returns it as f32 (the "cast to BF16" of the reference).
inline float round_to_bf16(float value) { return bf16_to_f32(f32_to_bf16(value)); }

// ---- IEEE binary16 ----------------------------------------------------------------------------
inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // subnormal or zero
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline std::uint16_t f32_to_f16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;          // NaN
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;         // rounds to >= 65520: infinity
  if (abs_bits < 0x38800000u) {                               // below 2^-14: subnormal half
    const float scaled = std::bit_cast<float>(abs_bits) * 16777216.0f;  // exact: * 2^24
    return sign | static_cast<std::uint16_t>(std::nearbyint(scaled));
  }
  const std::uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
  return sign | static_cast<std::uint16_t>((rounded - (112u << 23)) >> 13);
}

// ---- FP8 E4M3FN -------------------------------------------------------------------------------
inline constexpr float kE4M3Max = 448.0f;

inline float e4m3_to_f32(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t exponent = (code >> 3) & 0xfu;
  const std::uint32_t mantissa = code & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;  // m * 2^-9
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

enum class Fp8Overflow {
  kSaturate,  // |x| beyond the range becomes +-448 (CUDA's satfinite; the reference clamps first)
  kNaN,       // |x| >= 480 (what rounds past 448) and infinities become NaN, as PyTorch's cast does
};

inline std::uint8_t f32_to_e4m3(float value, Fp8Overflow overflow = Fp8Overflow::kSaturate) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7fu;  // NaN
  if (abs_bits >= 0x43f00000u) {                     // >= 480 or infinity
    return overflow == Fp8Overflow::kSaturate ? (sign | 0x7eu) : (sign | 0x7fu);
  }
  if (abs_bits < 0x3c800000u) {  // below 2^-6: subnormal grid of step 2^-9 (scaling is exact)
    return sign | static_cast<std::uint8_t>(std::nearbyint(std::bit_cast<float>(abs_bits) * 512.0f));
  }
  const std::uint32_t rounded = abs_bits + 0x7ffffu + ((abs_bits >> 20) & 1u);
  const std::uint32_t code = (rounded - (120u << 23)) >> 20;
  // 448 < |x| < 480 rounds to 448 (the tie 464 goes to the even code 0x7e) — never 0x7f.
  return sign | static_cast<std::uint8_t>(code > 0x7eu ? 0x7eu : code);
}

inline float round_to_e4m3(float value) { return e4m3_to_f32(f32_to_e4m3(value)); }

// ---- FP8 E5M2 (decode only; kept so any safetensors file can be inspected) ---------------------
inline float e5m2_to_f32(std::uint8_t code) { return f16_to_f32(static_cast<std::uint16_t>(code << 8)); }

// ---- FP4 E2M1 ---------------------------------------------------------------------------------
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE2M1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

inline float e2m1_to_f32(std::uint8_t nibble) {
  const float magnitude = kE2M1Magnitudes[nibble & 0x7u];
  return (nibble & 0x8u) ? -magnitude : magnitude;
}

// Nearest E2M1 code, ties to the even code; saturates at +-6; NaN maps to +0 (E2M1 has no NaN;
// the reference clamps before converting, so it never produces one).
inline std::uint8_t f32_to_e2m1(float value) {
  if (std::isnan(value)) return 0;
  const std::uint8_t sign = std::signbit(value) ? 0x8u : 0x0u;
  const float a = std::fabs(value);
  std::uint8_t code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return sign | code;
}

// Element k of a packed FP4 row: low nibble holds the even element, high nibble the odd one.
inline std::uint8_t fp4_unpack(const std::uint8_t* packed, std::int64_t k) {
  const std::uint8_t byte = packed[k >> 1];
  return (k & 1) ? static_cast<std::uint8_t>(byte >> 4) : static_cast<std::uint8_t>(byte & 0xfu);
}

inline std::uint8_t fp4_pack(std::uint8_t even, std::uint8_t odd) {
  return static_cast<std::uint8_t>((even & 0xfu) | ((odd & 0xfu) << 4));
}

// ---- UE8M0 power-of-two scales ----------------------------------------------------------------
inline float ue8m0_to_f32(std::uint8_t code) {
  if (code == 0xff) return std::bit_cast<float>(0x7fc00000u);
  if (code == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127 is an f32 subnormal
  return std::bit_cast<float>(static_cast<std::uint32_t>(code) << 23);
}

// Smallest power of two >= |value| as a UE8M0 code, computed on the f32 bits as DeepSeek's
// kernels do (exponent field, +1 if any mantissa bit is set). value must be finite and > 0.
inline std::uint8_t ue8m0_ceil_code(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value) & 0x7fffffffu;
  std::uint32_t exponent = bits >> 23;
  if (bits & 0x7fffffu) exponent += 1;
  return static_cast<std::uint8_t>(exponent > 0xfeu ? 0xfeu : exponent);
}

inline float pow2_ceil(float value) { return ue8m0_to_f32(ue8m0_ceil_code(value)); }

}  // namespace deepinfer
