// stats.h: what both halves of the quality battery share: the permutation source, the
// z-scores of chi-squares and of the worst of many, and the number formats of the tables.
#ifndef DISTSAMPLER_QUALITY_STATS_H_
#define DISTSAMPLER_QUALITY_STATS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace quality {

// A permutation of [0, n) from a key: out[i] for every position i < n.
using Fill = std::function<void(uint64_t n, uint64_t seed, uint64_t* out)>;

// A chi-square statistic of `dof` degrees of freedom as a standard normal deviate (Wilson and
// Hilferty's cube root); 0 without degrees of freedom.
inline double chi2_z(double chi2, double dof) {
  if (dof <= 0) return 0;
  const double h = 2.0 / (9.0 * dof);
  return (std::cbrt(chi2 / dof) - (1 - h)) / std::sqrt(h);
}

inline double two_sided_p(double z) { return std::erfc(std::fabs(z) / std::sqrt(2.0)); }

// The |z| whose two-sided tail is p (bisection; p in (0, 1]).
inline double z_of_p(double p) {
  double lo = 0, hi = 40;
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    if (two_sided_p(mid) > p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return (lo + hi) / 2;
}

// The largest |z| of `count` as one deviate: Sidak's adjustment (the deviate whose two-sided tail
// is 1 - (1 - p)^count), sign kept.
inline double adjust(double z, double count) {
  if (count <= 1) return z;
  const double p = two_sided_p(z);
  double a;
  if (p < 1e-200) {
    // Beyond double precision: the tail is exp(-z^2 / 2) up to a slowly varying factor.
    a = std::sqrt(std::max(z * z - 2 * std::log(count), 0.0));
  } else {
    a = z_of_p(-std::expm1(count * std::log1p(-p)));
  }
  return z < 0 ? -a : a;
}

inline int bit_width(uint64_t x) {
  int w = 0;
  for (; x != 0; x >>= 1) ++w;
  return w;
}

inline std::string fmt(double x, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, x);
  return buf;
}

inline std::string size_name(uint64_t n) { return n == 10000000 ? "10^7" : std::to_string(n); }

}  // namespace quality

#endif  // DISTSAMPLER_QUALITY_STATS_H_
