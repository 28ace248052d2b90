// The narrow float conversions against a brute-force oracle: decode every code from the format's
// definition, then "nearest representable value, ties to the even code" by search.
#include "tensor/float_formats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace deepinfer {
namespace {

struct Code {
  double value;
  std::uint32_t code;
};

// Positive finite codes of a format sorted by value, given a decoder of the definition.
template <typename Decode>
std::vector<Code> positive_codes(std::uint32_t count, Decode decode) {
  std::vector<Code> codes;
  for (std::uint32_t c = 0; c < count; ++c) {
    const double v = decode(c);
    if (std::isfinite(v) && !std::signbit(v)) codes.push_back({v, c});
  }
  std::sort(codes.begin(), codes.end(), [](const Code& a, const Code& b) { return a.value < b.value; });
  return codes;
}

// Nearest code to |x| among `codes`, ties to the even code. Returns the largest code when x is past
// the largest value (saturation).
std::uint32_t nearest(const std::vector<Code>& codes, double x) {
  auto it = std::lower_bound(codes.begin(), codes.end(), x, [](const Code& c, double v) { return c.value < v; });
  if (it == codes.end()) return codes.back().code;
  if (it == codes.begin() || it->value == x) return it->code;
  const Code& hi = *it;
  const Code& lo = *(it - 1);
  const double dlo = x - lo.value;
  const double dhi = hi.value - x;
  if (dlo < dhi) return lo.code;
  if (dhi < dlo) return hi.code;
  return (lo.code & 1u) == 0 ? lo.code : hi.code;
}

// Probe points: every code value, every midpoint, and the floats just either side of them.
std::vector<float> probes(const std::vector<Code>& codes) {
  std::vector<float> out;
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const float v = static_cast<float>(codes[i].value);
    out.push_back(v);
    out.push_back(std::nextafter(v, 0.0f));
    out.push_back(std::nextafter(v, std::numeric_limits<float>::infinity()));
    if (i + 1 < codes.size()) {
      const float mid = static_cast<float>((codes[i].value + codes[i + 1].value) / 2);
      out.push_back(mid);
      out.push_back(std::nextafter(mid, 0.0f));
      out.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t i = 0; i + 1 < codes.size(); ++i)
    for (int k = 0; k < 8; ++k)
      out.push_back(static_cast<float>(codes[i].value + unit(rng) * (codes[i + 1].value - codes[i].value)));
  return out;
}

double e4m3_definition(std::uint32_t c) {
  const int e = static_cast<int>((c >> 3) & 0xf), m = static_cast<int>(c & 7);
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (c & 0x80) ? -mag : mag;
}

TEST(FloatFormats, E4M3DecodesEveryCodeByDefinition) {
  for (std::uint32_t c = 0; c < 256; ++c) {
    const double want = e4m3_definition(c);
    const float got = e4m3_to_f32(static_cast<std::uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;
    }
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(FloatFormats, E4M3RoundsToNearestEvenAtEveryBoundary) {
  const auto codes = positive_codes(128, e4m3_definition);
  ASSERT_EQ(codes.size(), 127u);
  for (float x : probes(codes)) {
    if (x > kE4M3Max) continue;
    EXPECT_EQ(f32_to_e4m3(x), nearest(codes, x)) << x;
    EXPECT_EQ(f32_to_e4m3(-x), nearest(codes, x) | 0x80u) << -x;
  }
}

TEST(FloatFormats, E4M3SweepOfAllFloatMagnitudes) {
  const auto codes = positive_codes(128, e4m3_definition);
  for (std::uint32_t bits = 0; bits < 0x43f00000u; bits += 997) {
    const float x = std::bit_cast<float>(bits);
    ASSERT_EQ(f32_to_e4m3(x), nearest(codes, x)) << x;
  }
}

TEST(FloatFormats, E4M3OverflowSaturatesOrBecomesNaN) {
  EXPECT_EQ(f32_to_e4m3(460.0f), 0x7e);  // below the 464 midpoint
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7e);  // tie goes to the even code (448)
  EXPECT_EQ(f32_to_e4m3(470.0f, Fp8Overflow::kNaN), 0x7e);  // rounds to 448 even without saturation
  EXPECT_EQ(f32_to_e4m3(480.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(480.0f, Fp8Overflow::kNaN), 0x7f);
  EXPECT_EQ(f32_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity(), Fp8Overflow::kNaN), 0x7f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
}

TEST(FloatFormats, E2M1CodesAndRoundingMatchTheDefinition) {
  auto definition = [](std::uint32_t c) {
    const int e = static_cast<int>((c >> 1) & 3), m = static_cast<int>(c & 1);
    const double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
    return (c & 8) ? -mag : mag;
  };
  for (std::uint32_t c = 0; c < 16; ++c) EXPECT_EQ(static_cast<double>(e2m1_to_f32(static_cast<std::uint8_t>(c))), definition(c));
  const auto codes = positive_codes(8, definition);
  for (float x : probes(codes)) {
    EXPECT_EQ(f32_to_e2m1(x), nearest(codes, x)) << x;
    EXPECT_EQ(f32_to_e2m1(-x), nearest(codes, x) | 8u) << -x;
  }
  // The thresholds MODEL_SPEC A3.2 lists, ties to even.
  EXPECT_EQ(f32_to_e2m1(0.25f), 0);
  EXPECT_EQ(f32_to_e2m1(0.75f), 2);
  EXPECT_EQ(f32_to_e2m1(1.25f), 2);
  EXPECT_EQ(f32_to_e2m1(1.75f), 4);
  EXPECT_EQ(f32_to_e2m1(2.5f), 4);
  EXPECT_EQ(f32_to_e2m1(3.5f), 6);
  EXPECT_EQ(f32_to_e2m1(5.0f), 6);
  EXPECT_EQ(f32_to_e2m1(100.0f), 7);
}

TEST(FloatFormats, Fp4PackingPutsEvenElementInLowNibble) {
  const std::uint8_t packed[2] = {fp4_pack(0x1, 0xa), fp4_pack(0x7, 0xf)};
  EXPECT_EQ(packed[0], 0xa1);
  EXPECT_EQ(fp4_unpack(packed, 0), 0x1);
  EXPECT_EQ(fp4_unpack(packed, 1), 0xa);
  EXPECT_EQ(fp4_unpack(packed, 2), 0x7);
  EXPECT_EQ(fp4_unpack(packed, 3), 0xf);
}

TEST(FloatFormats, UE8M0DecodesPowersOfTwoAndCeilsLikeTheReference) {
  for (int e = 0; e < 255; ++e)
    EXPECT_EQ(static_cast<double>(ue8m0_to_f32(static_cast<std::uint8_t>(e))), std::ldexp(1.0, e - 127)) << e;
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(0xff)));
  for (int e = 1; e < 254; ++e) {
    const float p = std::ldexp(1.0f, e - 127);
    EXPECT_EQ(ue8m0_ceil_code(p), e);
    EXPECT_EQ(ue8m0_ceil_code(std::nextafter(p, std::numeric_limits<float>::infinity())), e + 1);
    EXPECT_EQ(ue8m0_ceil_code(std::nextafter(p, 0.0f)), e);
  }
  EXPECT_EQ(pow2_ceil(3.0f), 4.0f);
  EXPECT_EQ(pow2_ceil(1e-4f * (1.0f / 448.0f)), std::ldexp(1.0f, -22));
}

TEST(FloatFormats, Bf16RoundsToNearestEven) {
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t bits = rng() % 0x7f7f0000u;  // below the largest finite bf16
    const float x = std::bit_cast<float>(bits);
    const float lo = std::bit_cast<float>(bits & 0xffff0000u);
    const float hi = std::bit_cast<float>((bits & 0xffff0000u) + 0x10000u);
    const double dlo = static_cast<double>(x) - lo, dhi = static_cast<double>(hi) - x;
    const std::uint16_t lo_code = static_cast<std::uint16_t>(bits >> 16);
    const std::uint16_t want = dlo < dhi ? lo_code : dhi < dlo ? static_cast<std::uint16_t>(lo_code + 1)
                                       : ((lo_code & 1) ? static_cast<std::uint16_t>(lo_code + 1) : lo_code);
    ASSERT_EQ(f32_to_bf16(x), want) << x;
  }
  for (std::uint32_t c = 0; c < 0x10000u; ++c) {
    const float v = bf16_to_f32(static_cast<std::uint16_t>(c));
    if (!std::isnan(v)) {
      ASSERT_EQ(f32_to_bf16(v), c);
    }
  }
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(FloatFormats, F16MatchesTheDefinitionForEveryCodeAndRounds) {
  auto definition = [](std::uint32_t c) {
    const int e = static_cast<int>((c >> 10) & 0x1f), m = static_cast<int>(c & 0x3ff);
    if (e == 31) {
      if (m) return std::numeric_limits<double>::quiet_NaN();
      return (c & 0x8000) ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    }
    const double mag = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15);
    return (c & 0x8000) ? -mag : mag;
  };
  for (std::uint32_t c = 0; c < 0x10000u; ++c) {
    const double want = definition(c);
    const float got = f16_to_f32(static_cast<std::uint16_t>(c));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << c;
    }
  }
  const auto codes = positive_codes(0x7c00u, definition);
  for (float x : probes(codes)) {
    ASSERT_EQ(f32_to_f16(x), nearest(codes, x)) << x;
  }
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // ties to even: infinity
}

}  // namespace
}  // namespace deepinfer
