// Counter-based random fills for --load-format dummy: every value is a pure function of (key,
// index), so the host generator (dummy_weights.cpp, on all cores) and the GPU kernel
// (cuda/random_fill_kernels.cu) write identical bytes, in any order and on any thread count.
// C++17 and CUDA-clean: compiled by nvcc as well.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DI_RANDOM_FN __host__ __device__ __forceinline__
#else
#define DI_RANDOM_FN inline
#endif

namespace deepinfer::ops {

enum class RandomFillKind : std::int32_t {
  kFp8Codes = 0,     // E4M3 codes with |x| in [0.5, 2): random sign and low mantissa bits
  kBytes = 1,        // every bit random (packed FP4: every E2M1 code)
  kBf16Uniform = 2,  // bf16 of mean + half * U(-1, 1), rounded to nearest even
  kF32Uniform = 3,   // f32 of mean + half * U(-1, 1)
};

struct RandomFillSpec {
  RandomFillKind kind = RandomFillKind::kBytes;
  std::uint64_t key = 0;  // per tensor: seed and name mixed (random_fill_key)
  float mean = 0.0f;
  float half = 0.0f;      // half-width of the uniform distribution
};

// splitmix64's output function over key + (index + 1) * golden ratio: a full-period counter
// generator whose words pass BigCrush; word `index` needs no earlier word.
DI_RANDOM_FN std::uint64_t random_word(std::uint64_t key, std::uint64_t index) {
  std::uint64_t z = key + (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The key of one tensor: FNV-1a of its name, mixed with the seed (stable across platforms).
inline std::uint64_t random_fill_key(std::uint64_t seed, const char* name, std::size_t length) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < length; ++i) h = (h ^ static_cast<unsigned char>(name[i])) * 0x100000001b3ull;
  return random_word(seed * 0xd1b54a32d192ed03ull, h);
}

// Byte `index` of a byte-kind tensor: byte index % 8 of word index / 8.
DI_RANDOM_FN std::uint8_t random_byte(const RandomFillSpec& spec, std::uint64_t word, std::uint64_t index) {
  const auto r = static_cast<std::uint8_t>(word >> (8 * (index % 8)));
  if (spec.kind != RandomFillKind::kFp8Codes) return r;
  // Exponent field 0111 (2^0) or, with bit 3 of r set, 0110 (2^-1): codes 0x38..0x3F / 0x30..0x37.
  return static_cast<std::uint8_t>((r & 0x80) | (0x38 - ((r >> 3) & 0x08)) | (r & 0x07));
}

// Element `index` of a float-kind tensor: 24 random bits of its own word scaled to [0, 1).
DI_RANDOM_FN float random_uniform(const RandomFillSpec& spec, std::uint64_t index) {
  const float u = static_cast<float>(random_word(spec.key, index) >> 40) * (1.0f / 16777216.0f);
#if defined(__CUDA_ARCH__)
  // Separately rounded multiply and add, as the host computes it (nvcc would fuse them into an FMA).
  return __fadd_rn(spec.mean, __fmul_rn(spec.half, 2.0f * u - 1.0f));
#else
  return spec.mean + spec.half * (2.0f * u - 1.0f);
#endif
}

// f32 -> bf16 bits, round to nearest even (the values are finite).
DI_RANDOM_FN std::uint16_t random_bf16_bits(float v) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace deepinfer::ops
