// The arithmetic of seeded sampling, written once for the host sampler, the CPU sampling op and the
// CUDA kernels so all three produce bit-identical noise, filters and log-probabilities: Philox4x32,
// own log/exp (libm and CUDA's differ by an ulp here and there), Gumbel noise from 32 random bits.
// Every double operation goes through dadd/dsub/dmul/ddiv, which on the device are the
// non-contractible round-to-nearest intrinsics (nvcc would otherwise fuse a*b+c into an FMA); host
// code including this header must be built with -ffp-contract=off. C++17 (seen by nvcc).
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/sampling.h"

#if defined(__CUDACC__)
#define DI_SAMPLING_HD __host__ __device__ __forceinline__
#else
#define DI_SAMPLING_HD inline
#endif

namespace deepinfer::ops::sampling {

DI_SAMPLING_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
DI_SAMPLING_HD double dsub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
DI_SAMPLING_HD double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
DI_SAMPLING_HD double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
// f32 versions for the logit processors (x - (freq * count + presence) must not become an FMA).
DI_SAMPLING_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
DI_SAMPLING_HD float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
DI_SAMPLING_HD float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DI_SAMPLING_HD float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

DI_SAMPLING_HD std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
DI_SAMPLING_HD double double_of(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
DI_SAMPLING_HD std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
DI_SAMPLING_HD bool is_nan(double x) { return x != x; }
DI_SAMPLING_HD bool is_finite(float x) { return (bits_of(x) & 0x7F800000u) != 0x7F800000u; }

inline constexpr double kInf = __builtin_huge_val();

// Natural logarithm, the fdlibm algorithm (Sun Microsystems, e_log.c; < 1 ulp): x = 2^k (1 + f)
// with 1 + f in [sqrt(2)/2, sqrt(2)), log(1 + f) = f - f²/2 + s (f²/2 + R(s²)), s = f / (2 + f).
DI_SAMPLING_HD double log(double x) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kLg1 = 6.666666666666735130e-01, kLg2 = 3.999999999940941908e-01;
  constexpr double kLg3 = 2.857142874366239149e-01, kLg4 = 2.222219843214978396e-01;
  constexpr double kLg5 = 1.818357216161805012e-01, kLg6 = 1.531383769920937332e-01;
  constexpr double kLg7 = 1.479819860511658591e-01;
  if (is_nan(x) || x < 0.0) return double_of(0x7FF8000000000000ull);
  if (x == 0.0) return -kInf;
  if (x == kInf) return x;
  int k = 0;
  std::uint64_t b = bits_of(x);
  if ((b >> 52) == 0) {  // subnormal: scale by 2^54 first
    b = bits_of(dmul(x, 18014398509481984.0));
    k = -54;
  }
  k += static_cast<int>(b >> 52) - 1023;
  const std::uint64_t mant = b & 0x000FFFFFFFFFFFFFull;
  // 1.mant >= sqrt(2) (0x3FF6A09E667F3BCD): use (1.mant) / 2 and k + 1.
  const bool halve = mant >= 0x6A09E667F3BCDull;
  const double m = double_of(mant | (halve ? 0x3FE0000000000000ull : 0x3FF0000000000000ull));
  k += halve ? 1 : 0;
  const double f = dsub(m, 1.0);  // exact (Sterbenz)
  const double s = ddiv(f, dadd(2.0, f));
  const double z = dmul(s, s), w = dmul(z, z);
  const double t1 = dmul(w, dadd(kLg2, dmul(w, dadd(kLg4, dmul(w, kLg6)))));
  const double t2 = dmul(z, dadd(kLg1, dmul(w, dadd(kLg3, dmul(w, dadd(kLg5, dmul(w, kLg7)))))));
  const double r = dadd(t2, t1);
  const double hfsq = dmul(dmul(0.5, f), f);
  const double dk = static_cast<double>(k);
  return dsub(dmul(dk, kLn2Hi), dsub(dsub(hfsq, dadd(dmul(s, dadd(hfsq, r)), dmul(dk, kLn2Lo))), f));
}

// e^x, the fdlibm algorithm (e_exp.c; < 1 ulp): x = k ln2 + r, |r| <= ln2 / 2, e^r by a rational
// approximation, then the exact scaling by 2^k.
DI_SAMPLING_HD double exp(double x) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kInvLn2 = 1.44269504088896338700e+00;
  constexpr double kP1 = 1.66666666666666019037e-01, kP2 = -2.77777777770155933842e-03;
  constexpr double kP3 = 6.61375632143793436117e-05, kP4 = -1.65339022054652515390e-06;
  constexpr double kP5 = 4.13813679705723846039e-08;
  if (is_nan(x)) return x;
  if (x > 7.09782712893383973096e+02) return kInf;
  if (x < -7.45133219101941108420e+02) return 0.0;
  if (x > -3.7252902984e-09 && x < 3.7252902984e-09) return dadd(1.0, x);  // |x| < 2^-28
  const int k = static_cast<int>(dadd(dmul(x, kInvLn2), x < 0.0 ? -0.5 : 0.5));
  const double dk = static_cast<double>(k);
  const double hi = dsub(x, dmul(dk, kLn2Hi)), lo = dmul(dk, kLn2Lo);
  const double r = dsub(hi, lo);
  const double t = dmul(r, r);
  const double c = dsub(r, dmul(t, dadd(kP1, dmul(t, dadd(kP2, dmul(t, dadd(kP3, dmul(t, dadd(kP4, dmul(t, kP5))))))))));
  const double y = dsub(1.0, dsub(dsub(lo, ddiv(dmul(r, c), dsub(2.0, c))), hi));
  // y in [0.7, 1.5): scale by 2^k in at most two exact steps (k may reach -1075 or +1024).
  if (k >= -1021 && k <= 1023) return dmul(y, double_of(static_cast<std::uint64_t>(k + 1023) << 52));
  if (k > 1023) return dmul(dmul(y, 2.0), double_of(static_cast<std::uint64_t>(k - 1 + 1023) << 52));
  return dmul(dmul(y, double_of(static_cast<std::uint64_t>(k + 1000 + 1023) << 52)),
              double_of(static_cast<std::uint64_t>(-1000 + 1023) << 52));
}

