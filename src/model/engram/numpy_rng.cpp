// NumPy's SeedSequence, PCG64 and bounded int64 sampling, transcribed from NumPy's algorithms
// (numpy/random/bit_generator.pyx, pcg64.h, distributions.c) so V4.1's hash multipliers come out
// identical to np.random.default_rng(10007 * layer).integers(...).
#include "model/engram/numpy_rng.h"

#include <array>

#include "common/error.h"

namespace deepinfer::model::engram {
namespace {

// SeedSequence constants (bit_generator.pyx).
constexpr std::uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u;
constexpr std::uint32_t kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
constexpr std::uint32_t kMixMultL = 0xca01f9ddu, kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;
constexpr std::size_t kPoolSize = 4;

std::uint32_t hashmix(std::uint32_t value, std::uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

std::uint32_t mix(std::uint32_t x, std::uint32_t y) {
  std::uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// PCG64's 128-bit multiplier (PCG_DEFAULT_MULTIPLIER_128).
constexpr std::uint64_t kMulHi = 0x2360ED051FC65DA4ull, kMulLo = 0x4385DF649FCCF645ull;

__extension__ typedef unsigned __int128 U128;

U128 make_u128(std::uint64_t hi, std::uint64_t lo) { return (static_cast<U128>(hi) << 64) | lo; }

}  // namespace

std::vector<std::uint64_t> seed_sequence_state(std::uint64_t entropy, std::size_t n_words) {
  // _coerce_to_uint32_array: the integer's 32-bit words, least significant first ([0] for 0).
  std::vector<std::uint32_t> words;
  do {
    words.push_back(static_cast<std::uint32_t>(entropy & 0xffffffffu));
    entropy >>= 32;
  } while (entropy != 0);
  std::array<std::uint32_t, kPoolSize> pool{};
  std::uint32_t hash_const = kInitA;
  for (std::size_t i = 0; i < kPoolSize; ++i) pool[i] = hashmix(i < words.size() ? words[i] : 0u, hash_const);
  for (std::size_t src = 0; src < kPoolSize; ++src)
    for (std::size_t dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  for (std::size_t src = kPoolSize; src < words.size(); ++src)
    for (std::size_t dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(words[src], hash_const));
  // generate_state: 32-bit words cycled from the pool; uint64 words are little-endian pairs.
  std::vector<std::uint64_t> out(n_words);
  std::uint32_t hash_b = kInitB;
  for (std::size_t i = 0; i < 2 * n_words; ++i) {
    std::uint32_t v = pool[i % kPoolSize];
    v ^= hash_b;
    hash_b *= kMultB;
    v *= hash_b;
    v ^= v >> kXShift;
    out[i / 2] |= static_cast<std::uint64_t>(v) << (32 * (i % 2));
  }
  return out;
}

Pcg64::Pcg64(std::uint64_t seed) {
  const auto words = seed_sequence_state(seed, 4);
  // pcg64_set_seed: state seed = words[0]:words[1], stream = words[2]:words[3] (high:low);
  // pcg_setseq_128_srandom_r: state 0, inc = stream*2+1, step, state += seed, step.
  const U128 initstate = make_u128(words[0], words[1]);
  const U128 inc = (make_u128(words[2], words[3]) << 1) | 1u;
  inc_hi_ = static_cast<std::uint64_t>(inc >> 64);
  inc_lo_ = static_cast<std::uint64_t>(inc);
  state_hi_ = state_lo_ = 0;
  step();
  const U128 s = make_u128(state_hi_, state_lo_) + initstate;
  state_hi_ = static_cast<std::uint64_t>(s >> 64);
  state_lo_ = static_cast<std::uint64_t>(s);
  step();
}

void Pcg64::step() {
  const U128 s = make_u128(state_hi_, state_lo_) * make_u128(kMulHi, kMulLo) + make_u128(inc_hi_, inc_lo_);
  state_hi_ = static_cast<std::uint64_t>(s >> 64);
  state_lo_ = static_cast<std::uint64_t>(s);
}

std::uint64_t Pcg64::next_u64() {
  step();
  // XSL-RR: rotate (high ^ low) right by the top 6 bits of the state.
  const std::uint64_t x = state_hi_ ^ state_lo_;
  const unsigned rot = static_cast<unsigned>(state_hi_ >> 58);
  return (x >> rot) | (x << ((64u - rot) & 63u));
}

std::uint32_t Pcg64::next_u32() {
  if (has_u32_) {
    has_u32_ = false;
    return u32_;
  }
  const std::uint64_t next = next_u64();
  has_u32_ = true;
  u32_ = static_cast<std::uint32_t>(next >> 32);
  return static_cast<std::uint32_t>(next & 0xffffffffu);
}

void integers_int64(Pcg64& rng, std::int64_t low, std::int64_t high, std::span<std::int64_t> out) {
  DI_CHECK(low < high, "integers_int64: low {} must be below high {}", low, high);
  // random_bounded_uint64_fill(off = low, rng = high - low - 1, use_masked = false).
  const std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low) - 1u;
  const auto off = static_cast<std::uint64_t>(low);
  for (auto& value : out) {
    std::uint64_t draw = 0;
    if (range == 0) {
      draw = 0;
    } else if (range <= 0xffffffffull) {
      if (range == 0xffffffffull) {
        draw = rng.next_u32();
      } else {  // buffered_bounded_lemire_uint32
        const std::uint64_t excl = range + 1;
        std::uint64_t m = std::uint64_t{rng.next_u32()} * excl;
        auto leftover = static_cast<std::uint32_t>(m);
        if (leftover < excl) {
          const auto threshold = static_cast<std::uint32_t>((0xffffffffull - range) % excl);
          while (leftover < threshold) {
            m = std::uint64_t{rng.next_u32()} * excl;
            leftover = static_cast<std::uint32_t>(m);
          }
        }
        draw = m >> 32;
      }
    } else if (range == ~std::uint64_t{0}) {
      draw = rng.next_u64();
    } else {  // bounded_lemire_uint64
      const std::uint64_t excl = range + 1;
      U128 m = static_cast<U128>(rng.next_u64()) * excl;
      auto leftover = static_cast<std::uint64_t>(m);
      if (leftover < excl) {
        const std::uint64_t threshold = (~std::uint64_t{0} - range) % excl;
        while (leftover < threshold) {
          m = static_cast<U128>(rng.next_u64()) * excl;
          leftover = static_cast<std::uint64_t>(m);
        }
      }
      draw = static_cast<std::uint64_t>(m >> 64);
    }
    value = static_cast<std::int64_t>(off + draw);
  }
}

std::vector<std::int64_t> default_rng_integers(std::uint64_t seed, std::int64_t low, std::int64_t high,
                                               std::size_t n) {
  Pcg64 rng(seed);
  std::vector<std::int64_t> out(n);
  integers_int64(rng, low, high, out);
  return out;
}

}  // namespace deepinfer::model::engram
