// Device twins of tensor/float_formats.h (bit-exact: round to nearest even, same saturation) plus
// the row-view loads/stores and warp reductions the kernels share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/device_rows.h"

namespace deepinfer::ops::cuda {

constexpr float kE4M3MaxF = 448.0f;
constexpr float kE2M1MaxF = 6.0f;

__device__ __forceinline__ float bf16_bits_to_f32(std::uint16_t bits) {
  return __uint_as_float(static_cast<std::uint32_t>(bits) << 16);
}

__device__ __forceinline__ std::uint16_t f32_to_bf16_bits(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

__device__ __forceinline__ float round_bf16(float v) { return bf16_bits_to_f32(f32_to_bf16_bits(v)); }

// Two e4m3 codes (low byte first) -> bf16x2 of code x scale: e4m3 -> f16 is exact, the f32 product is the
// host dequantisation's (io::dequantize_fp8_block), rounded to bf16 the same way (the skinny bf16 and grouped FP8 wgmma
// kernels' widening of FP8 blocks).
__device__ __forceinline__ std::uint32_t e4m3x2_to_bf16x2(std::uint32_t two, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
  return *reinterpret_cast<const std::uint32_t*>(&b);
}

__device__ __forceinline__ float e4m3_to_f32(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t exponent = (code >> 3) & 0xfu;
  const std::uint32_t mantissa = code & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return __uint_as_float(sign | 0x7fc00000u);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
    return sign ? -magnitude : magnitude;
  }
  return __uint_as_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

// Saturating f32 -> e4m3 code (the reference clamps to ±448 first).
__device__ __forceinline__ std::uint8_t f32_to_e4m3(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7fu;
  if (abs_bits >= 0x43f00000u) return sign | 0x7eu;
  if (abs_bits < 0x3c800000u)
    return sign | static_cast<std::uint8_t>(rintf(__uint_as_float(abs_bits) * 512.0f));
  const std::uint32_t rounded = abs_bits + 0x7ffffu + ((abs_bits >> 20) & 1u);
  const std::uint32_t code = (rounded - (120u << 23)) >> 20;
  return sign | static_cast<std::uint8_t>(code > 0x7eu ? 0x7eu : code);
}

__device__ __forceinline__ float round_e4m3(float v) { return e4m3_to_f32(f32_to_e4m3(v)); }

__device__ __forceinline__ float e2m1_to_f32(std::uint32_t nibble) {
  // codes 2..7 are 2^((c>>1)-1) * (1 + (c&1)/2); code 1 is 0.5, code 0 is 0.
  const std::uint32_t c = nibble & 7u;
  float magnitude = __uint_as_float((((c >> 1) + 126u) << 23) | ((c & 1u) << 22));
  magnitude = c == 0 ? 0.0f : (c == 1 ? 0.5f : magnitude);
  return (nibble & 8u) ? -magnitude : magnitude;
}

__device__ __forceinline__ std::uint32_t f32_to_e2m1(float value) {
  if (isnan(value)) return 0;
  const std::uint32_t sign = signbit(value) ? 8u : 0u;
  const float a = fabsf(value);
  std::uint32_t code;
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

__device__ __forceinline__ float ue8m0_to_f32(std::uint8_t code) {
  if (code == 0xff) return __uint_as_float(0x7fc00000u);
  if (code == 0) return __uint_as_float(0x00400000u);
  return __uint_as_float(static_cast<std::uint32_t>(code) << 23);
}

// Where act code i sits in a K-permuted row (launch_act_quant_codes' k_permuted, the SwiGLU codes): the
// even elements of each 32-column block first, then the odd ones — the operand order of the routed
// experts' wgmma GEMMs (moe_fp4_wgmma.cu, moe_prefill_fp8_wgmma.cu).
__device__ __forceinline__ std::int64_t k_permuted_col(std::int64_t i) {
  return (i & ~std::int64_t{31}) | ((i & 31) >> 1) | ((i & 1) << 4);
}

// Smallest power of two >= value (value finite, > 0), from the f32 bits like DeepSeek's kernels.
__device__ __forceinline__ float pow2_ceil(float value) {
  const std::uint32_t bits = __float_as_uint(value) & 0x7fffffffu;
  std::uint32_t exponent = bits >> 23;
  if (bits & 0x7fffffu) exponent += 1;
  return ue8m0_to_f32(static_cast<std::uint8_t>(exponent > 0xfeu ? 0xfeu : exponent));
}

// ---- row views ----------------------------------------------------------------------------------
__device__ __forceinline__ float load_elem(const DevRows& m, std::int64_t r, std::int64_t i) {
  const std::int64_t off = r * m.stride + i;
  if (m.bf16) return bf16_bits_to_f32(static_cast<const std::uint16_t*>(m.base)[off]);
  return static_cast<const float*>(m.base)[off];
}

__device__ __forceinline__ void store_elem(const DevRows& m, std::int64_t r, std::int64_t i, float v) {
  const std::int64_t off = r * m.stride + i;
  if (m.bf16) {
    static_cast<std::uint16_t*>(m.base)[off] = f32_to_bf16_bits(v);
  } else {
    static_cast<float*>(m.base)[off] = v;
  }
}

__device__ __forceinline__ float round_like(int bf16, float v) { return bf16 ? round_bf16(v) : v; }

// load_elem in two halves for batches of loads: load_bits fetches the raw bits (a bf16's 16 or an
// f32's 32) and bits_value converts them later. load_elem converts a bf16 right after its load,
// which makes the thread wait for that load before issuing the next one (the batch serialises).
__device__ __forceinline__ std::uint32_t load_bits(const DevRows& m, std::int64_t r, std::int64_t i) {
  const std::int64_t off = r * m.stride + i;
  if (m.bf16) return static_cast<const std::uint16_t*>(m.base)[off];
  return static_cast<const std::uint32_t*>(m.base)[off];
}

__device__ __forceinline__ float bits_value(const DevRows& m, std::uint32_t bits) {
  return __uint_as_float(m.bf16 ? bits << 16 : bits);
}

// Records the first fault in the device error word.
__device__ __forceinline__ void report_fault(int* err, DeviceFault fault, long long value, long long bound) {
  if (atomicCAS(err, 0, static_cast<int>(fault)) == 0) {
    err[1] = static_cast<int>(value);
    err[2] = static_cast<int>(bound);
  }
}

// Physical row of logical row r of a source (page table resolved); -1 when the page entry is bad.
__device__ __forceinline__ std::int64_t physical_row(const DevRowSource& s, std::int64_t r) {
  if (s.page_table == nullptr) return r;
  const std::int64_t page = s.page_table[r / s.page_rows];
  const std::int64_t phys = page * s.page_rows + r % s.page_rows;
  return (page < 0 || phys >= s.rows.rows) ? -1 : phys;
}

// ---- warp reductions -----------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum over all threads (blockDim.x a multiple of 32, <= 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* shared32) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  float total = 0.0f;
  const int warps = blockDim.x / 32;
  for (int w = 0; w < warps; ++w) total += shared32[w];  // fixed order: batch invariant
  return total;
}

// ---- quantise -> dequantise of one block held by a warp -------------------------------------------
// v[0..len) with lanes striding; computes the block scale with the reference's rules.
__device__ __forceinline__ float fp8_block_scale(float amax) { return pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / kE4M3MaxF)); }

__device__ __forceinline__ float fake_fp8(float x, float s) {
  return round_e4m3(fminf(fmaxf(x / s, -kE4M3MaxF), kE4M3MaxF)) * s;
}

// scale_kind 0 = UE8M0 (pow2), 1 = E4M3-rounded.
__device__ __forceinline__ float fp4_block_scale(float amax, int scale_kind) {
  if (scale_kind == 0) return pow2_ceil(fmaxf(amax, 6.0f * 1.1754943508222875e-38f) * (1.0f / kE2M1MaxF));
  return round_e4m3(fmaxf(amax, 6.0f * 0.001953125f) / kE2M1MaxF);
}

__device__ __forceinline__ float fake_fp4(float x, float s) {
  return e2m1_to_f32(f32_to_e2m1(fminf(fmaxf(x / s, -kE2M1MaxF), kE2M1MaxF))) * s;
}

}  // namespace deepinfer::ops::cuda
