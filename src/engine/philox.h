// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11): a
// counter-based generator, so the random draw for (seed, position, purpose, vocab id) is a pure
// function of those values, the basis of batch-independent seeded sampling.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "ops/sampling_math.h"

namespace deepinfer::engine {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

// The published constants: round multipliers and the Weyl key increments (golden ratio, sqrt 3 - 1).
inline constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;

// Philox4x32 with `rounds` rounds (10 is the standard, crush-resistant choice).
constexpr PhiloxCounter philox4x32(PhiloxCounter ctr, PhiloxKey key, int rounds = 10) {
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kPhiloxM0) * ctr[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kPhiloxM1) * ctr[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

// What a draw is for: separate streams so that, e.g., the speculative accept test at a position
// never reuses the token-sampling noise of that position.
enum class RandomPurpose : std::uint32_t {
  kTokenSample = 0,     // Gumbel noise for sampling the token at a position
  kSpecAccept = 1,      // uniform for accepting a draft token (speculative verification)
  kSpecResidual = 2,    // Gumbel noise for the replacement token after a rejection
  kDraftSample = 3,     // drafter's own sampling
};

// The random stream of a sampled sequence. Entry `index` (a vocab id, or a draft slot) at
// sequence position `position` gets lane index % 4 of Philox(counter = (index / 4, position,
// purpose, 0), key = seed): a pure function of its arguments, so batch order, preemption and
// the rest of the batch cannot change it.
inline PhiloxCounter philox_block(std::uint64_t seed, std::uint32_t position, RandomPurpose purpose,
                                  std::uint32_t block) {
  const PhiloxKey key = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  return philox4x32({block, position, static_cast<std::uint32_t>(purpose), 0u}, key);
}
inline std::uint32_t philox_bits(std::uint64_t seed, std::uint32_t position, RandomPurpose purpose,
                                 std::uint32_t index) {
  return philox_block(seed, position, purpose, index >> 2)[index & 3u];
}

// Seed of completion `index` of a request with n > 1; completion 0 keeps the request's seed so
// n = 1 and the first of n agree.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint32_t index) {
  if (index == 0) return seed;
  const PhiloxCounter out = philox4x32({index, 0u, 0xFFFFFFFFu, 0u},
                                       {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return (static_cast<std::uint64_t>(out[1]) << 32) | out[0];
}

// Uniform in the open interval (0, 1): (bits + 0.5) / 2^32, exact in double.
inline double uniform_from_bits(std::uint32_t bits) { return (static_cast<double>(bits) + 0.5) * 0x1p-32; }

// Standard Gumbel(0, 1) sample from 32 random bits: -log(-log(u)), with the sampling ops' own log
// so the host and the device draw bit-identical noise. Monotone in the bits up to an ulp and
// bounded (gumbel_from_bits(0) .. gumbel_from_bits(~0u), about -3.13 .. 22.9), which lets the
// sampler skip tokens that cannot win the Gumbel-max race.
inline double gumbel_from_bits(std::uint32_t bits) { return ops::sampling::gumbel_from_bits(bits); }

}  // namespace deepinfer::engine