// ---- Philox4x32-10 (same constants and counter layout as engine/philox.h) ---------------------
struct Philox4 {
  std::uint32_t v[4];
};

DI_SAMPLING_HD Philox4 philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                                     std::uint32_t k0, std::uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The token-sampling stream (RandomPurpose::kTokenSample = 0): vocab ids 4b .. 4b+3 at `position`.
DI_SAMPLING_HD Philox4 token_noise_block(std::uint64_t seed, std::uint32_t position, std::uint32_t block) {
  return philox4x32_10(block, position, 0u, 0u, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Standard Gumbel(0, 1) from 32 random bits: -log(-log(u)), u = (bits + 0.5) / 2^32 (exact).
DI_SAMPLING_HD double gumbel_from_bits(std::uint32_t bits) {
  const double u = dmul(dadd(static_cast<double>(bits), 0.5), 2.3283064365386962890625e-10);
  return -sampling::log(-sampling::log(u));
}

// ---- fixed definitions shared by every implementation ------------------------------------------
// Top-p mass of a candidate in fixed point, exp(scaled - max) · 2^44 truncated: integer sums do not
// depend on their order, so a parallel reduction and a sequential loop agree exactly.
DI_SAMPLING_HD std::uint64_t nucleus_mass(float scaled, float max_value) {
  const double e = sampling::exp(dsub(static_cast<double>(scaled), static_cast<double>(max_value)));
  return static_cast<std::uint64_t>(dmul(e, 17592186044416.0));
}
// Whether a prefix of the ranking with mass `cum` completes the nucleus: cum >= top_p · Z.
DI_SAMPLING_HD bool nucleus_reached(std::uint64_t cum, std::uint64_t total, float top_p) {
  return static_cast<double>(cum) >= dmul(static_cast<double>(top_p), static_cast<double>(total));
}
// The min-p cut in scaled-logit space: keep scaled >= max + log(min_p).
DI_SAMPLING_HD double min_p_threshold(float max_value, float min_p) {
  return dadd(static_cast<double>(max_value), sampling::log(static_cast<double>(min_p)));
}
// The log-sum-exp of a row's raw logits sums exp(x - max) sequentially within chunks of this many
// ids, then the chunk sums sequentially: a fixed order a thread block can follow.
inline constexpr int kLseChunk = 256;

// Total order key of a float (higher value -> higher key; -0 and +0 equal; NaN not ordered).
DI_SAMPLING_HD std::uint32_t order_key(float x) {
  const std::uint32_t b = x == 0.0f ? 0u : bits_of(x);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

// A step launched ahead: the previous step's token x joins one row's penalty history
// (Backend::add_sampled_to_history; each non-empty list ends with a reserved entry).
DI_SAMPLING_HD void add_to_history(SampleRow& row, SampleEntry* e, std::int32_t num_entries, std::int32_t x) {
  if (row.seen_begin >= 0 && row.seen_begin < row.seen_end && row.seen_end <= num_entries) {
    bool found = false;
    for (std::int32_t i = row.seen_begin; i < row.seen_end - 1; ++i) found = found || e[i].id == x;
    if (found) {
      --row.seen_end;
    } else {
      e[row.seen_end - 1].id = x;
    }
  }
  if (row.count_begin >= 0 && row.count_begin < row.count_end && row.count_end <= num_entries) {
    std::int32_t at = -1;
    for (std::int32_t i = row.count_begin; i < row.count_end - 1; ++i) at = e[i].id == x ? i : at;
    if (at >= 0) {
      e[at].value = fadd(e[at].value, 1.0f);
      --row.count_end;
    } else {
      e[row.count_end - 1].id = x;
      e[row.count_end - 1].value = 1.0f;
    }
  }
}

}  // namespace deepinfer::ops::sampling
