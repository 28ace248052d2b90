// NumPy's default random generator, bit-exact: np.random.default_rng(seed) (SeedSequence -> PCG64)
// and Generator.integers(low, high, size, dtype=np.int64). V4.1's Engram hash multipliers are drawn
// with it (MODEL_SPEC B4.7 step 3), so reproducing it here needs no precomputed constants.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::model::engram {

// NumPy's SeedSequence(entropy).generate_state(n_words, np.uint64) for a non-negative integer
// entropy and no spawn key (pool size 4).
std::vector<std::uint64_t> seed_sequence_state(std::uint64_t entropy, std::size_t n_words);

// NumPy's PCG64 bit generator (128-bit LCG, XSL-RR output), seeded like PCG64(SeedSequence(seed)).
class Pcg64 {
 public:
  explicit Pcg64(std::uint64_t seed);
  std::uint64_t next_u64();
  // next_uint32: the two halves of one 64-bit draw, low half first (NumPy buffers the high half).
  std::uint32_t next_u32();

 private:
  std::uint64_t state_hi_ = 0, state_lo_ = 0, inc_hi_ = 0, inc_lo_ = 0;
  bool has_u32_ = false;
  std::uint32_t u32_ = 0;
  void step();
};

// Generator.integers(low, high, size=out.size(), dtype=np.int64) (endpoint=False): Lemire's
// bounded method as NumPy implements it (32-bit draws when high - low - 1 fits in 32 bits).
// Requires low < high.
void integers_int64(Pcg64& rng, std::int64_t low, std::int64_t high, std::span<std::int64_t> out);

// np.random.default_rng(seed).integers(low, high, size=n, dtype=np.int64).
std::vector<std::int64_t> default_rng_integers(std::uint64_t seed, std::int64_t low, std::int64_t high, std::size_t n);

}  // namespace deepinfer::model::engram
