#include "distsampler/partition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace distsampler {
namespace {

// PyTorch's own formula, in floating point as Python computes it (exact for these sizes).
uint64_t torch_num_samples(uint64_t n, uint64_t w, bool drop_last) {
  if (drop_last && n % w != 0) {
    return static_cast<uint64_t>(std::ceil((static_cast<double>(n) - w) / w));
  }
  return static_cast<uint64_t>(std::ceil(static_cast<double>(n) / w));
}

TEST(Partition, NumSamplesEqualsPyTorchsFormula) {
  for (uint64_t n = 0; n <= 300; ++n) {
    for (uint64_t w = 1; w <= 40; ++w) {
      for (bool drop : {false, true}) {
        Partition p{n, w, 0, drop, 0};
        ASSERT_EQ(p.num_samples(), torch_num_samples(n, w, drop)) << n << " " << w << " " << drop;
        ASSERT_EQ(p.total_size(), p.num_samples() * w);
      }
    }
  }
}

TEST(Partition, InterleavesRanksAndWrapsAround) {
  Partition p{3, 8, 5, false, 0};  // n < W: positions 5 -> 5 mod 3 = 2
  EXPECT_EQ(p.num_samples(), 1u);
  EXPECT_EQ(p.global_position(0), 5u);
  EXPECT_EQ(p.order_position(0), 2u);
  Partition q{10, 3, 1, false, 0};  // positions 1, 4, 7, 10 -> 10 mod 10 = 0
  EXPECT_EQ(q.num_samples(), 4u);
  EXPECT_EQ(q.order_position(3), 0u);
}

TEST(Partition, StartAtOrPastTheEndLeavesNoSamples) {
  for (uint64_t start : {10, 11, 12, 1000}) {
    EXPECT_EQ((Partition{10, 3, 1, false, start}.num_samples()), 0u);
    EXPECT_EQ((Partition{10, 3, 1, true, start}.num_samples()), 0u);
  }
}

TEST(Partition, StartShiftsEveryRank) {
  Partition p{10, 3, 2, false, 4};  // remaining 6: positions 6, 9
  EXPECT_EQ(p.num_samples(), 2u);
  EXPECT_EQ(p.global_position(0), 6u);
  EXPECT_EQ(p.global_position(1), 9u);
}

void expect_invalid(const Partition& p, const std::string& field) {
  try {
    p.validate();
    ADD_FAILURE() << "accepted invalid " << field;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(field + " = ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("allowed"), std::string::npos) << e.what();
  }
}

TEST(Partition, ValidateNamesTheFieldValueAndRange) {
  expect_invalid({10, 0, 0, false, 0}, "world_size");
  expect_invalid({10, 3, 3, false, 0}, "rank");
  expect_invalid({10, 3, UINT64_MAX, false, 0}, "rank");
  expect_invalid({(uint64_t{1} << 63) + 1, 3, 0, false, 0}, "size");
  expect_invalid({10, 3, 0, false, (uint64_t{1} << 63) + 1}, "start");
  expect_invalid({10, (uint64_t{1} << 63) + 1, 0, false, 0}, "world_size");
  EXPECT_NO_THROW((Partition{uint64_t{1} << 63, uint64_t{1} << 63, 0, false, 0}.validate()));
}

TEST(Partition, LargestSizesDoNotOverflow) {
  const uint64_t n = uint64_t{1} << 63;
  Partition p{n, 3, 2, false, 0};
  p.validate();
  const uint64_t last = p.num_samples() - 1;
  EXPECT_EQ(p.num_samples(), n / 3 + 1);
  EXPECT_LT(p.order_position(last), n);
  Partition q{n, n, n - 1, false, 0};
  EXPECT_EQ(q.num_samples(), 1u);
  EXPECT_EQ(q.order_position(0), n - 1);
}

}  // namespace
}  // namespace distsampler
