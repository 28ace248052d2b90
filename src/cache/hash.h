// The 64-bit mixing function behind the prefix-cache hash chain (SplitMix64's finaliser: cheap
// and well mixed), shared with test models that need a stable hash of token histories.
#pragma once

#include <cstdint>

namespace deepinfer::cache {

inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace deepinfer::cache
