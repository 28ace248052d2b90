// Philox4x32 against the Random123 known-answer vectors (tests/kat_vectors of
// DEShawResearch/random123: counter, key -> output), and the derived uniform / Gumbel draws.
#include "engine/philox.h"

#include <gtest/gtest.h>

#include <set>

namespace deepinfer::engine {
namespace {

struct Kat {
  int rounds;
  PhiloxCounter ctr;
  PhiloxKey key;
  PhiloxCounter want;
};

TEST(Philox, MatchesRandom123KnownAnswers) {
  const Kat kats[] = {
      {10, {0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {10, {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {10, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
      {7, {0, 0, 0, 0}, {0, 0}, {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
      {7, {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
      {7, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
  };
  for (const Kat& k : kats) EXPECT_EQ(philox4x32(k.ctr, k.key, k.rounds), k.want) << "rounds " << k.rounds;
  static_assert(philox4x32({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u, "usable at compile time");
}

TEST(Philox, BitsArePureFunctionsOfSeedPositionPurposeAndIndex) {
  EXPECT_EQ(philox_bits(42, 7, RandomPurpose::kTokenSample, 1001), philox_bits(42, 7, RandomPurpose::kTokenSample, 1001));
  std::set<std::uint32_t> seen = {philox_bits(42, 7, RandomPurpose::kTokenSample, 1001),
                                  philox_bits(43, 7, RandomPurpose::kTokenSample, 1001),
                                  philox_bits(42, 8, RandomPurpose::kTokenSample, 1001),
                                  philox_bits(42, 7, RandomPurpose::kSpecAccept, 1001),
                                  philox_bits(42, 7, RandomPurpose::kTokenSample, 1002)};
  EXPECT_EQ(seen.size(), 5u);
  // Lane i of a block is entry 4 * block + i.
  const PhiloxCounter block = philox_block(42, 7, RandomPurpose::kTokenSample, 250);
  EXPECT_EQ(block[1], philox_bits(42, 7, RandomPurpose::kTokenSample, 1001));
}

TEST(Philox, UniformAndGumbelStayInsideTheirBounds) {
  EXPECT_GT(uniform_from_bits(0), 0.0);
  EXPECT_LT(uniform_from_bits(~0u), 1.0);
  EXPECT_NEAR(gumbel_from_bits(0), -3.13, 0.01);
  EXPECT_NEAR(gumbel_from_bits(~0u), 22.87, 0.01);
  EXPECT_LT(gumbel_from_bits(1000), gumbel_from_bits(1001));  // monotone
  // Mean of Gumbel(0, 1) is the Euler-Mascheroni constant.
  double sum = 0.0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) sum += gumbel_from_bits(philox_bits(9, 0, RandomPurpose::kTokenSample, static_cast<std::uint32_t>(i)));
  EXPECT_NEAR(sum / n, 0.5772, 0.01);
}

TEST(Philox, DerivedSeedsKeepTheFirstAndDifferForTheRest) {
  EXPECT_EQ(derive_seed(123, 0), 123u);
  EXPECT_NE(derive_seed(123, 1), derive_seed(123, 2));
  EXPECT_NE(derive_seed(123, 1), derive_seed(124, 1));
}

}  // namespace
}  // namespace deepinfer::engine
