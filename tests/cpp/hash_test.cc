// hash.h: the splitmix64 finalizer's known answers and the 64 x 64 -> 128 high multiply of
// scale_to, native and portable, bit for bit.
#include "distsampler/hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>

namespace distsampler {
namespace {

constexpr uint64_t kMax = ~uint64_t{0};

// splitmix64 seeded with 0: its first outputs are mix64(0), mix64(golden gamma), ...
TEST(Hash, Mix64KnownAnswers) {
  EXPECT_EQ(mix64(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(mix64(0x9e3779b97f4a7c15ull), 0x6e789e6aa1b965f4ull);
  static_assert(mix64(0) == 0xe220a8397b1dcdafull, "mix64 is constexpr");
}

TEST(Hash, MulHigh64PortableEqualsNative) {
  static_assert(detail::mul_high64_portable(kMax, kMax) == kMax - 1, "");
  static_assert(detail::mul_high64(kMax, kMax) == kMax - 1, "");
  const std::initializer_list<uint64_t> edges = {0,
                                                 1,
                                                 2,
                                                 0xffffffffull,
                                                 0x100000000ull,
                                                 0x100000001ull,
                                                 0x7fffffffffffffffull,
                                                 0x8000000000000000ull,
                                                 0xffffffff00000000ull,
                                                 0x00000000ffffffffull,
                                                 kMax - 1,
                                                 kMax};
  for (uint64_t x : edges) {
    for (uint64_t n : edges) {
      EXPECT_EQ(detail::mul_high64_portable(x, n), detail::mul_high64(x, n)) << x << " " << n;
    }
  }
  uint64_t counter = 0;
  for (int i = 0; i < 1000000; ++i) {
    const uint64_t x = mix64(counter++), n = mix64(counter++) >> (i % 64);
    ASSERT_EQ(detail::mul_high64_portable(x, n), detail::mul_high64(x, n)) << x << " " << n;
  }
}

TEST(Hash, ScaleToIsFloorOfXTimesNOverTwoToThe64) {
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{3}, uint64_t{1000}, kMax}) {
    EXPECT_EQ(scale_to(0, n), 0u);
    EXPECT_EQ(scale_to(kMax, n), n == 0 ? 0 : n - 1);
    EXPECT_EQ(scale_to(uint64_t{1} << 63, n), n / 2);
  }
  EXPECT_EQ(scale_to(0xc000000000000000ull, 1000), 750u);
}

}  // namespace
}  // namespace distsampler
