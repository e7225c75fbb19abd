// The checks every Feistel version type passes (feistel_v1_test.cc, feistel_v2_test.cc): a
// bijection of [0, n) for sizes around the versions' boundaries, inverse() undoing operator(),
// gather() equal to operator() per instruction set (a test per level, skipped and logged where the
// CPU lacks it), and FeistelPermutation's version `kVersion` reading exactly the type.
#ifndef DISTSAMPLER_TESTS_FEISTEL_VERSION_CHECKS_H_
#define DISTSAMPLER_TESTS_FEISTEL_VERSION_CHECKS_H_

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "distsampler/feistel.h"
#include "skip_log.h"

namespace distsampler {

template <class F>
void expect_bijection_with_inverse() {
  for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{63}, uint64_t{64},
                     uint64_t{65}, uint64_t{100}, uint64_t{1000}, uint64_t{65536},
                     uint64_t{65537}, uint64_t{131073}}) {
    const F f(n, 7, 3, F::kDefaultRounds);
    ASSERT_EQ(f.size(), n);
    std::vector<bool> seen(n, false);
    for (uint64_t p = 0; p < n; ++p) {
      const uint64_t x = f(p);
      ASSERT_LT(x, n) << n;
      ASSERT_FALSE(seen[x]) << n << " repeats " << x;
      seen[x] = true;
      ASSERT_EQ(f.inverse(x), p) << n;
    }
  }
}

// The name of a SimdLevel test parameter ("sse41": gtest names take letters, digits and '_').
struct SimdLevelParamName {
  std::string operator()(const ::testing::TestParamInfo<detail::SimdLevel>& info) const {
    std::string name;
    for (const char* c = detail::simd_level_name(info.param); *c != '\0'; ++c) {
      if (std::isalnum(static_cast<unsigned char>(*c))) name += *c;
    }
    return name;
  }
};

// Skips, visibly and logged (skip_log.h), the rest of a kernel test whose level this build or
// CPU does not run: legitimate, but counted, never a silent pass.
#define DISTSAMPLER_SKIP_UNLESS_SUPPORTED(level)                                              \
  do {                                                                                       \
    if (!::distsampler::detail::simd_level_supported(level)) {                               \
      DISTSAMPLER_SKIP(std::string("kernel ") + ::distsampler::detail::simd_level_name(level) + \
                       " not run: this CPU (or build) lacks the instruction set");           \
    }                                                                                        \
  } while (0)

// gather() with the kernel of `level` (supported) equals operator().
template <class F>
void expect_gather_equals_operator(detail::SimdLevel level) {
  const F f(1000003, 11, 2, F::kDefaultRounds);
  const uint64_t count = 300000, stride = 3, first = 5;
  std::vector<uint64_t> expected(count), got(count);
  for (uint64_t j = 0; j < count; ++j) expected[j] = f(first + j * stride);
  f.gather(first, stride, count, got.data(), level);
  EXPECT_EQ(got, expected) << detail::simd_level_name(level);
}

template <class F>
void expect_feistel_permutation_reads_it(int version) {
  const uint64_t n = 123457;
  const F f(n, 5, 9, F::kDefaultRounds);
  const FeistelPermutation p(n, 5, 9, FeistelPermutation::kVersionDefaultRounds, version);
  EXPECT_EQ(p.version(), version);
  for (uint64_t q = 0; q < n; q += 97) ASSERT_EQ(p(q), f(q)) << q;
}

}  // namespace distsampler

#endif  // DISTSAMPLER_TESTS_FEISTEL_VERSION_CHECKS_H_
